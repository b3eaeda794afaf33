"""The int8 convolution kernel: a channels-last convolution of a quantized image by int8 weights, with
the float epilogue in its store (the int8 Conv of a QDQ model):

    C[pixel, o] = clamp(act((Σ_taps Σ_c Q[pixel's input under the tap, c] · W[tap, c, o] - zero_sums[o])
                            · scale[o] + bias[o] + residual[pixel, o]))

Q is the image quantized by `gemm_int8.quantize_module` ([images, H, W, Kp] values: uint8, or uint16 for
`pmaddwd` pairs; channels past C are zero), W the weights packed tap-major as the int8 GEMM packs its
K (per panel: taps · Kp/group steps of NR columns of `group` values). The image's zero point z is folded
into offset[o] = bias[o] - z · Σ W[·, ·, o] · scale[o], so a tap in the padding reads the `zeros` row, a
pixel of value z (the quantized 0.0), and adds nothing. As in the f32 convolution (`gemm`, `conv`), the
rows of a register block are output pixels, consecutive ones stepping along the output row, and the
K loop per tap reads the pixel's channels in place: no im2col. A work item is one panel of one chunk of
rows, panels fastest, as in `gemm`: a thread's shard of the items is whole rows of the output.

ptrs: see `PTRS` (scale, bias: one float per packed column, zero_sums one int32; residual, clamp: null or as in `gemm`).
dims: see `DIMS` (strides in elements of C; ldr: the residual's pixel stride).
"""
from __future__ import annotations

from llvmlite import ir

from . import vmath
from .counted_loop import I64, CountedLoop, i64 as _c
from .gemm_builder import GemmBuilder, by_rows
from .gemm_int8 import I8, Int8Kernel, _dot, dot_steps
from .implicit_gemm import output_pixels
from .vector_builder import F32, I32

DIMS = ("M", "Kp", "N", "panels", "chunks", "chunk_rows", "H", "W", "OH", "OW", "KW", "taps", "stride_h",
        "stride_w", "pad_t", "pad_l", "dil_h", "dil_w", "ldc", "c_image", "c_row", "ldr")
PTRS = ("Q", "B", "C", "scale", "bias", "zero_sums", "residual", "clamp", "zeros")


def conv_name(shape: Int8Kernel, activation: str) -> str:
    suffix = f"_{activation}" if activation else ""
    return f"snipjit_conv_int8_{shape.dot}_{shape.mr}x{shape.vectors}x{shape.lanes}{suffix}"


def _accumulate(g: GemmBuilder, shape: Int8Kernel, dot, panel, pixels: list) -> list:
    """The int32 sums of the output pixels (image, row, column) over every tap of the window."""
    b, d = g.b, g.d
    zero_acc = ir.Constant(ir.VectorType(I32, shape.lanes), None)
    steps = b.sdiv(d["Kp"], _c(shape.group))
    pixel_bytes = b.mul(d["Kp"], _c(shape.value_bytes))
    image_pixels = b.mul(d["H"], d["W"])
    origins = [(b.mul(image, image_pixels), b.sub(b.mul(y, d["stride_h"]), d["pad_t"]),
                b.sub(b.mul(x, d["stride_w"]), d["pad_l"])) for image, y, x in pixels]
    taps = CountedLoop(b, "tap", _c(0), d["taps"], 1)
    carried = [[taps.phi(zero_acc.type, zero_acc) for _ in range(shape.vectors)] for _ in pixels]
    taps.enter()
    kh = b.sdiv(taps.index, d["KW"])
    dy, dx = b.mul(kh, d["dil_h"]), b.mul(b.sub(taps.index, b.mul(kh, d["KW"])), d["dil_w"])
    q, zeros = g.pointer("Q"), g.pointer("zeros")
    a_rows = []
    for image, top, left in origins:
        y, x = b.add(top, dy), b.add(left, dx)
        inside = b.and_(b.icmp_unsigned("<", y, d["H"]), b.icmp_unsigned("<", x, d["W"]))
        pixel = b.add(image, b.add(b.mul(y, d["W"]), x))
        a_rows.append(b.select(inside, b.gep(q, [b.mul(pixel, pixel_bytes)], source_etype=I8), zeros))
    tap_weights = b.gep(panel, [b.mul(b.mul(taps.index, steps), _c(shape.nr * 4))], source_etype=I8)
    summed = dot_steps(g, shape, dot, a_rows, tap_weights, carried, steps)
    taps.leave([(carried[j][v], summed[j][v]) for j in range(len(pixels)) for v in range(shape.vectors)])
    return carried


def _epilogue(g: GemmBuilder, shape: Int8Kernel, activation: str, sums: list, column: tuple,
              residual_rows: list, c_rows: list, masks: list, masked: bool) -> None:
    """The float results of the sums: less the zero point's sums, scaled, plus the bias and the residual (when its
    pointer is not null),
    the activation, the clamp (when not null); stored under the lane masks when `masked`."""
    b, lanes, vectors = g.b, shape.lanes, shape.vectors
    mask = (lambda v: masks[v]) if masked else (lambda v: None)
    scale, bias, zero_sums = column
    values = [[g.multiply_add(b.sitofp(b.sub(acc, zero_sums[v]), g.vec), scale[v], bias[v])
               for v, acc in enumerate(row)] for row in sums]
    residual = g.pointer("residual")

    def added():
        return [b.fadd(value, g.load(g.at(g.at(residual, row), _c(v * lanes)), mask(v)))
                for row, line in zip(residual_rows, values) for v, value in enumerate(line)]

    values = by_rows(g.branches(b.icmp_unsigned("!=", residual, g.null), added,
                                 lambda: [value for line in values for value in line]), vectors)
    if activation:
        values = [[vmath.emit(b, activation, value, fused_multiply_add=True) for value in line] for line in values]
    bounds = g.pointer("clamp")

    def write(clamped: bool):
        def emit():
            stored = values
            if clamped:
                lo, hi = (g.splat(b.load(g.at(bounds, _c(i)), typ=F32), F32) for i in (0, 1))
                low = [[b.select(b.fcmp_ordered("<", value, lo), lo, value) for value in line] for line in values]
                stored = [[b.select(b.fcmp_ordered(">", value, hi), hi, value) for value in line] for line in low]
            for line, row in zip(stored, c_rows):
                for v, value in enumerate(line):
                    g.store(value, g.at(row, _c(v * lanes)), mask(v))
            return []
        return emit

    g.branches(b.icmp_unsigned("!=", bounds, g.null), write(True), write(False))


def conv_int8_module(shape: Int8Kernel, activation: str = "") -> ir.Module:
    """The module defining kernel `conv_name(shape, activation)`."""
    g = GemmBuilder(shape, DIMS, PTRS, conv_name(shape, activation))
    b, d, mr, lanes, nr = g.b, g.d, shape.mr, shape.lanes, shape.nr
    dot = _dot(g, shape)
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    panel_index = b.srem(work.index, d["panels"])
    first = b.mul(b.sdiv(work.index, d["panels"]), d["chunk_rows"])
    end = b.add(first, d["chunk_rows"])
    last = b.select(b.icmp_signed("<", end, d["M"]), end, d["M"])
    n0 = b.mul(panel_index, _c(nr))
    panel_bytes = b.mul(b.mul(d["taps"], b.sdiv(d["Kp"], _c(shape.group))), _c(nr * 4))
    panel = b.gep(g.pointer("B"), [b.mul(panel_index, panel_bytes)], source_etype=I8)
    i32v = ir.VectorType(I32, lanes)
    column = tuple([b.load(b.gep(g.pointer(name), [b.add(n0, _c(v * lanes))], source_etype=F32 if name != "zero_sums"
                                 else I32), typ=g.vec if name != "zero_sums" else i32v, align=4)
                    for v in range(shape.vectors)] for name in ("scale", "bias", "zero_sums"))
    left = b.sub(d["N"], n0)
    full = b.icmp_signed(">=", left, _c(nr))
    masks = [b.icmp_signed("<", lane_ids, g.splat(b.sub(left, _c(v * lanes)), I64)) for v in range(shape.vectors)]
    c_base = g.at(g.pointer("C"), n0)

    def block(rows: list, consecutive: bool) -> None:
        pixels = output_pixels(g, rows, consecutive)
        sums = _accumulate(g, shape, dot, panel, pixels)
        c_rows = [g.at(c_base, b.add(b.add(b.mul(image, d["c_image"]), b.mul(y, d["c_row"])), b.mul(x, d["ldc"])))
                  for image, y, x in pixels]
        residual_rows = [b.add(b.mul(r, d["ldr"]), n0) for r in rows]

        def store(masked: bool):
            return lambda: _epilogue(g, shape, activation, sums, column, residual_rows, c_rows, masks, masked) or []
        g.branches(full, store(False), store(True))

    blocks = CountedLoop(b, "rows", first, b.sub(last, _c(mr - 1)), mr)   # whole row blocks
    blocks.enter()
    block([b.add(blocks.index, _c(j)) for j in range(mr)], consecutive=True)
    blocks.leave()
    final = b.sub(last, _c(1))

    def last_block():   # fewer than mr rows left: the rows past the chunk repeat its last row
        rows = [b.add(blocks.index, _c(j)) for j in range(mr)]
        block([b.select(b.icmp_signed("<", r, last), r, final) for r in rows], consecutive=False)
        return []

    g.branches(b.icmp_signed("<", blocks.index, last), last_block, lambda: [])
    work.leave()
    b.ret_void()
    return g.module


__all__ = ["DIMS", "PTRS", "conv_int8_module", "conv_name"]
