"""Channels-last int8 convolutions (a QDQ model's Conv) on the int8 microkernels, run on the native pool.

A launch is two kernels: `gemm_int8.quantize_module` quantizes the float image with the activations'
static scale and zero point into a uint8 copy (uint16 for `pmaddwd` pairs), each pixel's channels padded
to Kp; then `conv_int8` multiplies its windows by the int8 weights, packed once (tap-major, channels
padded to Kp) with each output channel's sum for the zero point (taken off the integer sums), and applies
the float epilogue in its store: the per-channel scale s_x · s_w, bias, residual, activation and clamp. The
image is quantized once, not once per tap that reads it; a signed int8 activation type moves into uint8's
range (`ops.int8.unsigned_zero`), as the dot products take unsigned activations.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...memory.solver import aligned_empty
from ...ops.int8 import StaticQuantization, unsigned_zero
from ..parallel.native_threads import scratchpads
from .conv_launch import ConvGeometry, _clamp_array, _strided_pixels, pixel_rows
from .gemm_launch import WorkSplit, available
from .kernel_arguments import dim_array, pointer_array
from . import int8


def exact_int8_levels(w: np.ndarray, scales: np.ndarray) -> np.ndarray | None:
    """The int8 values q with w == float32(q) · scale of each output channel (DequantizeLinear folded
    into w), or None when w is not exactly such a product (weights changed after dequantization)."""
    scales = np.asarray(scales, np.float32).reshape(-1)
    if scales.size not in (1, w.shape[0]) or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        return None
    per_channel = np.broadcast_to(scales, (w.shape[0],)).reshape(-1, *([1] * (w.ndim - 1)))
    q = np.round(w.astype(np.float64) / per_channel)
    if not np.all(np.abs(q) <= 128) or q.min(initial=0) < -128 or q.max(initial=0) > 127:
        return None
    q = q.astype(np.int8)
    if not np.array_equal(q.astype(np.float32) * per_channel, w):
        return None
    return q


@dataclass(frozen=True)
class PackedInt8Conv:
    """Int8 conv weights [O, C, KH, KW] packed as the int8 GEMM packs a [taps · Kp, O] matrix."""
    weights: int8.PackedInt8
    weight_scales: np.ndarray   # [O] float32
    channels: int               # C
    kp: int                     # channels per pixel of the quantized image (C padded)
    kernel: tuple[int, int]     # (KH, KW)

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def n(self) -> int:
        return self.weights.n

    @property
    def shape(self):
        return self.weights.shape

    def unpack(self) -> np.ndarray:
        """The float weights [O, C, KH, KW] they were recovered from (int8 times the scales)."""
        panels, steps, nr, group = self.weights.data.shape
        matrix = self.weights.data.transpose(1, 3, 0, 2).reshape(steps * group, panels * nr)[:, :self.n]
        q = matrix.reshape(*self.kernel, self.kp, self.n)[:, :, :self.channels].transpose(3, 2, 0, 1)
        return np.ascontiguousarray(q.astype(np.float32) * self.weight_scales.reshape(-1, 1, 1, 1))


def pack_int8_conv(q: np.ndarray, scales: np.ndarray) -> PackedInt8Conv:
    o, c, kh, kw = q.shape
    shape = int8.kernel_shape(o, kh * kw * c)
    kp = shape.padded_k(c)
    taps = np.zeros((kh * kw, kp, o), np.int8)
    taps[:, :c, :] = q.transpose(2, 3, 1, 0).reshape(kh * kw, c, o)
    weights = int8.pack(taps.reshape(kh * kw * kp, o), shape)
    per_channel = np.ascontiguousarray(np.broadcast_to(np.asarray(scales, np.float32).reshape(-1), (o,)))
    return PackedInt8Conv(weights, per_channel, c, kp, (kh, kw))


@dataclass
class Int8ConvLaunch:
    """Quantize the image, then convolve; `held` keeps the arrays the kernels point at alive."""
    quantize: int8.NativeCall
    conv: int8.NativeCall
    held: tuple

    def run(self) -> None:
        self.quantize.run()
        self.conv.run()


def prepare_int8_conv(x: np.ndarray, packed: PackedInt8Conv, out: np.ndarray, geometry: ConvGeometry,
                      quantization: StaticQuantization, bias: np.ndarray | None = None,
                      clamp: tuple[float, float] | None = None, activation: str = "",
                      residual: np.ndarray | None = None) -> Int8ConvLaunch | None:
    """The launch of out = clamp(activation(conv(quantized x) · s_x · s_w + bias + residual)) for x
    [images, H, W, C] float32 C-contiguous and out [images, OH, OW, O] with contiguous channels; None where
    the JIT is not available, there is nothing to compute, or the operands are not laid out so."""
    from ...targets.llvm.conv_int8 import DIMS, PTRS, conv_int8_module, conv_name
    from ...targets.llvm.gemm_int8 import QUANTIZE_DIMS, QUANTIZE_PTRS, quantize_module
    if not available() or x.ndim != 4 or out.ndim != 4:
        return None
    images, h, w, c = x.shape
    oh, ow = geometry.output_size(h, w)
    if (c != packed.channels or tuple(out.shape) != (images, oh, ow, packed.n) or x.dtype != np.float32
            or out.dtype != np.float32 or not x.flags.c_contiguous or not _strided_pixels(out)):
        return None
    if residual is not None and (residual.shape != out.shape or residual.dtype != np.float32
                                 or not pixel_rows(residual)):
        return None
    m, shape = images * oh * ow, packed.shape
    if m == 0 or packed.n == 0 or c == 0:
        return None
    zero = unsigned_zero(quantization.zero, quantization.low)
    value_type = np.uint8 if shape.value_bytes == 1 else np.uint16
    image = aligned_empty((images * h * w + 1) * packed.kp * shape.value_bytes).view(value_type)
    zeros = image[images * h * w * packed.kp:]
    zeros[:] = zero
    params = np.array([quantization.scale, zero], np.float32)

    split = WorkSplit.of(shape, 1, m, packed.n, packed.taps * packed.kp)
    pixels = images * h * w
    rows = max(1, -(-pixels // (4 * split.threads)))
    quantize_ptrs = pointer_array(QUANTIZE_PTRS, X=x, Q=image, params=params)
    quantize_dims = dim_array(QUANTIZE_DIMS, M=pixels, K=c, Kp=packed.kp, ldx=c, chunk_rows=rows)
    quantize = int8.NativeCall(shape.quantize_name, lambda: quantize_module(shape), quantize_ptrs, quantize_dims,
                               -(-pixels // rows), split.threads, scratchpads(split.threads, 0))

    columns = packed.weights.colsum.size
    scale, added = np.zeros(columns, np.float32), np.zeros(columns, np.float32)
    scale[:packed.n] = packed.weight_scales * np.float32(quantization.scale)
    added[:packed.n] = 0 if bias is None else bias
    zero_sums = (packed.weights.colsum.astype(np.int64) * zero).astype(np.int32)
    clamp_values = _clamp_array(clamp)
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel, geometry.strides, geometry.dilations
    values = dict(M=m, Kp=packed.kp, N=packed.n, panels=split.panels, chunks=split.chunks,
                  chunk_rows=split.chunk_rows, H=h, W=w, OH=oh, OW=ow, KW=kw, taps=kh * kw, stride_h=sh, stride_w=sw,
                  pad_t=geometry.pads[0], pad_l=geometry.pads[1], dil_h=dh, dil_w=dw, ldc=out.strides[2] // 4,
                  c_image=out.strides[0] // 4, c_row=out.strides[1] // 4,
                  ldr=0 if residual is None else residual.strides[2] // 4)
    ptrs = pointer_array(PTRS, Q=image, B=packed.weights.data, C=out, scale=scale, bias=added, zero_sums=zero_sums,
                         residual=residual, clamp=clamp_values, zeros=zeros)
    dims = dim_array(DIMS, **values)
    conv = int8.NativeCall(conv_name(shape, activation), lambda: conv_int8_module(shape, activation), ptrs, dims,
                           split.items, split.threads, scratchpads(split.threads, 0))
    return Int8ConvLaunch(quantize, conv, (image, params, scale, added, zero_sums, clamp_values, residual, packed))


__all__ = ["Int8ConvLaunch", "PackedInt8Conv", "exact_int8_levels", "pack_int8_conv", "prepare_int8_conv"]
