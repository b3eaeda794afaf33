"""Channels-last ConvTranspose as a GEMM and a scatter of its columns (col2im).

Each input pixel contributes its channels times the weights to a KH × KW window of output pixels:
cols [pixels, KH·KW·O] = x [pixels, C] @ W [C, KH·KW·O] on the GEMM microkernel (weights packed once),
then each tap's slice of cols is added onto the output pixels it lands on, a strided view of y per tap
(starting from the bias). The product is the work; the scatter reads cols once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...memory.solver import aligned_empty
from . import gemm_launch


@dataclass(frozen=True)
class TransposeGeometry:
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    begin: tuple[int, int]     # output rows/columns cut from the start (the pads)


def pack_conv_transpose(w: np.ndarray) -> gemm_launch.PackedB:
    """ONNX ConvTranspose weights [C, O, KH, KW] as B [C, KH·KW·O] (column (ky·KW + kx)·O + o), packed."""
    c, o, kh, kw = w.shape
    return gemm_launch.pack(np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(c, kh * kw * o), np.float32))


def _taps_1d(size: int, out: int, k: int, stride: int, dilation: int, begin: int) -> list[tuple[slice, slice]]:
    """Per kernel offset along one axis: (input slice, output slice) of the positions it maps inside."""
    spans = []
    for t in range(k):
        shift = t * dilation - begin            # output = input · stride + shift
        first = max(0, -(shift // stride))      # the first input landing at output >= 0
        last = min(size - 1, (out - 1 - shift) // stride)
        if first > last:
            spans.append((slice(0, 0), slice(0, 0)))
            continue
        start = first * stride + shift
        spans.append((slice(first, last + 1), slice(start, start + (last - first) * stride + 1, stride)))
    return spans


@dataclass
class ConvTransposeLaunch:
    product: gemm_launch.GemmLaunch
    cols: np.ndarray              # [N, H, W, KH, KW, O]
    out: np.ndarray
    bias: np.ndarray | None
    scatter: list[tuple[tuple, tuple]]   # (cols index, out index) per tap

    def run(self) -> None:
        self.product.run()
        if self.bias is None:
            self.out[...] = 0
        else:
            self.out[...] = self.bias
        for src, dst in self.scatter:
            view = self.out[dst]
            np.add(view, self.cols[src], out=view)


def prepare_conv_transpose(x: np.ndarray, packed: gemm_launch.PackedB, out: np.ndarray, geometry: TransposeGeometry,
                           bias: np.ndarray | None = None, repeats: bool = False) -> ConvTransposeLaunch | None:
    """out [N, OH, OW, O] = ConvTranspose(x [N, H, W, C]) (+ bias), channels-last; None when the GEMM
    does not take it (no JIT, empty)."""
    n, h, w, c = x.shape
    (kh, kw), o = geometry.kernel, out.shape[3]
    if packed.k != c or packed.n != kh * kw * o:
        raise ValueError(f"ConvTranspose weights for {packed.k} channels and {packed.n} columns do not fit an "
                         f"input of {c} channels and {o} outputs of a {kh}x{kw} kernel")
    cols = aligned_empty(4 * max(1, math.prod((n, h, w, kh, kw, o)))).view(np.float32)[:n * h * w * kh * kw * o]
    cols = cols.reshape(n, h, w, kh, kw, o)
    product = gemm_launch.prepare(x.reshape(n * h * w, c), packed, cols.reshape(n * h * w, kh * kw * o),
                                  repeats=repeats)
    if product is None:
        return None
    rows = _taps_1d(h, out.shape[1], kh, geometry.strides[0], geometry.dilations[0], geometry.begin[0])
    columns = _taps_1d(w, out.shape[2], kw, geometry.strides[1], geometry.dilations[1], geometry.begin[1])
    scatter = [((slice(None), ys, xs, ky, kx), (slice(None), yd, xd))
               for ky, (ys, yd) in enumerate(rows) for kx, (xs, xd) in enumerate(columns)
               if ys.stop > ys.start and xs.stop > xs.start]
    return ConvTransposeLaunch(product, cols, out, bias, scatter)
