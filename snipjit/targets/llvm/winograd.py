"""The transforms of a Winograd convolution F(m×m, 3×3) of a channels-last image, generated from the matrices.

A 3×3 convolution of stride 1 computes each m×m tile of its output from the α×α input tile under it
(α = m + 2): Y = Aᵀ [U ⊙ (Bᵀ d B)] A, with U = G g Gᵀ the transformed weights (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks"). Summed over the input channels, each of the α² positions
of the transformed tile is one matrix product [tiles, C] × [C, O], which the GEMM microkernel computes
(`runtime.implementations.winograd_launch`) with α²/(9·m²) of the direct convolution's multiply-adds.
The two kernels generated here bracket those products, channel vector by channel vector, as straight-line
code (additions, and multiplications by the matrices' other constants):

- `input`: each tile's α×α pixels of the image (zeros in the padding) to V = Bᵀ d B, stored position by
  position: V[position, tile, C];
- `output`: the products M[position, tile, O] to Y = Aᵀ M A, plus the bias, a residual tensor of the
  output's shape, then the activation and the clamp, stored to the output pixels inside the image.

Work items are rows of tiles of one image: `fn(ptrs, dims, begin, end, scratch)` does items [begin, end).
Input: ptrs (image [N, H, W, C], V, zeros: C zeros), dims `INPUT_DIMS`. Output: ptrs (M, output, bias: O
values, residual and clamp: null or as the GEMM kernel's), dims `OUTPUT_DIMS` (the output's pixel at
image·c_image + row·c_row + column·ldc: a channel slice of a wider tensor too; the residual's at
((image·OH + row)·OW + column)·ldr).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as F

from llvmlite import ir

from .counted_loop import CountedLoop, i64 as _c, when
from .gemm_builder import GemmBuilder, apply_activation, clamp_to_bounds

# (Bᵀ, G, Aᵀ) of F(m×m, 3×3) by output tile size m
MATRICES: dict[int, tuple[tuple, tuple, tuple]] = {
    2: (((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        ((1, 0, 0), (F(1, 2), F(1, 2), F(1, 2)), (F(1, 2), F(-1, 2), F(1, 2)), (0, 0, 1)),
        ((1, 1, 1, 0), (0, 1, -1, -1))),
    4: (((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0), (0, -2, -1, 2, 1, 0),
         (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1)),
        ((F(1, 4), 0, 0), (F(-1, 6), F(-1, 6), F(-1, 6)), (F(-1, 6), F(1, 6), F(-1, 6)),
         (F(1, 24), F(1, 12), F(1, 6)), (F(1, 24), F(-1, 12), F(1, 6)), (0, 0, 1)),
        ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))),
}

INPUT_DIMS = ("N", "H", "W", "C", "tiles_h", "tiles_w", "pad_t", "pad_l")
INPUT_PTRS = ("X", "V", "zeros")
OUTPUT_DIMS = ("N", "OH", "OW", "O", "tiles_h", "tiles_w", "c_image", "c_row", "ldc", "ldr")
OUTPUT_PTRS = ("M", "Y", "bias", "residual", "clamp")


@dataclass(frozen=True)
class WinogradTransform:
    """One transform kernel: `input` or `output` of F(tile×tile, 3×3)."""
    kind: str
    tile: int
    lanes: int
    fused: bool = True
    activation: str = ""   # (output) a math-library function before the clamp

    @property
    def alpha(self) -> int:
        return self.tile + 2

    @property
    def name(self) -> str:
        return (f"snipjit_winograd{self.tile}_{self.kind}_x{self.lanes}{'' if self.fused else '_mul_add'}"
                f"{'_' + self.activation if self.activation else ''}")


def _combine(b: ir.IRBuilder, terms: list[tuple[object, ir.Value]], zero: ir.Value) -> ir.Value:
    """Σ coefficient · value over the terms with a coefficient not 0 (±1 as additions)."""
    total = None
    for coefficient, value in terms:
        if coefficient == 0:
            continue
        if abs(coefficient) != 1:
            value = b.fmul(value, ir.Constant(value.type, [float(abs(coefficient))] * value.type.count))
        if total is None:
            total = value if coefficient > 0 else b.fsub(zero, value)
        else:
            total = b.fadd(total, value) if coefficient > 0 else b.fsub(total, value)
    return zero if total is None else total


def _sandwich(b: ir.IRBuilder, left: tuple, tile: list[list[ir.Value]], zero: ir.Value) -> list[list[ir.Value]]:
    """left · tile · leftᵀ (`left` a matrix of constants, `tile` of vectors)."""
    rows = [[_combine(b, [(left[i][k], tile[k][j]) for k in range(len(tile))], zero) for j in range(len(tile[0]))]
            for i in range(len(left))]
    return [[_combine(b, [(left[j][k], rows[i][k]) for k in range(len(rows[0]))], zero) for j in range(len(left))]
            for i in range(len(rows))]


def _transform(g: GemmBuilder, left: tuple, addresses: list, c) -> list[list[ir.Value]]:
    """left · T · leftᵀ of the α×α tile T of channel vectors at `addresses` (row-major) + c."""
    alpha = g.shape.alpha
    tile = [[g.load(g.at(addresses[i * alpha + j], c)) for j in range(alpha)] for i in range(alpha)]
    return _sandwich(g.b, left, tile, g.zero)


def _tile_rows(g: GemmBuilder):
    """The loop over work items (an image's row of tiles): (image, tile row); the caller closes it."""
    b, d = g.b, g.d
    items = CountedLoop(b, "item", g.begin, g.end, 1)
    items.enter()
    image = b.sdiv(items.index, d["tiles_h"])
    return items, image, b.srem(items.index, d["tiles_h"])


def _by_position(g: GemmBuilder, base, image, tile_row, column, width) -> list:
    """Where a tile's values lie in a position-major buffer [α², tiles, width], position by position."""
    b, d = g.b, g.d
    tiles = b.mul(b.mul(d["N"], d["tiles_h"]), d["tiles_w"])
    tile = b.add(b.mul(b.add(b.mul(image, d["tiles_h"]), tile_row), d["tiles_w"]), column)
    return [g.at(base, b.mul(b.add(b.mul(_c(p), tiles), tile), width)) for p in range(g.shape.alpha ** 2)]


def input_module(shape: WinogradTransform) -> ir.Module:
    g = GemmBuilder(shape, INPUT_DIMS, INPUT_PTRS)
    b, d, alpha, lanes = g.b, g.d, shape.alpha, shape.lanes
    bt = MATRICES[shape.tile][0]
    x, v, zeros = (g.pointer(name) for name in INPUT_PTRS)
    items, image, tile_row = _tile_rows(g)
    top = b.sub(b.mul(tile_row, _c(shape.tile)), d["pad_t"])
    columns = CountedLoop(b, "tile", _c(0), d["tiles_w"], 1)
    columns.enter()
    left = b.sub(b.mul(columns.index, _c(shape.tile)), d["pad_l"])
    pixels = []   # each tap's pixel, or the zeros in the padding
    for i in range(alpha):
        y = b.add(top, _c(i))
        row = b.mul(b.add(b.mul(image, d["H"]), y), d["W"])
        for j in range(alpha):
            column = b.add(left, _c(j))
            inside = b.and_(b.icmp_unsigned("<", y, d["H"]), b.icmp_unsigned("<", column, d["W"]))
            pixels.append(b.select(inside, g.at(x, b.mul(b.add(row, column), d["C"])), zeros))
    outputs = _by_position(g, v, image, tile_row, columns.index, d["C"])
    channels = CountedLoop(b, "channel", _c(0), d["C"], lanes)
    channels.enter()
    c = channels.index
    transformed = _transform(g, bt, pixels, c)
    for p in range(alpha * alpha):
        g.store(transformed[p // alpha][p % alpha], g.at(outputs[p], c))
    channels.leave()
    columns.leave()
    items.leave()
    b.ret_void()
    return g.module


def output_module(shape: WinogradTransform) -> ir.Module:
    g = GemmBuilder(shape, OUTPUT_DIMS, OUTPUT_PTRS)
    b, d, alpha, m, lanes = g.b, g.d, shape.alpha, shape.tile, shape.lanes
    at = MATRICES[m][2]
    products, out, bias, residual = (g.pointer(name) for name in OUTPUT_PTRS[:4])
    has_residual = b.icmp_unsigned("!=", residual, g.null)
    clamps = b.icmp_unsigned("!=", g.pointer("clamp"), g.null)
    items, image, tile_row = _tile_rows(g)
    columns = CountedLoop(b, "tile", _c(0), d["tiles_w"], 1)
    columns.enter()
    inputs = _by_position(g, products, image, tile_row, columns.index, d["O"])
    channels = CountedLoop(b, "channel", _c(0), d["O"], lanes)
    channels.enter()
    c = channels.index
    values = _transform(g, at, inputs, c)
    added = g.load(g.at(bias, c))
    for r in range(m):
        y = b.add(b.mul(tile_row, _c(m)), _c(r))
        for s in range(m):
            x = b.add(b.mul(columns.index, _c(m)), _c(s))
            inside = b.and_(b.icmp_signed("<", y, d["OH"]), b.icmp_signed("<", x, d["OW"]))
            when(b, inside, lambda y=y, x=x, value=values[r][s]: _store(g, image, y, x, c, b.fadd(value, added),
                                                                        has_residual, clamps, residual, out))
    channels.leave()
    columns.leave()
    items.leave()
    b.ret_void()
    return g.module


def _store(g: GemmBuilder, image, y, x, c, value, has_residual, clamps, residual, out) -> None:
    """The output pixel's channel vector: plus the residual, activation, clamp; stored."""
    b, d = g.b, g.d
    pixel = b.add(b.mul(b.add(b.mul(image, d["OH"]), y), d["OW"]), x)
    value = g.branches(has_residual, lambda: [b.fadd(value, g.load(g.at(residual, b.add(b.mul(pixel, d["ldr"]), c))))],
                       lambda: [value])[0]
    if g.shape.activation:
        value = apply_activation(g, value)
    value = g.branches(clamps, lambda: clamp_to_bounds(g, [[value]])[0], lambda: [value])[0]
    target = b.add(b.add(b.mul(image, d["c_image"]), b.mul(y, d["c_row"])), b.add(b.mul(x, d["ldc"]), c))
    g.store(value, g.at(out, target))


def winograd_module(shape: WinogradTransform) -> ir.Module:
    """The module defining kernel `shape.name`."""
    if shape.kind not in ("input", "output") or shape.tile not in MATRICES:
        raise ValueError(f"no Winograd {shape.kind} transform for tiles of {shape.tile}")
    return input_module(shape) if shape.kind == "input" else output_module(shape)


__all__ = ["MATRICES", "WinogradTransform", "winograd_module", "INPUT_DIMS", "INPUT_PTRS", "OUTPUT_DIMS",
           "OUTPUT_PTRS"]
