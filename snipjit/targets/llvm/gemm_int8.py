"""The int8 variant of the GEMM microkernel: a dynamically quantized product,

    C = (clip(round(X / s) + z, 0, 255) - z) @ W      (X float32 [M, K], W int8 [K, N], s and z scalars)

— ONNX Runtime's `quantize_dynamic` linear layer (DynamicQuantizeLinear, MatMulInteger, Cast) before its
final scaling — computed with integer dot products. A work item is a chunk of rows: it quantizes its rows
of X once into the thread's scratchpad (uint8, or uint16 for pairs; K padded to whole vectors with
zeros), then runs every
panel of NR columns over them with a register block of mr rows × `vectors` int32 vectors, as the f32
kernel (`gemm`) does with FMAs. Per K step a lane multiplies `group` bytes of the row (broadcast) by the
`group` weights of its column packed next to each other:
- "vnni": AVX-512 VNNI `vpdpbusd`, 4 uint8 × int8 products summed into each int32 lane;
- "pairs": `pmaddwd` (AVX-512BW, AVX2, SSE2), 2 products of 16-bit values (the bytes widened: exact, no
  saturation, unlike `pmaddubsw`'s 16-bit sums of uint8 × int8).
The store converts the sums to float and subtracts z times each column's weight sum (the zero point
moved out of the integer product). Edges: a partial last panel stores under a lane mask; a last row
block shorter than mr repeats the chunk's last row. The float results are exact integers up to 2^24.

ptrs: see `PTRS` (B: the weights packed by `runtime.implementations.int8`: per panel, K/group steps of NR
lanes of `group` values; colsum: one float per packed column; params: s and z). dims: see `DIMS`.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import CountedLoop, I64, i64 as _c
from .gemm_builder import GemmBuilder
from .vector_builder import F32, I32

I8, I16 = ir.IntType(8), ir.IntType(16)
DIMS = ("M", "K", "Kp", "N", "ldx", "ldc", "panels", "chunks", "chunk_rows")
PTRS = ("X", "B", "C", "colsum", "params")
GROUP = {"vnni": 4, "pairs": 2}


@dataclass(frozen=True)
class Int8Kernel:
    """The shape of one generated int8 kernel."""
    mr: int
    vectors: int
    lanes: int       # int32 lanes per vector
    dot: str         # "vnni" or "pairs"
    fused: bool = True   # (the f32 builder asks; no FMA is used)

    @property
    def nr(self) -> int:
        return self.vectors * self.lanes

    @property
    def group(self) -> int:
        return GROUP[self.dot]

    @property
    def value_bytes(self) -> int:
        """Bytes of a quantized value in the scratchpad: 1, or 2 for pairs (widened once, not per step)."""
        return 4 // self.group

    @property
    def name(self) -> str:
        return f"snipjit_gemm_int8_{self.dot}_{self.mr}x{self.vectors}x{self.lanes}"

    @property
    def quantize_name(self) -> str:
        return f"snipjit_quantize_rows_{self.dot}_{self.lanes}"

    def padded_k(self, k: int) -> int:
        """K rounded up to whole vectors of bytes (a multiple of the group too)."""
        step = max(self.lanes, self.group)
        return -(-k // step) * step


def _dot(g: GemmBuilder, shape: Int8Kernel):
    """acc + the products of one K step: (acc, a broadcast as int32, b lanes as int32) -> int32 lanes."""
    lanes, module = shape.lanes, g.module
    i32v = ir.VectorType(I32, lanes)
    if shape.dot == "vnni":
        fn = ir.Function(module, ir.FunctionType(i32v, [i32v, i32v, i32v]), "llvm.x86.avx512.vpdpbusd.512")
        return lambda acc, a, b: g.b.call(fn, [acc, a, b])
    i16v = ir.VectorType(I16, 2 * lanes)
    name = {16: "llvm.x86.avx512.pmaddw.d.512", 8: "llvm.x86.avx2.pmadd.wd", 4: "llvm.x86.sse2.pmadd.wd"}[lanes]
    fn = ir.Function(module, ir.FunctionType(i32v, [i16v, i16v]), name)
    return lambda acc, a, b: g.b.add(acc, g.b.call(fn, [g.b.bitcast(a, i16v), g.b.bitcast(b, i16v)]))


def _quantize_rows(g: GemmBuilder, x, first, last, rows) -> None:
    """Rows [first, last) of X quantized into `rows` (the scratchpad, Kp values a row, zeros past K)."""
    b, d, lanes = g.b, g.d, g.shape.lanes
    params = g.pointer("params")
    scale, zero = (g.splat(b.load(g.at(params, _c(i)), typ=F32), F32) for i in (0, 1))
    top = g.splat(ir.Constant(F32, 255.0), F32)
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    value_type = I8 if g.shape.value_bytes == 1 else I16
    row_bytes = b.mul(d["Kp"], _c(g.shape.value_bytes))
    loop = CountedLoop(b, "quantize.row", first, last, 1)
    loop.enter()
    source = g.at(x, b.mul(loop.index, d["ldx"]))
    target = b.gep(rows, [b.mul(b.sub(loop.index, first), row_bytes)], source_etype=I8)
    ks = CountedLoop(b, "quantize.k", _c(0), d["Kp"], lanes)
    ks.enter()
    inside = b.icmp_signed("<", lane_ids, g.splat(b.sub(d["K"], ks.index), I64))
    value = g.load(g.at(source, ks.index), inside)
    level = vmath.emit(b, "round_half_even", b.fdiv(value, scale), fused_multiply_add=False)
    level = b.fadd(level, zero)
    level = b.select(b.fcmp_unordered("<", level, g.zero), g.zero, level)   # (NaN -> 0, as the reference)
    level = b.select(b.fcmp_ordered(">", level, top), top, level)
    level = b.select(inside, level, g.zero)
    b.store(b.fptoui(level, ir.VectorType(value_type, lanes)), b.gep(target, [ks.index], source_etype=value_type),
            align=1)
    ks.leave()
    loop.leave()


def dot_steps(g: GemmBuilder, shape: Int8Kernel, dot, a_rows, panel, acc, steps) -> list:
    """acc (rows × vectors int32) plus `steps` K steps of the rows `a_rows` (each step `group` values, 4
    bytes) times the panel's weights (each step NR columns of 4 bytes)."""
    b, lanes = g.b, shape.lanes
    i32v = ir.VectorType(I32, lanes)
    loop = CountedLoop(b, "k", _c(0), steps, 1)
    carried = [[loop.phi(i32v, value) for value in row] for row in acc]
    loop.enter()
    offset = b.mul(loop.index, _c(4))   # (a step's group of values is 4 bytes: 4 uint8 or 2 uint16)
    broadcasts = [b.load(b.gep(row, [offset], source_etype=I8), typ=I32, align=1) for row in a_rows]
    step_base = b.gep(panel, [b.mul(loop.index, _c(shape.nr * 4))], source_etype=I8)
    weights = [b.load(b.gep(step_base, [_c(v * lanes * 4)], source_etype=I8), typ=i32v, align=4)
               for v in range(shape.vectors)]
    updated = []
    for j, a in enumerate(broadcasts):
        a_vec = g.splat(a, I32)
        updated.append([dot(carried[j][v], a_vec, weights[v]) for v in range(shape.vectors)])
    loop.leave([(carried[j][v], updated[j][v]) for j in range(len(a_rows)) for v in range(shape.vectors)])
    return carried


def _row_block(g: GemmBuilder, shape: Int8Kernel, dot, a_rows, panel, c_rows, colsum, zero, masks, full) -> None:
    """One block of rows of one panel: the integer K loop, then the float store."""
    zero_acc = ir.Constant(ir.VectorType(I32, shape.lanes), None)
    acc = [[zero_acc] * shape.vectors for _ in a_rows]
    carried = dot_steps(g, shape, dot, a_rows, panel, acc, g.b.sdiv(g.d["Kp"], _c(shape.group)))
    b, lanes = g.b, shape.lanes

    def store(masked: bool):
        def emit():
            for j, row in enumerate(carried):
                for v, acc in enumerate(row):
                    sums = b.fsub(b.sitofp(acc, g.vec), b.fmul(zero, g.load(g.at(colsum, _c(v * lanes)))))
                    g.store(sums, g.at(c_rows[j], _c(v * lanes)), masks[v] if masked else None)
            return []
        return emit

    g.branches(full, store(False), store(True))


def int8_gemm_module(shape: Int8Kernel) -> ir.Module:
    """The module defining kernel `shape.name`."""
    g = GemmBuilder(shape, DIMS, PTRS)
    b, d, mr, lanes, nr = g.b, g.d, shape.mr, shape.lanes, shape.nr
    dot = _dot(g, shape)
    x, packed, c, colsums = (g.pointer(name) for name in PTRS[:4])
    zero = g.splat(b.load(g.at(g.pointer("params"), _c(1)), typ=F32), F32)
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    first = b.mul(work.index, d["chunk_rows"])
    end = b.add(first, d["chunk_rows"])
    last = b.select(b.icmp_signed("<", end, d["M"]), end, d["M"])
    rows = g.scratch   # the chunk's quantized rows
    _quantize_rows(g, x, first, last, rows)

    panels = CountedLoop(b, "panel", _c(0), d["panels"], 1)
    panels.enter()
    n0 = b.mul(panels.index, _c(nr))
    panel_bytes = b.mul(b.sdiv(d["Kp"], _c(shape.group)), _c(nr * 4))
    panel = b.gep(packed, [b.mul(panels.index, panel_bytes)], source_etype=I8)
    colsum = g.at(colsums, n0)
    left = b.sub(d["N"], n0)
    full = b.icmp_signed(">=", left, _c(nr))
    masks = [b.icmp_signed("<", lane_ids, g.splat(b.sub(left, _c(v * lanes)), I64)) for v in range(shape.vectors)]
    blocks = CountedLoop(b, "rows", first, last, mr)
    blocks.enter()
    final = b.sub(last, _c(1))
    block = [b.select(b.icmp_signed("<", r, last), r, final) for r in (b.add(blocks.index, _c(j)) for j in range(mr))]
    row_bytes = b.mul(d["Kp"], _c(shape.value_bytes))
    a_rows = [b.gep(rows, [b.mul(b.sub(r, first), row_bytes)], source_etype=I8) for r in block]
    c_rows = [g.at(c, b.add(b.mul(r, d["ldc"]), n0)) for r in block]
    _row_block(g, shape, dot, a_rows, panel, c_rows, colsum, zero, masks, full)
    blocks.leave()
    panels.leave()
    work.leave()
    b.ret_void()
    return g.module


QUANTIZE_DIMS = ("M", "K", "Kp", "ldx", "chunk_rows")
QUANTIZE_PTRS = ("X", "Q", "params")


def quantize_module(shape: Int8Kernel) -> ir.Module:
    """Kernel `shape.quantize_name`: rows [0, M) of X (K floats, `ldx` apart) quantized with params (s, z)
    into Q, Kp values a row (uint8, or uint16 for pairs; zeros past K); a work item is `chunk_rows` rows."""
    g = GemmBuilder(shape, QUANTIZE_DIMS, QUANTIZE_PTRS, shape.quantize_name)
    b, d = g.b, g.d
    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    first = b.mul(work.index, d["chunk_rows"])
    end = b.add(first, d["chunk_rows"])
    last = b.select(b.icmp_signed("<", end, d["M"]), end, d["M"])
    row_bytes = b.mul(d["Kp"], _c(shape.value_bytes))
    _quantize_rows(g, g.pointer("X"), first, last, b.gep(g.pointer("Q"), [b.mul(first, row_bytes)], source_etype=I8))
    work.leave()
    b.ret_void()
    return g.module


__all__ = ["DIMS", "GROUP", "Int8Kernel", "PTRS", "QUANTIZE_DIMS", "QUANTIZE_PTRS", "dot_steps", "int8_gemm_module",
           "quantize_module"]
