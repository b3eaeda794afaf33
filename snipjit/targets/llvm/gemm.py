"""A register-blocked f32 GEMM kernel for the host CPU: C = A @ B (+ bias), batched.

The output is cut into panels of `NR = vectors × lanes` columns and chunks of rows; a work item is one
chunk of one panel of one batch entry (chunks fastest, so neighbouring items share B's panel), so the kernel follows the `KernelFunction` ABI and runs on the native pool like any snippet:
`fn(ptrs, dims, begin, end, scratch)` computes work items [begin, end). For each panel, blocks of
`MR` rows keep MR × vectors accumulators in registers over the whole K loop: per k, `vectors` loads of
B, MR broadcasts of A, MR × vectors FMAs (6 × 4 on AVX-512: 24 of the 32 registers accumulate).

- ptrs: A, B, C, bias (null: none; else one value per column, added before the store)
- dims: M, K, N, lda, ldb, b_panel_stride, ldc, panels, a_batch, b_batch, c_batch, chunks, chunk_rows
  (strides in elements; b_panel_stride is NR for a row-major B, or K*NR for B packed panel by panel;
  chunk_rows a multiple of MR)

Edge handling without extra code paths: the last panel loads and stores under a lane mask (columns
beyond N are never touched), and a last row block shorter than MR clamps its rows to M-1 — the
duplicated rows compute the same values and store them to the same place.
"""
from __future__ import annotations

from llvmlite import ir

F32 = ir.FloatType()
I64 = ir.IntType(64)
I32 = ir.IntType(32)
I1 = ir.IntType(1)
DIMS = ("M", "K", "N", "lda", "ldb", "b_panel_stride", "ldc", "panels", "a_batch", "b_batch", "c_batch",
        "chunks", "chunk_rows")


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class _Loop:
    """A counted loop `for i in [start, stop) step` whose body the caller emits between enter/leave."""

    def __init__(self, b: ir.IRBuilder, name: str, start, stop, step: int):
        self.b, self.step = b, step
        fn = b.function
        self.head = fn.append_basic_block(f"{name}.head")
        self.body = fn.append_basic_block(f"{name}.body")
        self.exit = fn.append_basic_block(f"{name}.exit")
        self.entry = b.block
        b.branch(self.head)
        b.position_at_end(self.head)
        self.index = b.phi(I64, name)
        self.index.add_incoming(start, self.entry)
        self.stop = stop

    def phi(self, typ, initial) -> ir.PhiInstr:
        """A value carried around the loop, starting at `initial` (call before `enter`)."""
        phi = self.b.phi(typ)
        phi.add_incoming(initial, self.entry)
        return phi

    def enter(self) -> None:
        self.b.cbranch(self.b.icmp_signed("<", self.index, self.stop), self.body, self.exit)
        self.b.position_at_end(self.body)

    def leave(self, carried: list[tuple[ir.PhiInstr, ir.Value]] = ()) -> None:
        b = self.b
        self.index.add_incoming(b.add(self.index, _c(self.step)), b.block)
        for phi, value in carried:
            phi.add_incoming(value, b.block)
        b.branch(self.head)
        b.position_at_end(self.exit)


def gemm_module(name: str, mr: int, vectors: int, lanes: int) -> ir.Module:
    """The module defining kernel `name` for MR = `mr` rows and NR = `vectors`·`lanes` columns."""
    vec = ir.VectorType(F32, lanes)
    mask_t = ir.VectorType(I1, lanes)
    nr = vectors * lanes
    module = ir.Module(name)
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64, I64, ptr]), name)
    fn.args[4].name = "scratch"
    fma = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{lanes}f32")
    load = ir.Function(module, ir.FunctionType(vec, [ptr, I32, mask_t, vec]), f"llvm.masked.load.v{lanes}f32.p0")
    store = ir.Function(module, ir.FunctionType(ir.VoidType(), [vec, ptr, I32, mask_t]),
                        f"llvm.masked.store.v{lanes}f32.p0")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs, dims, begin, end, _ = fn.args
    A, B, C, bias = (b.load(b.gep(ptrs, [_c(i)], source_etype=ptr), typ=ptr) for i in range(4))
    d = {n: b.load(b.gep(dims, [_c(i)], source_etype=I64), typ=I64) for i, n in enumerate(DIMS)}
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    zero = ir.Constant(vec, None)
    has_bias = b.icmp_unsigned("!=", b.ptrtoint(bias, I64), _c(0))

    def splat(value, typ):
        v = b.insert_element(ir.Constant(ir.VectorType(typ, lanes), None), value, ir.Constant(I32, 0))
        return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def at(base, index):
        return b.gep(base, [index], source_etype=F32)

    work = _Loop(b, "work", begin, end, 1)
    work.enter()
    per_batch = b.mul(d["panels"], d["chunks"])
    batch = b.sdiv(work.index, per_batch)
    panel = b.sdiv(b.srem(work.index, per_batch), d["chunks"])
    first_row = b.mul(b.srem(work.index, d["chunks"]), d["chunk_rows"])
    chunk_end = b.add(first_row, d["chunk_rows"])
    rows_end = b.select(b.icmp_signed("<", chunk_end, d["M"]), chunk_end, d["M"])
    n0 = b.mul(panel, _c(nr))
    a_base = at(A, b.mul(batch, d["a_batch"]))
    b_base = at(B, b.add(b.mul(batch, d["b_batch"]), b.mul(panel, d["b_panel_stride"])))
    c_base = at(C, b.add(b.mul(batch, d["c_batch"]), n0))
    left = b.sub(d["N"], n0)
    masks = [b.icmp_signed("<", lane_ids, splat(b.sub(left, _c(v * lanes)), I64)) for v in range(vectors)]
    bias_masks = [b.and_(m, splat(has_bias, I1)) for m in masks]
    initial = [b.call(load, [at(bias, b.add(n0, _c(v * lanes))), ir.Constant(I32, 4), bias_masks[v], zero])
               for v in range(vectors)]
    last_row = b.sub(d["M"], _c(1))

    rows = _Loop(b, "rows", first_row, rows_end, mr)
    rows.enter()
    row_index = []
    for j in range(mr):
        r = b.add(rows.index, _c(j))
        row_index.append(b.select(b.icmp_signed("<", r, d["M"]), r, last_row))
    a_rows = [at(a_base, b.mul(r, d["lda"])) for r in row_index]

    ks = _Loop(b, "k", _c(0), d["K"], 1)
    acc = [[ks.phi(vec, initial[v]) for v in range(vectors)] for _ in range(mr)]
    ks.enter()
    b_row = at(b_base, b.mul(ks.index, d["ldb"]))
    bv = [b.call(load, [at(b_row, _c(v * lanes)), ir.Constant(I32, 4), masks[v], zero]) for v in range(vectors)]
    updated = []
    for j in range(mr):
        a = splat(b.load(at(a_rows[j], ks.index), typ=F32), F32)
        updated.append([b.call(fma, [a, bv[v], acc[j][v]]) for v in range(vectors)])
    ks.leave([(acc[j][v], updated[j][v]) for j in range(mr) for v in range(vectors)])

    for j in range(mr):
        c_row = at(c_base, b.mul(row_index[j], d["ldc"]))
        for v in range(vectors):
            b.call(store, [acc[j][v], at(c_row, _c(v * lanes)), ir.Constant(I32, 4), masks[v]])
    rows.leave()
    work.leave()
    b.ret_void()
    return module
