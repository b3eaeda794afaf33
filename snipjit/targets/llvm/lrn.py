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
from .vector_builder import F32, I32, VectorBuilder

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
    lanes, ptr = shape.lanes, ir.PointerType()
    module = ir.Module(shape.name)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64, I64, ptr]), shape.name)
    ptrs, dims, begin, end, scratch = fn.args
    g = VectorBuilder(shape, ir.IRBuilder(fn.append_basic_block("entry")))
    b, at, splat, zero = g.b, g.at, g.splat, g.zero
    x, y, params = (b.load(b.gep(ptrs, [_c(i)], source_etype=ptr), typ=ptr) for i in range(len(PTRS)))
    channels = b.load(dims, typ=I64)

    scale, bias = (splat(b.load(at(params, _c(i)), typ=F32)) for i in range(2))
    whole = b.mul(b.sdiv(channels, _c(lanes)), _c(lanes))            # channels in whole vectors
    padded = b.mul(b.sdiv(b.add(channels, _c(lanes - 1)), _c(lanes)), _c(lanes))
    tail = b.icmp_signed("<", whole, channels)
    left = splat(b.trunc(b.sub(channels, whole), I32), I32)
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

    pixels = CountedLoop(b, "pixel", begin, end, 1)
    pixels.enter()
    row, out = at(x, b.mul(pixels.index, channels)), at(y, b.mul(pixels.index, channels))

    def square(c, m) -> None:
        value = g.load(at(row, c), m)   # (zeros in the lanes past C)
        b.store(b.fmul(value, value), at(squares, c), align=4)

    def normalise(c, m) -> None:
        window = at(squares, b.sub(c, _c(shape.before)))
        total = g.load(window)
        for k in range(1, shape.size):
            total = b.fadd(total, g.load(at(window, _c(k))))
        base = g.multiply_add(scale, total, bias)
        result = b.fdiv(g.load(at(row, c), m), vmath.emit(b, "pow_static", base, exponent=shape.beta,
                                                       fused_multiply_add=shape.fused))
        g.store(result, at(out, c), m)

    vectors(square)
    vectors(normalise)
    pixels.leave()
    b.ret_void()
    return module
