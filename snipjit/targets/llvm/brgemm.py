"""The LLVM emitter of the Snippets `Brgemm`: C = A · B for the row of A the kernel's iteration is at.

The control-flow passes place a Brgemm outside the vector loops, between loop nests (MarkLoops), with
Buffers for what it reads from them and writes for them (InsertBuffers), and name its memory
(InsertLoadStore, AllocateBuffers): `memory` = [A, B, C], each ("param" | "result", index) or
("scratch", group, row). A and C are one row at the iteration's data pointers (contiguous along K and
N, in any layout of the other dims), B is [K, N] with rows `ldb` elements apart (its own dims are not
indexed by the kernel's domain).
The product is the GEMM generator's K loop (`gemm._k_loop`) on panels of `vectors` vectors, one row
high; columns past the last whole panel go a vector at a time with masked loads and stores.
"""
from __future__ import annotations

from llvmlite import ir

from ...snippets.lowered.linear_ir import LinearIRError
from ...snippets.lowered.memory import stride
from ...snippets.target_machine import Emitter
from . import jit
from .counted_loop import CountedLoop, i64 as _c
from .gemm import F32, MicroKernel, _Builder, _k_loop
from .kernel_emitter import I64, KernelContext, splat

UNROLL = 4


class BrgemmEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        b, lir = ctx.builder, ctx.lir
        rank = len(lir.master_shape)
        a_shape, b_shape, c_shape = expr.in_descs[0].shape, expr.in_descs[1].shape, expr.out_descs[0].shape
        if any(d.layout[-1] != rank - 1 for d in (expr.in_descs[0], expr.in_descs[1], expr.out_descs[0])):
            raise LinearIRError(f"{expr.name}: its rows must be contiguous (layouts {expr.in_descs[0].layout}, "
                                f"{expr.in_descs[1].layout} -> {expr.out_descs[0].layout})")
        k, n = self._size(ctx, a_shape[-1]), self._size(ctx, c_shape[-1])
        ldb = ctx.sym(stride(lir, b_shape, expr.in_descs[1].layout, rank - 2))
        a_ptr, b_ptr, c_ptr = (self._pointer(ctx, expr, key) for key in expr.attrs["memory"])
        level = jit.host().level
        vectors = max(1, min(4, level.vector_registers // 4))
        g = _Builder.inside(b, MicroKernel(1, vectors, ctx.lanes, UNROLL, level.fused_multiply_add))
        width = vectors * ctx.lanes
        panels = CountedLoop(b, f"brgemm{expr.uid}.n", _c(0), b.sub(n, _c(width - 1)), width)
        panels.enter()
        acc = [[g.zero] * vectors]
        b_panel = g.at(b_ptr, panels.index)
        acc, kk = _k_loop(g, f"brgemm{expr.uid}.k", _c(0), k, UNROLL, acc, [a_ptr], b_panel, ldb)
        acc, _ = _k_loop(g, f"brgemm{expr.uid}.kr", kk, k, 1, acc, [a_ptr], b_panel, ldb)
        for v in range(vectors):
            g.store(acc[0][v], g.at(c_ptr, b.add(panels.index, _c(v * ctx.lanes))))
        panels.leave()
        self._last_columns(ctx, g, expr, panels.index, n, k, a_ptr, b_ptr, c_ptr, ldb)

    @staticmethod
    def _last_columns(ctx: KernelContext, g: _Builder, expr, start, n, k, a_ptr, b_ptr, c_ptr, ldb) -> None:
        """Columns [start, n) a vector at a time, masked to those inside n."""
        b, lanes = ctx.builder, ctx.lanes
        columns = CountedLoop(b, f"brgemm{expr.uid}.nt", start, n, lanes)
        columns.enter()
        lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
        mask = b.icmp_signed("<", lane_ids, splat(b, b.sub(n, columns.index), lanes))
        steps = CountedLoop(b, f"brgemm{expr.uid}.kt", _c(0), k, 1)
        acc = steps.phi(g.vec, g.zero)
        steps.enter()
        a = g.splat(b.load(g.at(a_ptr, steps.index), typ=F32), F32)
        row = g.at(b_ptr, b.add(b.mul(steps.index, ldb), columns.index))
        total = g.multiply_add(a, g.load(row, mask), acc)
        steps.leave([(acc, total)])
        g.store(acc, g.at(c_ptr, columns.index), mask)
        columns.leave()

    @staticmethod
    def _size(ctx: KernelContext, dim) -> ir.Value:
        """A block extent: its static size, or the master's innermost dim (a row of the loop nests)."""
        return _c(dim) if isinstance(dim, int) else ctx.dims[-1]

    @staticmethod
    def _pointer(ctx: KernelContext, expr, key) -> ir.Value:
        """Where an operand's block starts: a body input's or output's data pointer at this iteration, or
        its row of the scratchpad."""
        if key[0] != "scratch":
            return ctx.buffer_ptr(tuple(key))
        offset = ctx.builder.mul(ctx.dims[-1], _c(4 * key[2]))
        return ctx.builder.gep(ctx.scratch, [offset], source_etype=ir.IntType(8))

