"""Convolutions, pools and their inverses over NCHW-style tensors [N, C, *spatial] (1-D, 2-D, 3-D, ...).

All of them slide a `Window` (see `windows`) over the input. Conv turns the window view into an im2col
matrix and multiplies it with the weights (one BLAS call per group); ConvTranspose is the Conv of the
stride-dilated input with the flipped kernel; the pools reduce the view over its kernel axes in one pooling
core (`_pool`). Col2Im and MaxUnpool invert im2col and MaxPool.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import i8, i64, u8
from ..ir.graph import TensorType
from ..ir.shape import Dim, Shape, shape_str
from ._indexing import dim_affine, ints, require_rank, shape_input, static_length, tensor
from .common import FLOATS, check_dtypes, compute_dtype, one_of, require_dtype_of_x, upcast
from .registry import REQUIRED, Category, OpContext, register
from .windows import Placement, Window, conv_output, im2col, place_window, window_from_attrs, window_view

H = Category.HEAVY


def _spatial_shape(ctx: OpContext, x: Shape, win: Window) -> list[Dim] | None:
    if x is None:
        return None
    if len(x) != win.rank + 2:
        raise ctx.fail(f"input of rank {len(x)} does not fit a {win.rank}-D window (rank {win.rank + 2} needed)")
    return [win.out_dim(i, d) for i, d in enumerate(x[2:])]


# ---- Conv -----------------------------------------------------------------------------------------------
def _kernel_of(ctx: OpContext, w: Shape) -> tuple[int, ...] | None:
    """The kernel's spatial size: the kernel_shape attribute, checked against the weights."""
    given = ctx.attrs["kernel_shape"]
    from_w = None if w is None else w[2:]
    if given is not None:
        if from_w is not None and (len(from_w) != len(given) or
                                   any(isinstance(a, int) and a != b for a, b in zip(from_w, given))):
            raise ctx.fail(f"kernel_shape {list(given)} does not match the weights {list(w)}")
        return tuple(int(k) for k in given)
    if from_w is None or not all(isinstance(k, int) for k in from_w):
        return None
    return tuple(from_w)


def _check_group(ctx: OpContext, c: Dim, w_in: Dim, m: Dim) -> None:
    g = ctx.attrs["group"]
    if g < 1:
        raise ctx.fail(f"group must be positive, got {g}")
    if isinstance(c, int) and isinstance(w_in, int) and c != w_in * g:
        raise ctx.fail(f"input has {c} channels but weights expect {w_in} per group x {g} groups")
    if isinstance(m, int) and m % g:
        raise ctx.fail(f"{m} output channels do not split into {g} groups")


def _check_bias(ctx: OpContext, b: Shape, m: Dim) -> None:
    if b is not None and (len(b) != 1 or (isinstance(b[0], int) and isinstance(m, int) and b[0] != m)):
        raise ctx.fail(f"bias of shape {list(b)} must be 1-D with one value per output channel ({m})")


def _infer_conv(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x, w = ctx.in_types[:2]
    require_dtype_of_x(ctx)
    if w.shape is not None and len(w.shape) < 3:
        raise ctx.fail(f"weights must have rank >= 3, got {list(w.shape)}")
    m = None if w.shape is None else w.shape[0]
    if ctx.has_input(2):
        _check_bias(ctx, ctx.in_types[2].shape, m)
    if x.shape is not None and w.shape is not None:
        if len(x.shape) != len(w.shape):
            raise ctx.fail(f"X of shape {list(x.shape)} and W of shape {list(w.shape)} differ in rank")
        _check_group(ctx, x.shape[1], w.shape[1], m)
    kernel = _kernel_of(ctx, w.shape)
    if kernel is None or x.shape is None:
        rank = x.rank if x.rank is not None else w.rank
        return [tensor(x.dtype, None if rank is None else
                       [None if x.shape is None else x.shape[0], m] + [None] * (rank - 2))]
    return [tensor(x.dtype, [x.shape[0], m] + _spatial_shape(ctx, x.shape, window_from_attrs(ctx, kernel)))]


def _conv(ctx: OpContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, win: Window, group: int) -> np.ndarray:
    """The grouped convolution as im2col + one matrix product per group, in x's dtype."""
    wm, cols, spatial = im2col(ctx, x, w, win, group)
    y = conv_output(np.matmul(wm, cols), x.shape[0], spatial)
    if b is not None:
        y = y + b.astype(y.dtype, copy=False).reshape((-1,) + (1,) * len(spatial))
    return np.ascontiguousarray(y, dtype=x.dtype)


_CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
               "strides": None}


@register("Conv", H, infer=_infer_conv, attrs=_CONV_ATTRS, inputs=(2, 3))
def conv(ctx: OpContext, x, w, b=None):
    """Cross-correlation of X [N, C, *spatial] with W [M, C/group, *kernel] (+ bias B [M])."""
    if b is not None and b.shape != (w.shape[0],):
        raise ctx.fail(f"bias of shape {list(b.shape)} must have one value per output channel ({w.shape[0]})")
    kernel = _kernel_of(ctx, w.shape)
    return _conv(ctx, x, w, b, window_from_attrs(ctx, kernel), ctx.attrs["group"])


# ---- ConvTranspose ----------------------------------------------------------------------------------------
def conv_transpose_geometry(ctx: OpContext, spatial: tuple[Dim, ...], kernel: tuple[int, ...]
                        ) -> tuple[list[Dim], list[int] | None]:
    """(output spatial dims, padding cut from the start of each) of ConvTranspose; the padding is None
    when dynamic dims leave it unknown."""
    n = len(kernel)
    win = window_from_attrs(ctx, kernel)
    a = ctx.attrs
    out_pad = [0] * n if a["output_padding"] is None else [int(v) for v in a["output_padding"]]
    if len(out_pad) != n:
        raise ctx.fail(f"output_padding has {len(out_pad)} values but {n} are needed")
    if any(not 0 <= op < max(s, d) for op, s, d in zip(out_pad, win.strides, win.dilations)):
        raise ctx.fail(f"output_padding {out_pad} must be smaller than the stride or dilation")
    # the full (unpadded) output is stride * (d - 1) + output_padding + extent = stride * d + offset
    offset = [op + win.extent(i) - s for i, (s, op) in enumerate(zip(win.strides, out_pad))]
    target = a["output_shape"]
    if target is None and win.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [dim_affine(d, mul=s) for d, s in zip(spatial, win.strides)]
    if target is None:
        begin, end = list(win.pads[:n]), list(win.pads[n:])
        return [dim_affine(d, mul=s, add=o - b - e) for d, s, o, b, e in
                zip(spatial, win.strides, offset, begin, end)], begin
    target = list(target)[-n:]
    full = [dim_affine(d, mul=s, add=o) for d, s, o in zip(spatial, win.strides, offset)]
    if not all(isinstance(f, int) and isinstance(t, int) for f, t in zip(full, target)):
        return target, None
    total = [f - t for f, t in zip(full, target)]
    return target, [t // 2 if win.auto_pad == "SAME_UPPER" else t - t // 2 for t in total]


def _infer_conv_transpose(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x, w = ctx.in_types[:2]
    require_dtype_of_x(ctx)
    g = ctx.attrs["group"]
    m = None if w.shape is None else dim_affine(w.shape[1], mul=g)
    if x.shape is not None and w.shape is not None:
        if len(x.shape) != len(w.shape):
            raise ctx.fail(f"X of shape {list(x.shape)} and W of shape {list(w.shape)} differ in rank")
        if isinstance(x.shape[1], int) and isinstance(w.shape[0], int) and x.shape[1] != w.shape[0]:
            raise ctx.fail(f"input has {x.shape[1]} channels but the weights have {w.shape[0]}")
    if ctx.has_input(2):
        _check_bias(ctx, ctx.in_types[2].shape, m)
    kernel = _kernel_of(ctx, w.shape)
    if kernel is None or x.shape is None:
        rank = x.rank if x.rank is not None else w.rank
        return [tensor(x.dtype, None if rank is None else
                       [None if x.shape is None else x.shape[0], m] + [None] * (rank - 2))]
    require_rank(ctx, x.shape, len(kernel) + 2, what="X")
    out, _ = conv_transpose_geometry(ctx, x.shape[2:], kernel)
    return [tensor(x.dtype, [x.shape[0], m] + out)]


@register("ConvTranspose", H, infer=_infer_conv_transpose, inputs=(2, 3),
          attrs={**_CONV_ATTRS, "output_padding": None, "output_shape": None})
def conv_transpose(ctx: OpContext, x, w, b=None):
    """Gradient of Conv w.r.t. its input: X [N, C, *spatial], W [C, M/group, *kernel] -> [N, M, *out].
    Computed as the Conv of X with zeros inserted between its elements (stride) and the spatially
    flipped, in/out-swapped kernel."""
    g, kernel = ctx.attrs["group"], _kernel_of(ctx, w.shape)
    c, mg = w.shape[:2]
    if x.ndim != w.ndim or x.shape[1] != c or c % g:
        raise ctx.fail(f"X of shape {list(x.shape)} does not fit W of shape {list(w.shape)} with group={g}")
    if b is not None and b.shape != (mg * g,):
        raise ctx.fail(f"bias of shape {list(b.shape)} must have one value per output channel ({mg * g})")
    d = len(kernel)
    win = window_from_attrs(ctx, kernel)
    out, begin = conv_transpose_geometry(ctx, x.shape[2:], kernel)
    if any(o < 1 for o in out):
        raise ctx.fail(f"the output spatial size {out} is empty")
    stretched = np.zeros(x.shape[:2] + tuple(s * (n - 1) + 1 for s, n in zip(win.strides, x.shape[2:])), x.dtype)
    stretched[(slice(None),) * 2 + tuple(slice(None, None, s) for s in win.strides)] = x
    flipped = w[(slice(None),) * 2 + (slice(None, None, -1),) * d]
    flipped = flipped.reshape((g, c // g, mg) + kernel).swapaxes(1, 2).reshape((g * mg, c // g) + kernel)
    # the Conv pads that make the stretched input's output exactly `out` long (negative ones crop)
    pads = [win.extent(i) - 1 - begin[i] for i in range(d)] + \
        [out[i] - stretched.shape[2 + i] + begin[i] for i in range(d)]
    inner = Window(kernel, (1,) * d, win.dilations, tuple(pads))
    return _conv(ctx, stretched, flipped, b, inner, g)


# ---- pools ---------------------------------------------------------------------------------------------
def _lowest(dt: np.dtype):
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _tap_counts(win: Window, p: Placement, spatial: tuple[int, ...], include_pad: bool) -> np.ndarray:
    """How many taps of each window fall inside the input (or inside input + declared pads), as an
    array broadcastable to [*out]."""
    total = np.ones(p.out)
    for i, d in enumerate(spatial):
        taps = np.arange(p.out[i])[:, None] * win.strides[i] - p.begin[i] + \
            np.arange(win.kernel[i])[None, :] * win.dilations[i]
        lo, hi = (-p.begin[i], d + p.end[i]) if include_pad else (0, d)
        count = ((taps >= lo) & (taps < hi)).sum(axis=1)
        total = total * count.reshape([-1 if j == i else 1 for j in range(len(spatial))])
    return total


def _max_indices(x: np.ndarray, win: Window, p: Placement, view: np.ndarray, column_major: bool) -> np.ndarray:
    """For each window, the flat index into x of its (first) maximum; spatial dims flattened row-major,
    or column-major with storage_order=1."""
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    count = math.prod(spatial)
    inner = np.arange(count).reshape(spatial[::-1]).transpose() if column_major else np.arange(count).reshape(spatial)
    flat = np.arange(n * c).reshape(n, c, *([1] * len(spatial))) * count + inner
    where = window_view(flat, win, p, -1).reshape(view.shape[:2 + win.rank] + (-1,))
    best = view.reshape(where.shape).argmax(axis=-1)[..., None]
    return np.take_along_axis(where, best, axis=-1)[..., 0].astype(np.int64)


def _pool(ctx: OpContext, x: np.ndarray, kind: str, win: Window, *, include_pad: bool = False, order: int = 2,
          storage_order: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The pooling core: kind 'max', 'avg' or 'lp' over each window of x. `include_pad` counts padded
    positions in the average's divisor; `order` is Lp's p; with a `storage_order` the argmax indices of
    'max' are returned too (else None)."""
    if x.ndim != win.rank + 2:
        raise ctx.fail(f"input of shape {list(x.shape)} does not fit a {win.rank}-D window")
    win = win.clipped(x.shape[2:])
    p = place_window(ctx, win, x.shape[2:])
    dt = compute_dtype(x.dtype)
    xc = x.astype(dt, copy=False)
    if kind == "max":
        view = window_view(xc, win, p, _lowest(dt))
        indices = None if storage_order is None else _max_indices(x, win, p, view, storage_order == 1)
        return _over_taps(view, win.rank, np.maximum).astype(x.dtype, copy=False), indices
    view = window_view(xc, win, p, 0)
    if kind == "avg":
        y = _over_taps(view, win.rank, np.add) / _tap_counts(win, p, x.shape[2:], include_pad)
    else:
        y = _over_taps(np.abs(view) ** order, win.rank, np.add) ** (1.0 / order)
    return y.astype(x.dtype), None


def _over_taps(view: np.ndarray, rank: int, ufunc) -> np.ndarray:
    """Combine a window view [..., *kernel] over its kernel taps, one whole-output pass per tap (a
    reduction over the small trailing axes of a strided view is many times slower)."""
    taps = list(np.ndindex(*view.shape[-rank:]))
    out = np.array(view[(Ellipsis,) + taps[0]])
    for tap in taps[1:]:
        ufunc(out, view[(Ellipsis,) + tap], out=out)
    return out


def _local_window(ctx: OpContext) -> Window:
    return window_from_attrs(ctx, tuple(int(k) for k in ctx.attrs["kernel_shape"]))


_check_storage_order = one_of("storage_order", (0, 1))


def _infer_pool(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS | {i8, u8} if ctx.op == "MaxPool" else FLOATS)
    x = ctx.in_types[0]
    if ctx.op == "MaxPool":
        _check_storage_order(ctx)
    spatial = _spatial_shape(ctx, x.shape, _local_window(ctx))
    shape = None if spatial is None else list(x.shape[:2]) + spatial
    return [tensor(x.dtype, shape), tensor(i64, shape)]


def _infer_global_pool(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x = ctx.in_types[0]
    require_rank(ctx, x.shape, 3, -1)
    return [tensor(x.dtype, None if x.shape is None else list(x.shape[:2]) + [1] * (len(x.shape) - 2))]


def _global_window(ctx: OpContext, x: np.ndarray) -> Window:
    if x.ndim < 3:
        raise ctx.fail(f"input must have rank >= 3, got shape {list(x.shape)}")
    n = x.ndim - 2
    return Window(x.shape[2:], (1,) * n, (1,) * n, (0,) * (2 * n))


_POOL_ATTRS = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": REQUIRED, "pads": None,
               "strides": None}


@register("MaxPool", H, infer=_infer_pool, attrs={**_POOL_ATTRS, "storage_order": 0}, outputs=(1, 2))
def max_pool(ctx: OpContext, x):
    """Maximum over each window (padding never wins); Indices: flat input index of the maximum."""
    _check_storage_order(ctx)
    order = ctx.attrs["storage_order"] if len(ctx.out_types) > 1 else None
    y, indices = _pool(ctx, x, "max", _local_window(ctx), storage_order=order)
    return y if indices is None else (y, indices)


@register("AveragePool", H, infer=_infer_pool, attrs={**_POOL_ATTRS, "count_include_pad": 0})
def average_pool(ctx: OpContext, x):
    """Mean over each window; padded positions count in the divisor only with count_include_pad=1."""
    return _pool(ctx, x, "avg", _local_window(ctx), include_pad=bool(ctx.attrs["count_include_pad"]))[0]


@register("LpPool", H, infer=_infer_pool, attrs={**_POOL_ATTRS, "p": 2})
def lp_pool(ctx: OpContext, x):
    """(sum |x|^p)^(1/p) over each window."""
    return _pool(ctx, x, "lp", _local_window(ctx), order=ctx.attrs["p"])[0]


@register("GlobalMaxPool", H, infer=_infer_global_pool)
def global_max_pool(ctx: OpContext, x):
    """Maximum over all spatial positions, keeping them as size-1 dims."""
    return _pool(ctx, x, "max", _global_window(ctx, x))[0]


@register("GlobalAveragePool", H, infer=_infer_global_pool)
def global_average_pool(ctx: OpContext, x):
    """Mean over all spatial positions, keeping them as size-1 dims."""
    return _pool(ctx, x, "avg", _global_window(ctx, x))[0]


@register("GlobalLpPool", H, infer=_infer_global_pool, attrs={"p": 2})
def global_lp_pool(ctx: OpContext, x):
    """(sum |x|^p)^(1/p) over all spatial positions, keeping them as size-1 dims."""
    return _pool(ctx, x, "lp", _global_window(ctx, x), order=ctx.attrs["p"])[0]


# ---- Col2Im --------------------------------------------------------------------------------------
def _infer_col2im(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, {i64}, [1, 2])
    x = ctx.in_types[0]
    require_rank(ctx, x.shape, 3, what="input")
    image, block = shape_input(ctx, 1, "image_shape"), shape_input(ctx, 2, "block_shape")
    n_dims = len(image) if image is not None else static_length(ctx.in_types[1])
    n, cols = (None, None) if x.shape is None else x.shape[:2]
    channels = None
    if block is not None and isinstance(cols, int):
        channels = _col2im_channels(ctx, cols, block)
    spatial = image if image is not None else [None] * (n_dims or 0)
    return [tensor(x.dtype, None if n_dims is None else [n, channels, *spatial])]


def _col2im_channels(ctx: OpContext, cols: int, block: list[int]) -> int:
    size = math.prod(block)
    if size < 1 or cols % size:
        raise ctx.fail(f"input dim 1 ({cols}) is not a multiple of the block size {block}")
    return cols // size


@register("Col2Im", H, infer=_infer_col2im, attrs={"dilations": None, "pads": None, "strides": None}, inputs=3)
def col2im(ctx: OpContext, x, image_shape, block_shape):
    """The inverse of im2col: x [N, C * prod(block), L] holds, for each of the L block positions of a
    sliding window over an image (strides, dilations, pads), the C x block values there; they are
    summed into the image [N, C, *image_shape] where windows overlap."""
    image, block = ints(image_shape), ints(block_shape)
    if len(image) != len(block):
        raise ctx.fail(f"image_shape {image} and block_shape {block} differ in length")
    n, cols, length = x.shape
    channels = _col2im_channels(ctx, cols, block)
    win = window_from_attrs(ctx, tuple(block))
    p = place_window(ctx, win, tuple(image))
    if length != math.prod(p.out):
        raise ctx.fail(f"input has {length} blocks but the image holds {' x '.join(map(str, p.out))}")
    blocks = upcast(x).reshape((n, channels, *block, *p.out))
    padded = np.zeros((n, channels, *(d + lo + hi for d, lo, hi in zip(image, p.begin, p.end))), blocks.dtype)
    for k in np.ndindex(*block):
        taps = tuple(slice(ki * d, ki * d + (o - 1) * s + 1, s)
                     for ki, d, s, o in zip(k, win.dilations, win.strides, p.out))
        padded[(slice(None), slice(None)) + taps] += blocks[(slice(None), slice(None)) + k]
    crop = tuple(slice(lo, lo + d) for lo, d in zip(p.begin, image))
    return padded[(slice(None), slice(None)) + crop].astype(x.dtype)


# ---- MaxUnpool -----------------------------------------------------------------------------------
def _unpooled_dims(ctx: OpContext, spatial: Shape) -> list:
    """The default output's spatial dims: (in - 1) * stride - pads + kernel."""
    win = window_from_attrs(ctx, tuple(ctx.attrs["kernel_shape"]))
    if len(spatial) != win.rank:
        raise ctx.fail(f"input has {len(spatial)} spatial dims but kernel_shape has {win.rank}")
    return [dim_affine(d, mul=s, add=k - s - lo - hi) for d, s, k, lo, hi in
            zip(spatial, win.strides, win.kernel, win.pads[:win.rank], win.pads[win.rank:])]


def _infer_max_unpool(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [0])
    check_dtypes(ctx, {i64}, [1, 2])
    x = ctx.in_types[0]
    require_rank(ctx, x.shape, 3, -1)
    if ctx.has_input(2):
        shape = shape_input(ctx, 2, "output_shape")
        if shape is not None:
            return [tensor(x.dtype, shape)]
        rank = x.rank if x.rank is not None else static_length(ctx.in_types[2])
        return [tensor(x.dtype, None if rank is None else [None] * rank)]
    if x.shape is None:
        return [x]
    return [tensor(x.dtype, [*x.shape[:2], *_unpooled_dims(ctx, x.shape[2:])])]


@register("MaxUnpool", H, infer=_infer_max_unpool, attrs={"kernel_shape": REQUIRED, "pads": None, "strides": None},
          inputs=(2, 3))
def max_unpool(ctx: OpContext, x, indices, output_shape=None):
    """The inverse of MaxPool: a zero tensor of MaxPool's input shape ((in - 1) * stride - pads +
    kernel per spatial dim) with each value of x written at its flat index from I; `output_shape`, when
    given, extends that tensor with zeros at the end of each dim."""
    if indices.shape != x.shape:
        raise ctx.fail(f"indices of shape {shape_str(indices.shape)} do not match X {shape_str(x.shape)}")
    shape = (*x.shape[:2], *_unpooled_dims(ctx, x.shape[2:]))
    size = math.prod(shape)
    flat = indices.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= size):
        raise ctx.fail(f"an index is outside the unpooled tensor of shape {shape_str(shape)}")
    y = np.zeros(size, x.dtype)
    y[flat] = x.reshape(-1)
    y = y.reshape(shape)
    if output_shape is None:
        return y
    target = ints(output_shape)
    if len(target) != len(shape) or any(t < d for t, d in zip(target, shape)):
        raise ctx.fail(f"output_shape {target} is smaller than the unpooled shape {list(shape)}")
    return np.pad(y, [(0, t - d) for t, d in zip(target, shape)])
