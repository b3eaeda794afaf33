"""What the generated GEMM-like kernels share (the GEMM microkernel, its convolutions, int8 products, attention,
recurrences, Winograd's transforms, the Snippets Brgemm): `GemmBuilder`, the IR builder of one kernel function with
its types, intrinsics and loaded arguments; `k_loop`, the register block's FMA loop over K; `Panel`, what a GEMM's
row blocks of one K block share; the epilogue's activation and clamp; accumulators as rows or one flat list."""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import I64, CountedLoop, i64 as _c
from .vector_builder import F32, KernelShape, VectorBuilder

LINE_FLOATS = 16   # f32 per cache line


class GemmBuilder(VectorBuilder):
    """The IR builder of one kernel with its types, intrinsics and loaded arguments."""

    def __init__(self, shape: KernelShape, dim_names: tuple[str, ...], ptr_names: tuple[str, ...],
                 name: str | None = None):
        self.shape = shape
        name = name or shape.name
        self.ptr_names = ptr_names
        self.module = module = ir.Module(name)
        ptr = ir.PointerType()
        self.fn = fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64, I64, ptr]), name)
        self.b = b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.declare_vectors(module)
        ptrs, dims, self.begin, self.end, self.scratch = fn.args
        self.ptrs = ptrs
        self.d = {n: b.load(b.gep(dims, [_c(i)], source_etype=I64), typ=I64) for i, n in enumerate(dim_names)}

    @classmethod
    def inside(cls, builder: ir.IRBuilder, shape: KernelShape) -> "GemmBuilder":
        """The same helpers for code emitted into another kernel's function (the Snippets Brgemm)."""
        g = cls.__new__(cls)
        VectorBuilder.__init__(g, shape, builder)
        return g

    def pointer(self, name: str):
        """Argument pointer `name`, loaded here (the rarely used ones where they are used: a pointer
        loaded at the entry would occupy a register through the K loop)."""
        return self.b.load(self.b.gep(self.ptrs, [_c(self.ptr_names.index(name))], source_etype=ir.PointerType()),
                           typ=ir.PointerType())

    def branches(self, condition, then, otherwise, likely: bool = False) -> list:
        """Emit `then()` if condition else `otherwise()`; each returns a list of values, merged by phis.
        `likely`: the condition nearly always holds (LLVM then places and allocates registers for `then` first)."""
        b, fn = self.b, self.b.function
        yes, no, done = (fn.append_basic_block(n) for n in ("then", "else", "merge"))
        branch = b.cbranch(condition, yes, no)
        if likely:
            branch.set_weights([1000, 1])
        results = []
        for block, emit in ((yes, then), (no, otherwise)):
            b.position_at_end(block)
            results.append((emit(), b.block))
            b.branch(done)
        b.position_at_end(done)
        merged = []
        for i, value in enumerate(results[0][0]):
            phi = b.phi(value.type)
            for values, block in results:
                phi.add_incoming(values[i], block)
            merged.append(phi)
        return merged


def k_loop(g: GemmBuilder, name: str, start, stop, step: int, acc, a_rows, b_base, ldb, a_stride=None,
           prefetch: "Prefetch | None" = None):
    """Accumulate k in [start, stop) stepping `step` (the body repeated `step` times); the new accumulators
    (rows × vectors: a block as wide as `acc`). A's rows are contiguous along k, or `a_stride` elements
    apart. `prefetch`: each iteration also asks for its lines of that stream into L2."""
    b, shape, vectors = g.b, g.shape, len(acc[0])
    loop = CountedLoop(b, name, start, b.sub(stop, _c(step - 1)), step)
    carried = [[loop.phi(g.vec, acc[j][v]) for v in range(vectors)] for j in range(len(a_rows))]
    loop.enter()
    current = carried
    for u in range(step):
        k = b.add(loop.index, _c(u)) if u else loop.index
        b_row = g.at(b_base, b.mul(k, ldb))
        a_k = None if a_stride is None else b.mul(k, a_stride)
        bv = [g.load(g.at(b_row, _c(v * shape.lanes))) for v in range(vectors)]
        updated = []
        for j in range(len(a_rows)):
            a = g.splat(b.load(g.at(a_rows[j], k if a_stride is None else a_k), typ=F32), F32)
            updated.append([g.multiply_add(a, bv[v], current[j][v]) for v in range(vectors)])
        current = updated
    if prefetch is not None:   # (after the FMAs: before them, LLVM hoisted the broadcasts of A and spilled them)
        prefetch.emit(g, loop.index)
    loop.leave([(carried[j][v], current[j][v]) for j in range(len(a_rows)) for v in range(vectors)])
    return carried, loop.index


@dataclass(frozen=True)
class Prefetch:
    """A stream of B read ahead by the K loops of a work item's row blocks (`gemm`, `MicroKernel.prefetch`):
    each iteration of a K loop (k stepping by the unroll) asks for `lines` cache lines from `base` + k·`step`
    floats; step · unroll = lines · LINE_FLOATS, so one iteration's lines follow the previous one's."""
    base: ir.Value     # (a pointer: where step k = 0 of this loop would ask)
    step: ir.Constant  # floats per step of k (a constant: a register for it spilled the 6x4 block's vectors)
    lines: int

    def moved(self, g: GemmBuilder, steps) -> "Prefetch":
        """The same stream for a loop whose k counts from `steps` steps further on."""
        return Prefetch(g.at(self.base, g.b.mul(steps, self.step)), self.step, self.lines)

    def emit(self, g: GemmBuilder, k) -> None:
        address = g.at(self.base, g.b.mul(k, self.step))
        for line in range(self.lines):
            g.prefetch_to_l2(g.at(address, _c(line * LINE_FLOATS)))


@dataclass
class Panel:
    """What the row blocks of one K block of one panel share."""
    k0: ir.Value           # the K block [k0, k1)
    k1: ir.Value
    a_base: ir.Value       # A, B (panel) and C (panel) of the batch entry
    b_base: ir.Value
    ldb: ir.Value
    c_base: ir.Value
    c_offset: ir.Value     # C's panel and batch entry: where c_base lies in C (and the residual's same place)
    initial: list          # the accumulators' start (bias or zero), per vector
    masks: list            # the columns inside N, per vector
    full: ir.Value         # the panel lies inside N (no masks needed)
    prefetch: Prefetch | None = None   # the current row block's share of the next B slice, at k = 0


def clamp_to_bounds(g: GemmBuilder, acc: list) -> list:
    """The accumulators clamped to the kernel's [lo, hi] (compare and select: NaN stays NaN)."""
    b, bounds = g.b, g.pointer("clamp")
    lo, hi = (g.splat(b.load(g.at(bounds, _c(i)), typ=F32), F32) for i in (0, 1))
    clamped = []
    for row in acc:
        row = [b.select(b.fcmp_ordered("<", value, lo), lo, value) for value in row]
        clamped.append([b.select(b.fcmp_ordered(">", value, hi), hi, value) for value in row])
    return clamped


def flat(rows: list) -> list:
    """Rows of accumulators as one row-major list (what `branches` merges)."""
    return [value for row in rows for value in row]


def by_rows(values: list, width: int) -> list:
    """A row-major list of accumulators (as `branches` merges them) as rows of `width`."""
    return [values[j:j + width] for j in range(0, len(values), width)]


def apply_activation(g: GemmBuilder, value):
    """The kernel's activation (a function of the math library) of one accumulator vector."""
    return vmath.emit(g.b, g.shape.activation, value, fused_multiply_add=g.shape.fused)
