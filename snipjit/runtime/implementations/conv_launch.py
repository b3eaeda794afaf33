"""Channels-last convolutions on the GEMM microkernel, without an im2col copy.

A Conv over an NHWC image [images, H, W, C] is the product of the output pixels' windows
[images·OH·OW, KH·KW·C/groups] with the weights [KH·KW·C/groups, O/groups], per group. The kernel
(`targets.llvm.gemm`, a `conv` MicroKernel) reads each window row straight from the image, tap by tap,
so the only copy is the weights', packed once at compile time tap-major into the GEMM's zero-padded
panels (`pack_conv`). Output channels lie along the vector lanes and pixels along the rows, so any
channel count and any image size use whole register blocks; bias and a clamp (Relu, Clip) are applied
in registers before the store.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .gemm_launch import GemmKernel, GemmLaunch, available, kernel_pointers, pack_batched, packed_product


ROW_TAPS_MAX_CHANNELS = 32   # the most input channels for which a kernel row's taps run as one K loop


@dataclass(frozen=True)
class ConvGeometry:
    """A 2-D convolution's window: kernel (KH, KW), strides, pads (top, left, bottom, right), dilations."""
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)

    @property
    def pointwise(self) -> bool:
        """A 1×1 window at stride 1 without padding: each output pixel is its input pixel's channels."""
        return self.kernel == (1, 1) and self.strides == (1, 1) and not any(self.pads)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.strides, self.dilations
        top, left, bottom, right = self.pads
        return ((h + top + bottom - (kh - 1) * dh - 1) // sh + 1,
                (w + left + right - (kw - 1) * dw - 1) // sw + 1)


@dataclass(frozen=True)
class PackedConv:
    """Conv weights [O, C/groups, KH, KW] as the kernel reads them: per group, B [KH·KW·cg, O/groups]
    (row (kh·KW + kw)·cg + c) packed panel by panel; data [groups, panels, KH·KW·cg, NR]."""
    data: np.ndarray
    groups: int
    cg: int        # input channels per group
    n: int         # output channels per group
    taps: int
    kernel: GemmKernel

    @property
    def k(self) -> int:
        return self.taps * self.cg

    def unpack(self, kh: int, kw: int) -> np.ndarray:
        """The ONNX weights again, [O, C/groups, KH, KW] (KH·KW = taps)."""
        b = self.data.transpose(0, 2, 1, 3).reshape(self.groups, self.k, -1)[:, :, :self.n]
        w = b.reshape(self.groups, kh, kw, self.cg, self.n).transpose(0, 4, 3, 1, 2)
        return np.ascontiguousarray(w.reshape(self.groups * self.n, self.cg, kh, kw))


def pack_conv(w: np.ndarray, groups: int) -> PackedConv:
    o, cg, kh, kw = w.shape
    if o % groups:
        raise ValueError(f"{o} output channels do not split into {groups} groups")
    n = o // groups
    per_group = w.reshape(groups, n, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(groups, kh * kw * cg, n)
    data, kernel = pack_batched(per_group)
    return PackedConv(data, groups, cg, n, kh * kw, kernel.for_convolution())


def input_row_bytes(cg: int, geometry: ConvGeometry) -> int:
    """The bytes of its input an output pixel of a convolution (per group of `cg` channels) reads that its
    neighbours do not: the pixels its stride steps over, or its window covers where the window is smaller."""
    (kh, kw), (sh, sw) = geometry.kernel, geometry.strides
    return 4 * cg * min(sh, kh) * min(sw, kw)


def conv_kernel(packed: PackedConv, geometry: ConvGeometry, planar: bool = False, activation: str = "",
                pixel_rows: bool = True) -> GemmKernel:
    """The kernel a convolution runs on: a 1×1 one of stride 1 without padding on an NHWC image, into an
    output whose pixels are rows (`pixel_rows`), is a product of the pixels' rows (per group: a band of the
    channels) by the weights, on the plain kernel (no window arithmetic per row of A); any other, the
    convolution kernel."""
    if geometry.pointwise and not planar and pixel_rows:
        return packed.kernel.for_products(activation)
    column_stride = geometry.strides[1] if geometry.dilations[1] == 1 else 0
    return packed.kernel.for_convolution(planar, activation, (geometry.kernel[1], packed.cg, column_stride))


def _pointwise(x: np.ndarray, packed: PackedConv, kernel: GemmKernel, out: np.ndarray, bias: np.ndarray | None,
               clamp: np.ndarray | None, residual: np.ndarray | None, repeats: bool,
               scale: np.ndarray | None = None) -> GemmLaunch | None:
    """A 1×1 convolution as the product of the pixels' rows by the weights (`conv_kernel`); with a `scale` of
    the input's channels per image, an image a product (by its own scaled copy of each panel of weights)."""
    if scale is not None:
        return _scaled_pointwise(x, packed, kernel, out, bias, clamp, residual, repeats, scale)
    ptrs = kernel_pointers(A=x, B=packed.data, C=out, bias=bias, clamp=clamp, residual=residual)
    return packed_product(kernel, packed.groups, x.shape[0] * x.shape[1] * x.shape[2], packed.k, packed.n, ptrs,
                          packed, lda=x.shape[3], a_batch=packed.cg, ldc=out.strides[2] // 4, c_batch=packed.n,
                          bias=bias, bias_batch=packed.n, ldr=0 if residual is None else residual.strides[2] // 4,
                          repeats=repeats, held=(clamp,), interleaved=packed.groups > 1)


def _scaled_pointwise(x: np.ndarray, packed: PackedConv, kernel: GemmKernel, out: np.ndarray,
                      bias: np.ndarray | None, clamp: np.ndarray | None, residual: np.ndarray | None, repeats: bool,
                      scale: np.ndarray) -> GemmLaunch | None:
    """conv(x · scale) for a 1×1 convolution of one group, scale [images, 1, 1, C]: image i's product reads
    the weights' rows times scale[i] (copied so by each work item), the same as scaling x's H·W·C values
    first, in K·NR multiplies a work item. None (not taken) for a residual laid out unlike the output."""
    images, h, w, c = x.shape
    if packed.groups != 1 or scale.shape != (images, 1, 1, c) or scale.dtype != np.float32 \
            or not scale.flags.c_contiguous:
        raise ValueError(f"an input scale of a convolution of {packed.groups} group(s) on {list(x.shape)} must be "
                         f"float32 [{images}, 1, 1, {c}] of one group, got {scale.dtype}{list(scale.shape)}")
    if residual is not None and residual.strides != out.strides:
        return None
    ptrs = kernel_pointers(A=x, B=packed.data, C=out, bias=bias, clamp=clamp, residual=residual, scale=scale)
    return packed_product(kernel, images, h * w, packed.k, packed.n, ptrs, packed, lda=c, a_batch=h * w * c,
                          ldc=out.strides[2] // 4, c_batch=out.strides[0] // 4, bias=bias,
                          ldr=0 if residual is None else residual.strides[2] // 4, repeats=repeats,
                          held=(clamp, scale), shared_weights=True, scale_batch=c)


def pixel_rows(out: np.ndarray) -> bool:
    """Whether an NHWC array is C-contiguous but for its pixels' stride: the whole tensor, or a slice of
    the channels of a wider one (a Concat's output, written in place)."""
    if out.ndim != 4 or out.strides[3] != out.itemsize or out.strides[2] < out.shape[3] * out.itemsize:
        return False
    return out.strides[1] == out.shape[2] * out.strides[2] and out.strides[0] == out.shape[1] * out.strides[1]


def _strided_pixels(out: np.ndarray) -> bool:
    """An NHWC array whose channels are contiguous and whose pixels, rows and images do not overlap."""
    if out.ndim != 4 or out.strides[3] != out.itemsize or any(s <= 0 or s % out.itemsize for s in out.strides):
        return False
    n, h, w, c = out.shape
    row = (w - 1) * out.strides[2] + c * out.itemsize          # bytes from a row's first pixel to its end
    image = (h - 1) * out.strides[1] + row
    return out.strides[2] >= c * out.itemsize and (h < 2 or out.strides[1] >= row) \
        and (n < 2 or out.strides[0] >= image)


def _clamp_array(clamp: tuple[float, float] | None) -> np.ndarray | None:
    if clamp is None:
        return None
    lo, hi = (-np.inf if clamp[0] is None else clamp[0]), (np.inf if clamp[1] is None else clamp[1])
    return np.array([lo, hi], np.float32)


def prepare_conv(x: np.ndarray, packed: PackedConv, out: np.ndarray, geometry: ConvGeometry,
                 bias: np.ndarray | None = None, clamp: tuple[float, float] | None = None,
                 repeats: bool = False, planar: bool = False, activation: str = "",
                 residual: np.ndarray | None = None, scale: np.ndarray | None = None) -> GemmLaunch | None:
    """The launch computing out = conv(x · scale) (+ bias, + `residual` (an NHWC tensor of out's shape), then
    `activation`, a math-library function, then clamped) with x [images, H, W, C] (`planar`:
    [images, C, H, W]) and out [images, OH, OW, O] channels-last; `scale` (optional, a 1×1 convolution of
    stride 1 and one group only): [images, 1, 1, C]. None when the JIT is not available, there is nothing
    to multiply (an empty output or no input channels) or a scale comes with another convolution. Shapes
    that do not fit the weights and the geometry raise ValueError."""
    if not available():
        return None
    images, h, w, c = (x.shape[0], *x.shape[2:], x.shape[1]) if planar else x.shape
    kernel = conv_kernel(packed, geometry, planar, activation, pixel_rows(out))
    groups, cg = packed.groups, packed.cg
    oh, ow = geometry.output_size(h, w)
    expected = (images, oh, ow, groups * packed.n)
    if c != groups * cg or tuple(out.shape) != expected:
        layout = "NCHW" if planar else "NHWC"
        raise ValueError(f"convolution of an image {tuple(x.shape)} ({layout}) by weights for {groups * cg} input "
                         f"channels in {groups} groups gives {expected}, not {tuple(out.shape)}")
    if not (x.flags.c_contiguous and _strided_pixels(out) and x.dtype == out.dtype == np.float32):
        raise ValueError("convolution operands must be float32 arrays, the input C-contiguous, the output "
                         "with contiguous channels")
    if residual is not None and (residual.shape != out.shape or residual.dtype != np.float32
                                 or not pixel_rows(residual)):
        raise ValueError(f"the residual added to a convolution must be float32 {list(out.shape)} with contiguous "
                         f"channels, got {residual.dtype}{list(residual.shape)}")
    if bias is not None and (bias.dtype != np.float32 or bias.size != expected[3] or not bias.flags.c_contiguous):
        raise ValueError(f"convolution bias must be {expected[3]} contiguous float32 values")
    m, n, k = images * oh * ow, packed.n, packed.k
    if m == 0 or n == 0 or k == 0:
        return None
    clamp_values = _clamp_array(clamp)
    if not kernel.shape.conv:   # (a 1×1 convolution as a product)
        return _pointwise(x, packed, kernel, out, bias, clamp_values, residual, repeats, scale)
    if scale is not None:
        return None
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel, geometry.strides, geometry.dilations
    # a kernel row's taps are one run of the image's channels (one group, no dilation along the row): one K
    # loop per kernel row, where a tap's own would be short (one thread, Zen 3: 3x3 windows of 3, 16 and 32
    # channels 1.26x, 1.15x and 1.04x faster; of 64-512 channels 0.94-1.0x)
    row_taps = not planar and groups == 1 and dw == 1 and cg <= ROW_TAPS_MAX_CHANNELS
    # K blocks cover whole taps; whole kernel rows where the kernel runs along them (a planar image, row_taps)
    run = kw * cg if planar or row_taps else cg
    channel_stride = h * w if planar else 1
    # what a tap in the padding reads instead of a pixel: its cg channels, channel_stride apart, or a
    # kernel row (np.zeros maps untouched pages to the zero page: the long stride costs no memory)
    # (a planar kernel of a fixed column stride reads a block's rows a stride apart from the zero row too)
    line = ((kernel.mr - 1) * sw if kernel.shape.column_stride else 0) + (kw - 1) * dw + 1
    zeros = np.zeros(max((cg - 1) * channel_stride + 1, line if planar else run), np.float32)
    ptrs = kernel_pointers(A=x, B=packed.data, C=out, bias=bias, clamp=clamp_values, zeros=zeros, residual=residual)
    return packed_product(kernel, groups, m, k, n, ptrs, packed, lda=0, a_batch=cg * channel_stride,
                          ldc=out.strides[2] // 4, c_batch=n, bias=bias, bias_batch=n,
                          ldr=0 if residual is None else residual.strides[2] // 4, repeats=repeats,
                          held=(clamp_values, zeros), k_unit=run,
                          a_row_bytes=input_row_bytes(cg, geometry), interleaved=groups > 1,
                          c_image=out.strides[0] // 4, c_row=out.strides[1] // 4, cg=cg, H=h, W=w, OH=oh, OW=ow,
                          KW=kw, stride_h=sh, stride_w=sw, pad_t=geometry.pads[0], pad_l=geometry.pads[1],
                          dil_h=dh, dil_w=dw, image_stride=h * w * c, pixel_stride=1 if planar else c,
                          channel_stride=channel_stride, row_taps=int(row_taps))
