"""The LLVM emitter of the Snippets `Brgemm`: C = A · B for the rows of A the kernel's iteration is at.

The control-flow passes place a Brgemm outside the vector loops, between loop nests (MarkLoops), with
Buffers for what it reads from them and writes for them (InsertBuffers), and name its memory
(InsertLoadStore, AllocateBuffers): `memory` = [A, B, C], each ("param" | "result", index) or
("scratch", group, row). A and C are the iteration's rows at its data pointers: one row, or every row of
the second-innermost dim when a row loop holds the nests (`subgraph_compiler.brgemm_rows`); rows are
contiguous along K and N, in any layout of the other dims. B is [K, N] with rows `ldb` elements apart (its
own dims are not indexed by the kernel's domain). The product is the GEMM generator's K loop
(`gemm_builder.k_loop`) on blocks of up to MAX_ROWS rows × `vectors` vectors, so each vector of B loaded serves
every row of the block; columns past the last whole panel go a vector at a time with masked loads and
stores.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...snippets.lowered.linear_ir import LinearIRError
from ...snippets.lowered.memory import stride
from ...snippets.target_machine import Emitter
from . import jit
from .counted_loop import CountedLoop, i64 as _c
from .gemm import MicroKernel
from .gemm_builder import GemmBuilder, k_loop
from .vector_builder import F32
from .kernel_emitter import I64, KernelContext, splat

UNROLL = 4
MAX_ROWS = 6   # rows of A sharing each vector of B


@dataclass(frozen=True)
class _Operands:
    """One Brgemm's pointers, strides (in elements) and extents as values of the kernel being emitted."""
    a: ir.Value
    b: ir.Value
    c: ir.Value
    lda: ir.Value    # between rows of A (0: one row of A for every row of C)
    ldb: ir.Value
    ldc: ir.Value
    m: ir.Value
    k: ir.Value
    n: ir.Value


class BrgemmEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        ops = self._operands(ctx, expr)
        level = jit.host().level
        vectors = 4 if level.vector_registers >= 32 else 2
        rows = min(MAX_ROWS, (level.vector_registers - vectors - 1) // vectors)
        g = GemmBuilder.inside(ctx.builder, MicroKernel(rows, vectors, ctx.lanes, UNROLL, level.fused_multiply_add))
        b = ctx.builder
        blocks = CountedLoop(b, f"brgemm{expr.uid}.m", _c(0), b.sub(ops.m, _c(rows - 1)), rows)
        blocks.enter()
        self._rows(ctx, g, expr, ops, blocks.index, rows, vectors)
        blocks.leave()
        rest = CountedLoop(b, f"brgemm{expr.uid}.mr", blocks.index, ops.m, 1)
        rest.enter()
        self._rows(ctx, g, expr, ops, rest.index, 1, vectors)
        rest.leave()

    def _rows(self, ctx: KernelContext, g: GemmBuilder, expr, ops: _Operands, first, rows: int, vectors: int) -> None:
        """C[first : first + rows] = A[first : first + rows] · B: panels of `vectors` vectors, then the last
        columns."""
        b, lanes = ctx.builder, ctx.lanes
        a_rows = [g.at(ops.a, b.mul(b.add(first, _c(j)), ops.lda)) for j in range(rows)]
        c_rows = [g.at(ops.c, b.mul(b.add(first, _c(j)), ops.ldc)) for j in range(rows)]
        width = vectors * lanes
        name = f"brgemm{expr.uid}.{rows}"
        panels = CountedLoop(b, f"{name}.n", _c(0), b.sub(ops.n, _c(width - 1)), width)
        panels.enter()
        acc = [[g.zero] * vectors for _ in range(rows)]
        b_panel = g.at(ops.b, panels.index)
        acc, kk = k_loop(g, f"{name}.k", _c(0), ops.k, UNROLL, acc, a_rows, b_panel, ops.ldb)
        acc, _ = k_loop(g, f"{name}.kr", kk, ops.k, 1, acc, a_rows, b_panel, ops.ldb)
        for j in range(rows):
            for v in range(vectors):
                g.store(acc[j][v], g.at(c_rows[j], b.add(panels.index, _c(v * lanes))))
        panels.leave()
        for j in range(rows):
            self._last_columns(ctx, g, f"{name}.{j}", panels.index, ops, a_rows[j], c_rows[j])

    @staticmethod
    def _last_columns(ctx: KernelContext, g: GemmBuilder, name: str, start, ops: _Operands, a_row, c_row) -> None:
        """Columns [start, n) of one row, a vector at a time, masked to those inside n."""
        b, lanes = ctx.builder, ctx.lanes
        columns = CountedLoop(b, f"{name}.nt", start, ops.n, lanes)
        columns.enter()
        lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
        mask = b.icmp_signed("<", lane_ids, splat(b, b.sub(ops.n, columns.index), lanes))
        steps = CountedLoop(b, f"{name}.kt", _c(0), ops.k, 1)
        acc = steps.phi(g.vec, g.zero)
        steps.enter()
        a = g.splat(b.load(g.at(a_row, steps.index), typ=F32), F32)
        row = g.at(ops.b, b.add(b.mul(steps.index, ops.ldb), columns.index))
        total = g.multiply_add(a, g.load(row, mask), acc)
        steps.leave([(acc, total)])
        g.store(acc, g.at(c_row, columns.index), mask)
        columns.leave()

    def _operands(self, ctx: KernelContext, expr) -> _Operands:
        """The block of rows the kernel's loop domain leaves to the Brgemm: all rows of the second-innermost
        dim when it is a loop dim (a row loop holds the nests), else the iteration's one row."""
        lir = ctx.lir
        rank = len(lir.master_shape)
        (a, bm), c = expr.in_descs, expr.out_descs[0]
        if any(d.layout[-1] != rank - 1 for d in (a, bm, c)):
            raise LinearIRError(f"{expr.name}: its rows must be contiguous (layouts {a.layout}, {bm.layout} -> "
                                f"{c.layout})")
        pointers = [self._pointer(ctx, expr, key) for key in expr.attrs["memory"]]
        block = rank - 2 >= lir.parallel_rank

        def row_stride(d) -> ir.Value:
            return ctx.sym(stride(lir, d.shape, d.layout, rank - 2)) if block and d.shape[-2] != 1 else _c(0)

        m = self._size(ctx, c.shape[-2], rank - 2) if block else _c(1)
        return _Operands(*pointers, row_stride(a), ctx.sym(stride(lir, bm.shape, bm.layout, rank - 2)),
                         row_stride(c), m, self._size(ctx, a.shape[-1], rank - 1),
                         self._size(ctx, c.shape[-1], rank - 1))

    @staticmethod
    def _size(ctx: KernelContext, dim, master_dim: int) -> ir.Value:
        """A block extent: its static size, or the master's (a row or the rows of the loop nests)."""
        return _c(dim) if isinstance(dim, int) else ctx.dims[master_dim]

    @staticmethod
    def _pointer(ctx: KernelContext, expr, key) -> ir.Value:
        """Where an operand's block starts: a body input's or output's data pointer at this iteration, or
        its row of the scratchpad."""
        if key[0] != "scratch":
            return ctx.buffer_ptr(tuple(key))
        offset = ctx.builder.mul(ctx.dims[-1], _c(4 * key[2]))
        return ctx.builder.gep(ctx.scratch, [offset], source_etype=ir.IntType(8))


class BrgemmCopyBEmitter(Emitter):
    """B of a Brgemm stored column by column (K contiguous: Kᵀ read from K's rows) copied to its rows in the
    scratchpad ([K, N], rows N apart), once per iteration of the kernel's domain."""

    def emit(self, ctx: KernelContext, expr) -> None:
        b, lir = ctx.builder, ctx.lir
        rank = len(lir.master_shape)
        src, dst = (BrgemmEmitter._pointer(ctx, expr, key) for key in expr.attrs["memory"])
        desc = expr.in_descs[0]
        k = BrgemmEmitter._size(ctx, desc.shape[-2], rank - 2)
        n = BrgemmEmitter._size(ctx, desc.shape[-1], rank - 1)
        along_k = ctx.sym(stride(lir, desc.shape, desc.layout, rank - 2))
        along_n = ctx.sym(stride(lir, desc.shape, desc.layout, rank - 1))
        columns = CountedLoop(b, f"copyb{expr.uid}.n", _c(0), n, 1)
        columns.enter()
        rows = CountedLoop(b, f"copyb{expr.uid}.k", _c(0), k, 1)
        rows.enter()
        at = b.add(b.mul(columns.index, along_n), b.mul(rows.index, along_k))
        value = b.load(b.gep(src, [at], source_etype=F32), typ=F32)
        b.store(value, b.gep(dst, [b.add(b.mul(rows.index, n), columns.index)], source_etype=F32))
        rows.leave()
        columns.leave()
