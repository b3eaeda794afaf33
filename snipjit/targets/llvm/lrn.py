"""The channels-last LRN kernel: y = x / (bias + alpha/size · Σ x²)^beta, the sum over a window of `size`
neighbouring channels (those past the first or last channel count as zero), for each pixel of an NHWC
tensor, in one pass.

ABI (`KernelFunction`): `fn(ptrs, dims, begin, end, scratch)` computes pixels [begin, end). ptrs: x and y
[pixels, C] (contiguous), params f32 [alpha / size, bias]; dims: C. The scratchpad holds one pixel's
squares (`scratch_floats`): from `lead` on, with zeros before them and after their last vector, so that the
window of every channel vector is `size` plain unaligned loads — no masks but on the channel tail. Beta is
a constant of the kernel (`vmath` pow_static: a quarter exponent such as 0.75 costs two square roots).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import I64, CountedLoop, i64 as _c, when
from .tail_store import store_tail

F32 = ir.FloatType()
I32 = ir.IntType(32)
I1 = ir.IntType(1)
PTRS = ("x", "y", "params")
DIMS = ("C",)


@dataclass(frozen=True)
class LrnShape:
    """The shape of one generated kernel."""
    size: int       # channels in a window
    beta: float
    lanes: int      # f32 lanes per vector (the ISA level's width)
    fused: bool = True   # FMA instructions (else a multiply and an add)

    def __post_init__(self):
        if self.size < 1:
            raise ValueError(f"LRN size must be positive, got {self.size}")

    @property
    def before(self) -> int:
        """Channels of a window before its own (ONNX: floor((size - 1) / 2))."""
        return (self.size - 1) // 2

    @property
    def lead(self) -> int:
        """Where the squares start in the scratchpad: whole vectors of zeros before them."""
        return -(-self.before // self.lanes) * self.lanes

    def scratch_floats(self, channels: int) -> int:
        after = self.size - 1 - self.before
        vectors = -(-channels // self.lanes) + -(-after // self.lanes)
        return self.lead + vectors * self.lanes

    @property
    def name(self) -> str:
        beta = struct.unpack("<I", struct.pack("<f", self.beta))[0]
        return f"snipjit_lrn_s{self.size}_b{beta:08x}x{self.lanes}{'' if self.fused else '_mul_add'}"


def lrn_module(shape: LrnShape) -> ir.Module:
    """The module defining kernel `shape.name`."""
    lanes = shape.lanes
    vec, mask_t, ptr = ir.VectorType(F32, lanes), ir.VectorType(I1, lanes), ir.PointerType()
    module = ir.Module(shape.name)
    masked_load = ir.Function(module, ir.FunctionType(vec, [ptr, I32, mask_t, vec]), f"llvm.masked.load.v{lanes}f32.p0")
    masked_store = ir.Function(module, ir.FunctionType(ir.VoidType(), [vec, ptr, I32, mask_t]),
                               f"llvm.masked.store.v{lanes}f32.p0")
    fma = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{lanes}f32")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64, I64, ptr]), shape.name)
    ptrs, dims, begin, end, scratch = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, y, params = (b.load(b.gep(ptrs, [_c(i)], source_etype=ptr), typ=ptr) for i in range(len(PTRS)))
    channels = b.load(dims, typ=I64)
    zero, four = ir.Constant(vec, None), ir.Constant(I32, 4)

    def at(base, index):
        return b.gep(base, [index], source_etype=F32)

    def splat(value):
        v = b.insert_element(ir.Constant(ir.VectorType(value.type, lanes), None), value, ir.Constant(I32, 0))
        return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    scale, bias = (splat(b.load(at(params, _c(i)), typ=F32)) for i in range(2))
    whole = b.mul(b.sdiv(channels, _c(lanes)), _c(lanes))            # channels in whole vectors
    padded = b.mul(b.sdiv(b.add(channels, _c(lanes - 1)), _c(lanes)), _c(lanes))
    tail = b.icmp_signed("<", whole, channels)
    left = splat(b.trunc(b.sub(channels, whole), I32))
    mask = b.icmp_signed("<", ir.Constant(ir.VectorType(I32, lanes), list(range(lanes))), left)
    squares = at(scratch, _c(shape.lead))

    for v in range(shape.lead // lanes):   # the zeros before the squares and after their last vector
        b.store(zero, at(scratch, _c(v * lanes)), align=4)
    for v in range(-(-(shape.size - 1 - shape.before) // lanes)):
        b.store(zero, at(squares, b.add(padded, _c(v * lanes))), align=4)

    def vectors(emit) -> None:
        """emit(c, mask) for each channel vector: the whole ones, then the tail under its mask."""
        loop = CountedLoop(b, "c", _c(0), whole, lanes)
        loop.enter()
        emit(loop.index, None)
        loop.leave()
        when(b, tail, lambda: emit(whole, mask), "tail")

    def load(address, m):
        if m is None:
            return b.load(address, typ=vec, align=4)
        return b.call(masked_load, [address, four, m, zero])   # (zeros in the lanes past C)

    pixels = CountedLoop(b, "pixel", begin, end, 1)
    pixels.enter()
    row, out = at(x, b.mul(pixels.index, channels)), at(y, b.mul(pixels.index, channels))

    def square(c, m) -> None:
        value = load(at(row, c), m)
        b.store(b.fmul(value, value), at(squares, c), align=4)

    def normalise(c, m) -> None:
        window = at(squares, b.sub(c, _c(shape.before)))
        total = b.load(window, typ=vec, align=4)
        for k in range(1, shape.size):
            total = b.fadd(total, b.load(at(window, _c(k)), typ=vec, align=4))
        base = b.call(fma, [scale, total, bias]) if shape.fused else b.fadd(b.fmul(scale, total), bias)
        result = b.fdiv(load(at(row, c), m), vmath.emit(b, "pow_static", base, exponent=shape.beta,
                                                       fused_multiply_add=shape.fused))
        if m is None:
            b.store(result, at(out, c), align=4)
        else:
            store_tail(b, [result], [at(out, c)], m, masked_store)

    vectors(square)
    vectors(normalise)
    pixels.leave()
    b.ret_void()
    return module
