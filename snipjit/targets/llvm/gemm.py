"""A register-blocked f32 GEMM kernel for the host CPU: C = A @ B (+ bias), batched.

The output is cut into panels of `NR = vectors × lanes` columns and chunks of rows; a work item is one
chunk of one panel of one batch entry (chunks fastest, so neighbouring items share B's panel), so the kernel follows the `KernelFunction` ABI and runs on the native pool like any snippet:
`fn(ptrs, dims, begin, end, scratch)` computes work items [begin, end). For each panel, blocks of
`MR` rows keep MR × vectors accumulators in registers over the whole K loop: per k, `vectors` loads of
B, MR broadcasts of A, MR × vectors FMAs (6 × 4 on AVX-512: 24 of the 32 registers accumulate).

- ptrs: A, B, C, bias (null: none; else one value per column, added before the store)
- dims: M, K, N, lda, ldb, b_panel_stride, ldc, panels, a_batch, b_batch, c_batch, chunks, chunk_rows,
  pack (strides in elements; b_panel_stride is NR for a row-major B, or K*NR for B packed panel by
  panel; chunk_rows a multiple of MR; pack != 0: each work item first copies its K × NR panel of B
  into the thread's scratchpad, so the FMA loop streams it instead of striding across pages)

Edge handling without extra code paths: the last panel loads and stores under a lane mask (columns
beyond N are never touched), and a last row block shorter than MR clamps its rows to M-1 — the
duplicated rows compute the same values and store them to the same place.
"""
from __future__ import annotations

from llvmlite import ir

from .counted_loop import I64, CountedLoop, i64 as _c

F32 = ir.FloatType()
I32 = ir.IntType(32)
I1 = ir.IntType(1)
DIMS = ("M", "K", "N", "lda", "ldb", "b_panel_stride", "ldc", "panels", "a_batch", "b_batch", "c_batch",
        "chunks", "chunk_rows", "pack")


def _pack_panel(b: ir.IRBuilder, d: dict, panel, scratch, masks, load, vec, lanes: int, nr: int):
    """When dims["pack"] is set, copy the K × NR panel at `panel` (row stride ldb, lanes past N as 0)
    to `scratch`; returns where the FMA loop reads B and its row stride."""
    fn = b.function
    start = b.block
    copy, done = fn.append_basic_block("pack"), fn.append_basic_block("packed")
    b.cbranch(b.icmp_signed("!=", d["pack"], _c(0)), copy, done)
    b.position_at_end(copy)
    rows = CountedLoop(b, "pack.k", _c(0), d["K"], 1)
    rows.enter()
    src = b.gep(panel, [b.mul(rows.index, d["ldb"])], source_etype=F32)
    dst = b.gep(scratch, [b.mul(rows.index, _c(nr))], source_etype=F32)
    for v, mask in enumerate(masks):
        value = b.call(load, [b.gep(src, [_c(v * lanes)], source_etype=F32), ir.Constant(I32, 4), mask,
                              ir.Constant(vec, None)])
        b.store(value, b.gep(dst, [_c(v * lanes)], source_etype=F32), align=4)
    rows.leave()
    copied = b.block
    b.branch(done)
    b.position_at_end(done)
    base = b.phi(ir.PointerType())
    base.add_incoming(panel, start)
    base.add_incoming(scratch, copied)
    stride = b.phi(I64)
    stride.add_incoming(d["ldb"], start)
    stride.add_incoming(_c(nr), copied)
    return base, stride


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
    ptrs, dims, begin, end, scratch = fn.args
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

    work = CountedLoop(b, "work", begin, end, 1)
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
    b_base, ldb = _pack_panel(b, d, b_base, scratch, masks, load, vec, lanes, nr)
    bias_masks = [b.and_(m, splat(has_bias, I1)) for m in masks]
    initial = [b.call(load, [at(bias, b.add(n0, _c(v * lanes))), ir.Constant(I32, 4), bias_masks[v], zero])
               for v in range(vectors)]
    last_row = b.sub(d["M"], _c(1))

    rows = CountedLoop(b, "rows", first_row, rows_end, mr)
    rows.enter()
    row_index = []
    for j in range(mr):
        r = b.add(rows.index, _c(j))
        row_index.append(b.select(b.icmp_signed("<", r, d["M"]), r, last_row))
    a_rows = [at(a_base, b.mul(r, d["lda"])) for r in row_index]

    ks = CountedLoop(b, "k", _c(0), d["K"], 1)
    acc = [[ks.phi(vec, initial[v]) for v in range(vectors)] for _ in range(mr)]
    ks.enter()
    b_row = at(b_base, b.mul(ks.index, ldb))
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
