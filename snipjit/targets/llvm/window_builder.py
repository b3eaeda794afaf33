"""The module and function builder of the window kernel (`window`): its LLVM types and intrinsics, the
kernel arguments as values, and the vector helpers every register block uses; `BlockArgs`, a register
block function's arguments."""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .counted_loop import I64, i64 as _c, when
from .vector_builder import VectorBuilder
DIMS = ("H", "W", "C", "OH", "OW", "KH", "KW", "sh", "sw", "dh", "dw", "pt", "pl", "ow_lo", "ow_hi",
        "chunks", "chunk_c", "include_pad", "OC")
PTRS = ("x", "w", "bias", "out", "params", "taps")


class WindowBuilder(VectorBuilder):
    """The module of one kernel with its types and intrinsics, and the function being emitted (`b`, its
    builder; `p` and `d`, the kernel arguments loaded in it)."""

    def __init__(self, shape):
        self.shape = shape
        self.module = module = ir.Module(shape.name)
        self.ptr = ir.PointerType()
        self.declare_vectors(module)
        self.lane_ids = ir.Constant(ir.VectorType(I64, shape.lanes), list(range(shape.lanes)))

    def function(self, name: str, args: list, internal: bool) -> ir.Function:
        """Start emitting function `name` (its first two arguments: the kernel's ptrs and dims). An
        internal one is never inlined: each pixel block keeps its own registers (inlined, LLVM keeps the
        pointers of every block's loops live at once and spills them)."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), args), name)
        if internal:
            fn.linkage = "internal"
            fn.attributes.add("noinline")
        self.b = b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptrs, dims = fn.args[:2]
        self.p = {n: b.load(b.gep(ptrs, [_c(i)], source_etype=self.ptr), typ=self.ptr) for i, n in enumerate(PTRS)}
        self.d = {n: b.load(b.gep(dims, [_c(i)], source_etype=I64), typ=I64) for i, n in enumerate(DIMS)}
        return fn

    def when(self, condition, emit) -> None:
        """Emit `emit()` under `condition`."""
        when(self.b, condition, emit)

    def minimum(self, x, y):
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def maximum(self, x, y):
        return self.b.select(self.b.icmp_signed(">", x, y), x, y)

    def clipped_range(self, start, size, step, count):
        """[lo, hi): the taps t in [0, count) with 0 <= start + t·step < size (hi <= lo: none)."""
        b, zero = self.b, _c(0)
        before = b.sub(zero, start)      # taps needed to reach position 0: ceil(-start / step)
        lo = b.select(b.icmp_signed(">", before, zero), b.sdiv(b.add(before, b.sub(step, _c(1))), step), zero)
        room = self.maximum(b.sub(size, start), zero)   # taps before position size: ceil(room / step)
        hi = self.minimum(count, b.sdiv(b.add(room, b.sub(step, _c(1))), step))
        return lo, hi

    def combine(self, acc, x, w):
        b, combine = self.b, self.shape.combine
        if combine == "madd":
            return self.multiply_add(w, x, acc)
        if combine == "max":
            return self.max_with_nan(acc, x)
        return b.fadd(acc, x)


@dataclass
class BlockArgs:
    """The arguments of a register block's function, as values inside it."""
    x: ir.Value         # x at the image, the row's first input row, the first pixel's column 0 and channel c
    w: ir.Value         # the weights at tap 0 and channel c
    bias: ir.Value      # the bias at channel c
    out: ir.Value       # out at the first pixel and channel c
    kh_lo: ir.Value     # the taps [kh_lo, kh_hi) × [kw_lo, kw_hi) inside the input
    kh_hi: ir.Value
    kw_lo: ir.Value
    kw_hi: ir.Value
    left: ir.Value      # channels left from c (the masked block's lanes)
    count: ir.Value     # reuse modes: blocks in a run of neighbours, each `pixels` output columns right of the last
