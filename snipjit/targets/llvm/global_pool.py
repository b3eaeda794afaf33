"""The global pooling kernel: each image's pixels reduced to one value per channel (a sum, scaled: the mean;
or the maximum), a band of an image's pixels per work item.

GlobalAveragePool and GlobalMaxPool over an NHWC tensor [N, H·W, C] reduce along the pixels with the channels
on the vector lanes. The sliding-window kernel computed them as a window the size of the image: one accumulator
per channel vector (a chain of dependent adds, a tap at a time, its offset read from a table of H·W entries),
the threads splitting the channels, each reading lines the other core had just written. Here a work item
reduces a band of consecutive pixels of one image, `BLOCK_VECTORS` adjacent channel vectors (then the 1-3 left,
then a masked tail) and `unroll` pixels at a time into as many accumulators, combined at the end. An image's
bands go to the threads, which write partial results, and a second call of the kernel reduces the partials
(one band of `bands` pixels): `runtime.implementations.global_pool_launch`.

ABI (`KernelFunction`): `fn(ptrs, dims, begin, end, scratch)` computes items [begin, end): item i is band
i % bands of image i // bands, pixels [band · (i % bands), ...) of `pixels`. ptrs: x (pixels `x_pixel` floats
apart, images `x_image`), y (item i's C values at (i // bands) · y_image + (i % bands) · y_band), params f32
[scale] (the sum's factor; the maximum ignores it). dims: see `DIMS`.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .counted_loop import I64, CountedLoop, i64 as _c, when
from .gemm_builder import GemmBuilder
from .vector_builder import F32

PTRS = ("x", "y", "params")
DIMS = ("pixels", "C", "band", "bands", "x_pixel", "x_image", "y_band", "y_image")
BLOCK_VECTORS = 4   # channel vectors a pass over the band's pixels reduces (a pixel's 4 adjacent lines on AVX-512)


@dataclass(frozen=True)
class GlobalPoolShape:
    """The shape of one generated kernel."""
    combine: str    # "mean" (a sum times params[0]) or "max"
    lanes: int      # f32 lanes per vector (the ISA level's width)
    registers: int  # vector registers: a pass adds `unroll` pixels, each vector into its own accumulator
    fused: bool = True

    def __post_init__(self):
        if self.combine not in ("mean", "max"):
            raise ValueError(f"a global pool combines by 'mean' or 'max', got {self.combine!r}")

    @property
    def unroll(self) -> int:
        """Pixels per loop iteration: the accumulators fill half the registers (an add's latency is 4 cycles:
        AVX-512's 4 x 4 accumulators keep both add ports busy)."""
        return max(1, self.registers // (2 * BLOCK_VECTORS))

    @property
    def name(self) -> str:
        return f"snipjit_global_{self.combine}_x{self.lanes}_u{self.unroll}"


def global_pool_module(shape: GlobalPoolShape) -> ir.Module:
    """The module defining kernel `shape.name`."""
    lanes = shape.lanes
    g = GemmBuilder(shape, DIMS, PTRS)
    b, d, at = g.b, g.d, g.at
    x, y, params = (g.pointer(name) for name in PTRS)
    maximum = shape.combine == "max"
    start = g.constant(float("-inf")) if maximum else g.zero
    scale = g.splat(b.load(params, typ=F32))
    channels = d["C"]
    whole = b.mul(b.sdiv(channels, _c(lanes)), _c(lanes))
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    mask = b.icmp_signed("<", lane_ids, g.splat(b.sub(channels, whole), I64))

    def combine(acc, value):
        return g.max_with_nan(acc, value) if maximum else b.fadd(acc, value)

    item = CountedLoop(b, "item", g.begin, g.end, 1)
    item.enter()
    image, band = b.sdiv(item.index, d["bands"]), b.srem(item.index, d["bands"])
    first = b.mul(band, d["band"])
    last = b.add(first, d["band"])
    last = b.select(b.icmp_signed("<", last, d["pixels"]), last, d["pixels"])
    source = at(x, b.add(b.mul(image, d["x_image"]), b.mul(first, d["x_pixel"])))
    target = at(y, b.add(b.mul(image, d["y_image"]), b.mul(band, d["y_band"])))
    count = b.sub(last, first)

    def reduce(c, vectors: int, m=None) -> None:   # `vectors` channel vectors from c (under mask m) over the band
        column, unroll = at(source, c), shape.unroll
        grouped = b.mul(b.sdiv(count, _c(unroll)), _c(unroll))
        pixels = CountedLoop(b, "pixel", _c(0), grouped, unroll)
        acc = [[pixels.phi(g.vec, start) for _ in range(vectors)] for _ in range(unroll)]
        pixels.enter()
        row = at(column, b.mul(pixels.index, d["x_pixel"]))
        added = [[combine(acc[u][v], g.load(at(row, b.add(b.mul(_c(u), d["x_pixel"]), _c(v * lanes))), m))
                  for v in range(vectors)] for u in range(unroll)]
        pixels.leave([(a, n) for u in range(unroll) for a, n in zip(acc[u], added[u])])
        rest = CountedLoop(b, "rest", grouped, count, 1)
        totals = [rest.phi(g.vec, acc[0][v]) for v in range(vectors)]
        rest.enter()
        row = at(column, b.mul(rest.index, d["x_pixel"]))
        rest.leave([(t, combine(t, g.load(at(row, _c(v * lanes)), m))) for v, t in enumerate(totals)])
        for v in range(vectors):
            result = totals[v]
            for u in range(1, unroll):
                result = combine(result, acc[u][v])
            g.store(result if maximum else b.fmul(result, scale), at(target, b.add(c, _c(v * lanes))), m)

    step = BLOCK_VECTORS * lanes
    blocks = CountedLoop(b, "block", _c(0), b.sub(whole, _c(step - 1)), step)   # whole blocks of vectors
    blocks.enter()
    reduce(blocks.index, BLOCK_VECTORS)
    blocks.leave()
    left = b.sdiv(b.sub(whole, blocks.index), _c(lanes))                       # then the 1-3 vectors left
    for vectors in range(1, BLOCK_VECTORS):
        when(b, b.icmp_signed("==", left, _c(vectors)), lambda v=vectors: reduce(blocks.index, v), f"left{vectors}")
    when(b, b.icmp_signed("<", whole, channels), lambda: reduce(whole, 1, mask), "tail")
    item.leave()
    b.ret_void()
    return g.module

