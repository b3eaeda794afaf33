"""Channels-last ConvTranspose: as stride² convolutions (sub-pixel phases), or as a GEMM and a scatter.

Output row oy receives the kernel rows ky ≡ oy + pad (mod stride) only: the output rows of one residue
(a phase) are a stride-1 convolution of the input with those kernel rows, flipped. So without dilation a
ConvTranspose is stride_h · stride_w convolutions on the convolution microkernel (`conv_launch`), each
writing its pixels straight into a strided view of the output, with the bias (and nothing else: no
column buffer, no scatter); the phases' weights are packed once (`pack_conv_transpose`).

With dilation: each input pixel contributes its channels times the weights to a KH × KW window of output
pixels: cols [pixels, KH·KW·O] = x [pixels, C] @ W [C, KH·KW·O] on the GEMM microkernel, then each
tap's slice of cols is added onto the output pixels it lands on, a strided view of y per tap (starting
from the bias).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...memory.solver import aligned_empty
from . import conv_launch, gemm_launch


@dataclass(frozen=True)
class TransposeGeometry:
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    begin: tuple[int, int]     # output rows/columns cut from the start (the pads)


@dataclass(frozen=True)
class PackedTranspose:
    """The weights of a ConvTranspose packed for its strides: per phase (ry, rx) the convolution with
    kernel rows ky = ry + sh·j and columns kx = rx + sw·i, flipped (None: the phase has no taps); or,
    with dilation, B [C, KH·KW·O] (column (ky·KW + kx)·O + o) for the GEMM and scatter."""
    phases: dict[tuple[int, int], conv_launch.PackedConv | None] | None
    columns: gemm_launch.PackedB | None
    strides: tuple[int, int]
    kernel: tuple[int, int]
    out_channels: int
    in_channels: int

    def unpack(self) -> np.ndarray:
        """The ONNX weights again, [C, O, KH, KW]."""
        (kh, kw), o, c = self.kernel, self.out_channels, self.in_channels
        if self.columns is not None:
            return np.ascontiguousarray(self.columns.unpack().reshape(c, kh, kw, o).transpose(0, 3, 1, 2))
        w = np.zeros((c, o, kh, kw), np.float32)
        sh, sw = self.strides
        for (ry, rx), phase in self.phases.items():
            if phase is not None:
                sub = phase.unpack(len(range(ry, kh, sh)), len(range(rx, kw, sw))).transpose(1, 0, 2, 3)
                w[:, :, ry::sh, rx::sw] = sub[:, :, ::-1, ::-1]
        return w


def pack_conv_transpose(w: np.ndarray, strides: tuple[int, int], dilations: tuple[int, int]) -> PackedTranspose:
    """ONNX ConvTranspose weights [C, O, KH, KW] packed for these strides and dilations."""
    c, o, kh, kw = w.shape
    sh, sw = strides
    if tuple(dilations) != (1, 1):
        columns = gemm_launch.pack(np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(c, kh * kw * o), np.float32))
        return PackedTranspose(None, columns, tuple(strides), (kh, kw), o, c)
    phases = {}
    for ry in range(sh):
        for rx in range(sw):
            sub = w[:, :, ry::sh, rx::sw][:, :, ::-1, ::-1]         # [C, O, Kry, Krx], flipped
            phases[ry, rx] = (None if 0 in sub.shape else
                              conv_launch.pack_conv(np.ascontiguousarray(sub.transpose(1, 0, 2, 3), np.float32), 1))
    return PackedTranspose(phases, None, tuple(strides), (kh, kw), o, c)


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


@dataclass
class PhasesLaunch:
    """The phases' convolutions, and the bias written where a phase has no taps."""
    launches: list
    bias_only: list[np.ndarray]     # views of out
    bias: np.ndarray | None

    def run(self) -> None:
        for view in self.bias_only:
            view[...] = 0 if self.bias is None else self.bias
        for launch in self.launches:
            launch.run()


def prepare_conv_transpose(x: np.ndarray, packed: PackedTranspose, out: np.ndarray, geometry: TransposeGeometry,
                           bias: np.ndarray | None = None, repeats: bool = False):
    """out [N, OH, OW, O] = ConvTranspose(x [N, H, W, C]) (+ bias), channels-last; None when the
    microkernels do not take it (no JIT, empty)."""
    n, h, w, c = x.shape
    if (packed.in_channels, packed.out_channels, packed.kernel) != (c, out.shape[3], tuple(geometry.kernel)):
        raise ValueError(f"ConvTranspose weights for {packed.in_channels} -> {packed.out_channels} channels and a "
                         f"{packed.kernel} kernel do not fit an input of {c} channels, {out.shape[3]} outputs and a "
                         f"{tuple(geometry.kernel)} kernel")
    if packed.phases is None:
        return _prepare_scatter(x, packed.columns, out, geometry, bias, repeats)
    if out.size == 0 or x.size == 0:
        return None
    (sh, sw), launches, bias_only = packed.strides, [], []
    for (ry, rx), phase in packed.phases.items():
        # the phase's first output row and column, and which input row its window starts at
        t0y, t0x = -((ry - geometry.begin[0]) // sh), -((rx - geometry.begin[1]) // sw)
        oy0, ox0 = ry - geometry.begin[0] + sh * t0y, rx - geometry.begin[1] + sw * t0x
        rows, columns = -(-(out.shape[1] - oy0) // sh), -(-(out.shape[2] - ox0) // sw)
        if rows <= 0 or columns <= 0:
            continue
        view = out[:, oy0::sh, ox0::sw, :][:, :rows, :columns]
        if phase is None:
            bias_only.append(view)
            continue
        kry, krx = -(-(packed.kernel[0] - ry) // sh), -(-(packed.kernel[1] - rx) // sw)   # the phase's taps
        top, left = kry - 1 - t0y, krx - 1 - t0x
        pads = (top, left, rows + kry - 1 - h - top, columns + krx - 1 - w - left)
        window = conv_launch.ConvGeometry((kry, krx), (1, 1), pads)
        launch = conv_launch.prepare_conv(x, phase, view, window, bias, repeats=repeats)
        if launch is None:
            return None
        launches.append(launch)
    return PhasesLaunch(launches, bias_only, bias)


def _prepare_scatter(x: np.ndarray, packed: gemm_launch.PackedB, out: np.ndarray, geometry: TransposeGeometry,
                     bias: np.ndarray | None, repeats: bool) -> ConvTransposeLaunch | None:
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
