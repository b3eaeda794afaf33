"""Less common ONNX ops: CumProd, Det, BitCast, Unique, TensorScatter, Col2Im, MaxUnpool, the sampling
ops (GridSample, AffineGrid, DeformConv), RoiAlign, NonMaxSuppression and LinearAttention.

The sampling ops share one interpolation core, `sample`: it reads X [N, C, *spatial] at real-valued pixel
coordinates (one array per spatial dim, shaped [N, *points]) with nearest, linear or cubic interpolation,
taps outside the input being zero, the nearest border pixel, or reflected back inside. GridSample maps its
normalised grid onto pixel coordinates first; DeformConv samples every kernel tap at its offset position
(linear, zeros) and contracts the samples with the weights like an im2col convolution.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import DType, boolean, dtype as to_dtype, f64, i64, string
from ..ir.graph import TensorType
from ..ir.shape import Shape, shape_str
from ._indexing import dim_affine, dim_prod, ints, norm_axis, require_rank, same_dim, scalar_of, static_length, tensor
from .common import FLOATS, NUMERIC, axis_of, check_dtypes, compute_dtype, one_of, require_dtype_of_x, upcast
from .nn import Window, _place, _window
from .reduce import cumulative, infer_cumulative
from .registry import REQUIRED, Category, OpContext, register

H, M, R = Category.HEAVY, Category.MOVEMENT, Category.REDUCTION


# ---- CumProd -----------------------------------------------------------------------------------------------
@register("CumProd", R, infer=infer_cumulative, inputs=2, attrs={"exclusive": 0, "reverse": 0})
def cumprod(ctx: OpContext, x, axis):
    """Running products of x along axis; `exclusive` leaves out each element itself, `reverse`
    multiplies from the end."""
    return cumulative(ctx, x, axis, np.multiply)


# ---- Det ---------------------------------------------------------------------------------------------------
def _check_square(ctx: OpContext, shape: Shape) -> None:
    if shape is None:
        return
    if len(shape) < 2 or (isinstance(shape[-1], int) and isinstance(shape[-2], int) and shape[-1] != shape[-2]):
        raise ctx.fail(f"input must hold square matrices in its last two dims, got shape {shape_str(shape)}")


def _infer_det(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x = ctx.in_types[0]
    _check_square(ctx, x.shape)
    return [x if x.shape is None else tensor(x.dtype, x.shape[:-2])]


@register("Det", H, infer=_infer_det)
def det(ctx: OpContext, x):
    """The determinants of the square matrices in the last two dims of x."""
    _check_square(ctx, x.shape)
    return np.asarray(np.linalg.det(upcast(x))).astype(x.dtype)


# ---- BitCast -----------------------------------------------------------------------------------------------
def _bitcast_target(ctx: OpContext) -> DType:
    try:
        to = to_dtype(int(ctx.attrs["to"]))
    except TypeError as e:
        raise ctx.fail(f"attribute to: {e}") from None
    src = ctx.in_types[0].dtype
    if string in (to, src):
        raise ctx.fail("BitCast does not take string tensors")
    if to.bits != src.bits:
        raise ctx.fail(f"cannot reinterpret {src} ({src.bits} bits) as {to} ({to.bits} bits)")
    return to


@register("BitCast", Category.UNARY, attrs={"to": REQUIRED},
          infer=lambda ctx: [tensor(_bitcast_target(ctx), ctx.in_types[0].shape)])
def bitcast(ctx: OpContext, x):
    """The bytes of x (little endian) read as elements of type `to`, of the same width."""
    to = _bitcast_target(ctx).np
    data = np.ascontiguousarray(x)
    if to == np.bool_ and np.any(data.view(np.uint8) > 1):
        raise ctx.fail("a byte other than 0 or 1 is not a boolean")
    return data.view(to).copy()


# ---- Unique ------------------------------------------------------------------------------------------------
def _unique(ctx: OpContext, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """(values, first indices, inverse indices, counts), sorted or in order of first occurrence."""
    axis = ctx.attrs["axis"]
    if axis is not None:
        axis = norm_axis(ctx, axis, x.ndim)
    values, index, inverse, counts = np.unique(x.reshape(-1) if axis is None else x, axis=axis,
                                               return_index=True, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    if not ctx.attrs["sorted"]:
        order = np.argsort(index, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else axis)
        index, counts, inverse = index[order], counts[order], rank[inverse]
    return (values.astype(x.dtype), *(a.astype(np.int64) for a in (index, inverse, counts)))


def _infer_unique(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, NUMERIC | {boolean})
    one_of("sorted", (0, 1))(ctx)
    x = ctx.in_types[0]
    if ctx.value(0) is not None:
        return [tensor(to_dtype(a.dtype), a.shape) for a in _unique(ctx, ctx.value(0))]
    axis = ctx.attrs["axis"]
    if axis is None:
        values, n = [None], dim_prod(x.shape) if x.shape is not None else None
    elif x.shape is None:
        values, n = None, None
    else:
        axis = norm_axis(ctx, axis, len(x.shape))
        values, n = x.shape[:axis] + (None,) + x.shape[axis + 1:], x.shape[axis]
    return [tensor(x.dtype, values), tensor(i64, [None]), tensor(i64, [n]), tensor(i64, [None])]


@register("Unique", M, infer=_infer_unique, attrs={"axis": None, "sorted": 1}, outputs=(1, 4))
def unique(ctx: OpContext, x):
    """The distinct elements of x (flattened), or its distinct slices along `axis`; sorted ascending
    (slices lexicographically) or, with sorted=0, in order of first occurrence. The optional outputs are
    each value's first index in x, each element's index in the values, and each value's count."""
    if ctx.attrs["axis"] is not None and x.ndim == 0:
        raise ctx.fail("a scalar has no axis")
    return _unique(ctx, x)


# ---- TensorScatter -----------------------------------------------------------------------------------------
def _cache_axis(ctx: OpContext, rank: int) -> int:
    axis = norm_axis(ctx, ctx.attrs["axis"], rank)
    if axis == 0:
        raise ctx.fail("the sequence axis cannot be the batch axis 0")
    return axis


def _infer_tensor_scatter(ctx: OpContext) -> list[TensorType]:
    one_of("mode", ("linear", "circular"))(ctx)
    check_dtypes(ctx, {i64}, [2])
    past, update = ctx.in_types[:2]
    if update.dtype != past.dtype:
        raise ctx.fail(f"update has dtype {update.dtype} but past_cache has {past.dtype}")
    if past.shape is not None and update.shape is not None:
        if len(past.shape) != len(update.shape):
            raise ctx.fail(f"past_cache {shape_str(past.shape)} and update {shape_str(update.shape)} differ in rank")
        axis = _cache_axis(ctx, len(past.shape))
        for i, (p, u) in enumerate(zip(past.shape, update.shape)):
            if i != axis:
                same_dim(ctx, (p, u), f"dims {i} of past_cache and update")
    return [past]


@register("TensorScatter", M, infer=_infer_tensor_scatter, attrs={"axis": -2, "mode": "linear"}, inputs=(2, 3))
def tensor_scatter(ctx: OpContext, past, update, write_indices=None):
    """past_cache with `update` written along the sequence `axis`, for batch b from position
    write_indices[b] (default 0) on; mode "circular" wraps positions around the axis."""
    axis = _cache_axis(ctx, past.ndim)
    if update.ndim != past.ndim or any(u != p for i, (u, p) in enumerate(zip(update.shape, past.shape)) if i != axis):
        raise ctx.fail(f"update {shape_str(update.shape)} does not fit past_cache {shape_str(past.shape)} "
                       f"outside axis {axis}")
    batch, capacity, length = past.shape[0], past.shape[axis], update.shape[axis]
    starts = np.zeros(batch, np.int64) if write_indices is None else write_indices.reshape(-1)
    if starts.size != batch:
        raise ctx.fail(f"write_indices has {starts.size} entries for a batch of {batch}")
    out = past.copy()
    cache, new = np.moveaxis(out, axis, 1), np.moveaxis(update, axis, 1)  # views: writes reach `out`
    for b in range(batch):
        positions = int(starts[b]) + np.arange(length)
        if ctx.attrs["mode"] == "circular":
            positions %= max(capacity, 1)
        elif length and (positions[0] < 0 or positions[-1] >= capacity):
            raise ctx.fail(f"batch {b}: writing {length} positions from {int(starts[b])} overruns the "
                           f"sequence axis of size {capacity}")
        cache[b, positions] = new[b]
    return out


# ---- Col2Im ------------------------------------------------------------------------------------------------
def _shape_input(ctx: OpContext, i: int, what: str) -> list[int] | None:
    v = ctx.value(i)
    if v is not None and v.ndim != 1:
        raise ctx.fail(f"{what} must be a 1-D tensor, got shape {shape_str(v.shape)}")
    return ints(v)


def _infer_col2im(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, {i64}, [1, 2])
    x = ctx.in_types[0]
    require_rank(ctx, x.shape, 3, what="input")
    image, block = _shape_input(ctx, 1, "image_shape"), _shape_input(ctx, 2, "block_shape")
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
    win = _window(ctx, tuple(block))
    p = _place(ctx, win, tuple(image))
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


# ---- MaxUnpool ---------------------------------------------------------------------------------------------
def _unpooled_dims(ctx: OpContext, spatial: Shape) -> list:
    """The default output's spatial dims: (in - 1) * stride - pads + kernel."""
    win = _window(ctx, tuple(ctx.attrs["kernel_shape"]))
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
        shape = _shape_input(ctx, 2, "output_shape")
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


# ---- the sampling core -------------------------------------------------------------------------------------
_SAMPLE_MODES = ("nearest", "linear", "cubic")
_PADDING_MODES = ("zeros", "border", "reflection")
_CUBIC_A = -0.75


@dataclass(frozen=True)
class Sampling:
    """How `sample` reads between and outside pixels. `bounds` are the reflection borders per spatial
    dim (GridSample reflects about the outer pixel edges, or the pixel centres with align_corners)."""
    mode: str
    padding: str
    bounds: tuple[tuple[float, float], ...]


def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """x mirrored at lo and hi (repeatedly) until it lies in [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, dist = x < lo, np.where(x < lo, lo - x, x - hi)
    folds = np.floor(dist / span)
    rest = dist - folds * span
    even = folds % 2 == 0
    inside = np.where(below, np.where(even, lo + rest, hi - rest), np.where(even, hi - rest, lo + rest))
    return np.where((x < lo) | (x > hi), inside, x)


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Keys cubic convolution weights of the taps at -1, 0, 1, 2 for a point t in [0, 1) past tap 0."""
    a = _CUBIC_A

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _taps(c: np.ndarray, mode: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(index, weight) pairs interpolating at coordinates c along one dim."""
    if mode == "nearest":
        return [(np.trunc(c).astype(np.int64), np.ones_like(c))]
    base = np.floor(c)
    t = c - base
    base = base.astype(np.int64)
    if mode == "linear":
        return [(base, 1 - t), (base + 1, t)]
    return [(base + j, w) for j, w in zip((-1, 0, 1, 2), _cubic_weights(t))]


def sample(x: np.ndarray, coords: list[np.ndarray], how: Sampling) -> np.ndarray:
    """x [N, C, *spatial] read at pixel coordinates `coords` (one [N, *points] array per spatial dim):
    [N, C, *points], in the compute dtype of x and the coordinates."""
    dims = x.shape[2:]
    dt = np.result_type(compute_dtype(x.dtype), coords[0].dtype)
    data = x.astype(dt, copy=False)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (coords[0].ndim - 1))
    out = np.zeros(coords[0].shape[:1] + (x.shape[1],) + coords[0].shape[1:], dt)
    if 0 in dims:  # nothing to read: every tap is outside
        return out
    per_dim = [_taps(c, how.mode) for c in coords]
    for combo in itertools.product(*per_dim):
        weight = math.prod(w for _, w in combo)
        index, inside = [], True
        for (i, _), d, (lo, hi) in zip(combo, dims, how.bounds):
            if how.padding == "zeros":
                inside = inside & (i >= 0) & (i < d)
                i = np.clip(i, 0, d - 1)
            elif how.padding == "border":
                i = np.clip(i, 0, d - 1)
            else:
                i = np.clip(np.trunc(reflect(i.astype(np.float64), lo, hi)).astype(np.int64), 0, d - 1)
            index.append(i)
        values = data[(batch, slice(None), *index)]  # [N, *points, C]: advanced indices go first
        out += np.moveaxis(values * (weight * inside)[..., None], -1, 1)
    return out


# ---- GridSample --------------------------------------------------------------------------------------------
def _infer_grid_sample(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [1])
    one_of("mode", _SAMPLE_MODES)(ctx)
    one_of("padding_mode", _PADDING_MODES)(ctx)
    x, grid = ctx.in_types
    require_rank(ctx, x.shape, 3, -1, "X")
    require_rank(ctx, grid.shape, 3, -1, "grid")
    if x.shape is None or grid.shape is None:
        rank = x.rank if x.rank is not None else grid.rank
        return [tensor(x.dtype, None if rank is None else
                       [None, None if x.shape is None else x.shape[1]] + [None] * (rank - 2))]
    _check_grid(ctx, x.shape, grid.shape)
    return [tensor(x.dtype, [same_dim(ctx, (x.shape[0], grid.shape[0]), "batch sizes"), x.shape[1],
                             *grid.shape[1:-1]])]


def _check_grid(ctx: OpContext, x: Shape, grid: Shape) -> None:
    n = len(x) - 2
    if len(grid) != len(x) or (isinstance(grid[-1], int) and grid[-1] != n):
        raise ctx.fail(f"grid {shape_str(grid)} must have shape [N, *out, {n}] for X {shape_str(x)}")


@register("GridSample", H, infer=_infer_grid_sample, inputs=2,
          attrs={"align_corners": 0, "mode": "linear", "padding_mode": "zeros"})
def grid_sample(ctx: OpContext, x, grid):
    """X [N, C, *spatial] sampled at the points of grid [N, *out, n]: normalised coordinates in
    [-1, 1] (x first: grid[..., 0] runs along the last spatial dim) spanning the input's outer pixel
    edges, or its corner pixel centres with align_corners. Points outside are read as zeros, as the
    nearest border pixel, or reflected back inside (padding_mode)."""
    _check_grid(ctx, x.shape, grid.shape)
    if x.shape[0] != grid.shape[0]:
        raise ctx.fail(f"X has batch size {x.shape[0]} but grid has {grid.shape[0]}")
    align, padding = bool(ctx.attrs["align_corners"]), ctx.attrs["padding_mode"]
    dims, g = x.shape[2:], upcast(grid)
    bounds = tuple((0.0, d - 1.0) if align else (-0.5, d - 0.5) for d in dims)
    coords = []
    for i, (d, (lo, hi)) in enumerate(zip(dims, bounds)):
        n = g[..., len(dims) - 1 - i]
        c = (n + 1) / 2 * (d - 1) if align else ((n + 1) * d - 1) / 2
        if ctx.attrs["mode"] == "nearest":
            c = np.rint(c)
        outside = (c < lo) | (c > hi)
        if padding == "border":
            c = np.where(outside, np.clip(c, 0, d - 1), c)
        elif padding == "reflection":
            c = np.where(outside, reflect(c, lo, hi), c)
        coords.append(c)
    return sample(x, coords, Sampling(ctx.attrs["mode"], padding, bounds)).astype(x.dtype)


# ---- AffineGrid --------------------------------------------------------------------------------------------
def _infer_affine_grid(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [0])
    check_dtypes(ctx, {i64}, [1])
    theta = ctx.in_types[0]
    require_rank(ctx, theta.shape, 3, what="theta")
    size = _shape_input(ctx, 1, "size")
    length = len(size) if size is not None else static_length(ctx.in_types[1])
    if length is None:
        return [tensor(theta.dtype, None)]
    n_dims = length - 2
    _check_theta(ctx, theta.shape, n_dims)
    batch = theta.shape[0] if theta.shape is not None else None
    spatial = size[2:] if size is not None else [None] * n_dims
    return [tensor(theta.dtype, [batch, *spatial, n_dims])]


def _check_theta(ctx: OpContext, theta: Shape, n_dims: int) -> None:
    if n_dims not in (2, 3):
        raise ctx.fail(f"size must have 4 or 5 entries (N, C, *spatial), got {n_dims + 2}")
    wanted = (n_dims, n_dims + 1)
    if theta is not None and any(isinstance(d, int) and d != want for d, want in zip(theta[1:], wanted)):
        raise ctx.fail(f"theta {shape_str(theta)} must have shape [N, {n_dims}, {n_dims + 1}] for {n_dims}-D")


def _base_coordinates(size: int, align: bool) -> np.ndarray:
    """Normalised coordinates of the pixel centres along one dim: [-1, 1] at the corner pixels'
    centres with align_corners, else at the outer edges."""
    if size <= 1:
        return np.zeros(size)
    if align:
        return np.linspace(-1.0, 1.0, size)
    return (2 * np.arange(size) + 1) / size - 1


@register("AffineGrid", H, infer=_infer_affine_grid, attrs={"align_corners": 0}, inputs=2)
def affine_grid(ctx: OpContext, theta, size):
    """The sampling grid [N, *spatial, n] for GridSample that applies the affine maps theta [N, n, n+1]
    to the normalised coordinates (x, y[, z], 1) of an output of the given size (N, C, *spatial)."""
    dims = ints(size)
    _check_theta(ctx, theta.shape, len(dims) - 2)
    if theta.shape[0] != dims[0]:
        raise ctx.fail(f"theta has batch size {theta.shape[0]} but size says {dims[0]}")
    spatial = dims[2:]
    axes = np.meshgrid(*(_base_coordinates(d, bool(ctx.attrs["align_corners"])) for d in spatial), indexing="ij")
    homogeneous = np.stack([*axes[::-1], np.ones(spatial)], axis=-1)  # x (last dim) first, then 1
    return np.einsum("...j,nij->n...i", homogeneous, theta.astype(np.float64)).astype(theta.dtype)


# ---- DeformConv --------------------------------------------------------------------------------------------
def _deform_window(ctx: OpContext, w: Shape) -> Window | None:
    kernel = ctx.attrs["kernel_shape"]
    if kernel is None:
        if w is None or not all(isinstance(k, int) for k in w[2:]):
            return None
        kernel = w[2:]
    return _window(ctx, tuple(int(k) for k in kernel))


def _infer_deform_conv(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x, w = ctx.in_types[:2]
    require_dtype_of_x(ctx)
    for s in (x.shape, w.shape, ctx.in_types[2].shape):
        require_rank(ctx, s, 3, -1)
    win = _deform_window(ctx, w.shape)
    rank = x.rank if x.rank is not None else w.rank
    m = None if w.shape is None else w.shape[0]
    if win is None or x.shape is None:
        return [tensor(x.dtype, None if rank is None else [None if x.shape is None else x.shape[0], m] +
                       [None] * (rank - 2))]
    if len(x.shape) != win.rank + 2:
        raise ctx.fail(f"X of rank {len(x.shape)} does not fit a {win.rank}-D kernel")
    return [tensor(x.dtype, [x.shape[0], m, *(win.out_dim(i, d) for i, d in enumerate(x.shape[2:]))])]


def _check_deform(ctx: OpContext, x: np.ndarray, w: np.ndarray, offset: np.ndarray, out: tuple[int, ...],
                  kernel: tuple[int, ...]) -> tuple[int, int]:
    """(group, offset_group), after checking that the inputs' shapes agree."""
    n, c = x.shape[:2]
    group, offset_group = ctx.attrs["group"], ctx.attrs["offset_group"]
    if group < 1 or offset_group < 1 or c != w.shape[1] * group or w.shape[0] % group or c % offset_group:
        raise ctx.fail(f"X {shape_str(x.shape)} does not fit W {shape_str(w.shape)} with group={group} and "
                       f"offset_group={offset_group}")
    if w.shape[2:] != kernel:
        raise ctx.fail(f"kernel_shape {list(kernel)} does not match the weights {shape_str(w.shape)}")
    want = (n, offset_group * math.prod(kernel) * len(kernel), *out)
    if offset.shape != want:
        raise ctx.fail(f"offset has shape {shape_str(offset.shape)}, expected {shape_str(want)}")
    return group, offset_group


@register("DeformConv", H, infer=_infer_deform_conv, inputs=(3, 5),
          attrs={"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1, "pads": None,
                 "strides": None})
def deform_conv(ctx: OpContext, x, w, offset, b=None, mask=None):
    """Convolution whose kernel taps are moved by learned offsets: output position o reads tap k at
    o * stride - pad + k * dilation + offset[k, o] (bilinear between pixels, zero outside), scaled by
    mask[k, o] (default 1). Offsets and masks are shared by the channels of each of `offset_group`
    channel groups; `group` splits the channels as in Conv."""
    win = _deform_window(ctx, w.shape)
    if x.ndim != win.rank + 2 or w.ndim != x.ndim:
        raise ctx.fail(f"X {shape_str(x.shape)} and W {shape_str(w.shape)} do not fit a {win.rank}-D kernel")
    p = _place(ctx, win, x.shape[2:])
    kernel, out, nd = win.kernel, p.out, win.rank
    group, og = _check_deform(ctx, x, w, offset, out, kernel)
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    taps = math.prod(kernel)
    dt = compute_dtype(x.dtype)
    shifts = offset.astype(dt).reshape((n * og, taps, nd, *out))
    coords = []
    for i in range(nd):
        k_pos = np.indices(kernel).reshape(nd, taps)[i] * win.dilations[i]
        o_pos = np.arange(out[i]) * win.strides[i] - p.begin[i]
        grid = (k_pos.reshape((taps,) + (1,) * nd) + o_pos.reshape((1,) * (1 + i) + (-1,) + (1,) * (nd - 1 - i)))
        coords.append(grid + shifts[:, :, i])
    grouped = x.reshape((n * og, c // og, *x.shape[2:]))
    bounds = tuple((0.0, d - 1.0) for d in x.shape[2:])
    cols = sample(grouped, coords, Sampling("linear", "zeros", bounds)).astype(dt)  # [N*og, C/og, taps, *out]
    cols = cols.reshape((n, og, c // og, taps, -1))
    if mask is not None:
        if mask.shape != (n, og * taps, *out):
            raise ctx.fail(f"mask has shape {shape_str(mask.shape)}, expected {shape_str((n, og * taps, *out))}")
        cols = cols * mask.astype(dt).reshape((n, og, 1, taps, -1))
    cols = cols.reshape((n, group, (c // group) * taps, -1))                       # [N, G, C/G * taps, P]
    y = np.matmul(w.astype(dt).reshape((1, group, m // group, -1)), cols)           # [N, G, M/G, P]
    y = y.reshape((n, m, *out))
    if b is not None:
        if b.shape != (m,):
            raise ctx.fail(f"bias of shape {shape_str(b.shape)} must have one value per output channel ({m})")
        y = y + b.astype(dt).reshape((m,) + (1,) * nd)
    return y.astype(x.dtype)


# ---- RoiAlign ----------------------------------------------------------------------------------------------
def _infer_roi_align(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [0, 1])
    check_dtypes(ctx, {i64}, [2])
    one_of("mode", ("avg", "max"))(ctx)
    one_of("coordinate_transformation_mode", ("half_pixel", "output_half_pixel"))(ctx)
    x, rois, idx = ctx.in_types
    require_rank(ctx, x.shape, 4, what="X")
    require_rank(ctx, rois.shape, 2, what="rois")
    require_rank(ctx, idx.shape, 1, what="batch_indices")
    if rois.shape is not None and isinstance(rois.shape[1], int) and rois.shape[1] != 4:
        raise ctx.fail(f"rois must have shape [num_rois, 4], got {shape_str(rois.shape)}")
    count = same_dim(ctx, [s[0] for s in (rois.shape, idx.shape) if s is not None], "numbers of rois")
    channels = None if x.shape is None else x.shape[1]
    return [tensor(x.dtype, [count, channels, ctx.attrs["output_height"], ctx.attrs["output_width"]])]


def _roi_samples(start: float, size: float, bins: int, per_bin: int, limit: int):
    """Bilinear taps of the sample points along one axis of a roi: (low, high, low weight, high weight),
    each [bins, per_bin]; points more than one pixel outside the input get zero weights."""
    step = size / bins
    pos = start + np.arange(bins)[:, None] * step + (np.arange(per_bin)[None, :] + 0.5) * (step / per_bin)
    outside = (pos < -1.0) | (pos > limit)
    pos = np.maximum(pos, 0)
    low = np.minimum(pos.astype(np.int64), limit - 1)
    at_end = low >= limit - 1
    high = np.where(at_end, low, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    keep = ~outside
    return low, high, (1 - frac) * keep, frac * keep


@register("RoiAlign", H, infer=_infer_roi_align, inputs=3,
          attrs={"coordinate_transformation_mode": "half_pixel", "mode": "avg", "output_height": 1,
                 "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0})
def roi_align(ctx: OpContext, x, rois, batch_indices):
    """Pool each region of interest (x1, y1, x2, y2 in input coordinates times spatial_scale) of image
    batch_indices[r] into output_height x output_width bins, averaging (or taking the maximum of) a
    grid of bilinear samples per bin (sampling_ratio per side, else ceil(bin size))."""
    a = ctx.attrs
    oh, ow, ratio = a["output_height"], a["output_width"], a["sampling_ratio"]
    if rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape != (rois.shape[0],):
        raise ctx.fail(f"rois {shape_str(rois.shape)} and batch_indices {shape_str(batch_indices.shape)} must be "
                       "[num_rois, 4] and [num_rois]")
    if oh < 1 or ow < 1 or ratio < 0:
        raise ctx.fail(f"output size {oh} x {ow} must be positive and sampling_ratio {ratio} non-negative")
    n, c, height, width = x.shape
    half_pixel = a["coordinate_transformation_mode"] == "half_pixel"
    data = upcast(x)
    y = np.zeros((rois.shape[0], c, oh, ow), np.float64)
    for r, (box, b) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        if not 0 <= b < n:
            raise ctx.fail(f"roi {r} refers to image {int(b)} of a batch of {n}")
        x1, y1, x2, y2 = box * a["spatial_scale"] - (0.5 if half_pixel else 0.0)
        roi_w, roi_h = (x2 - x1, y2 - y1) if half_pixel else (max(x2 - x1, 1.0), max(y2 - y1, 1.0))
        gh = ratio or int(np.ceil(roi_h / oh))
        gw = ratio or int(np.ceil(roi_w / ow))
        if gh <= 0 or gw <= 0:  # an empty roi: no samples
            continue
        ys, xs = _roi_samples(y1, roi_h, oh, gh, height), _roi_samples(x1, roi_w, ow, gw, width)
        image = data[int(b)]
        corners = [wy[:, :, None, None] * wx[None, None] * image[:, iy[:, :, None, None], ix[None, None]]
                   for iy, wy in ((ys[0], ys[2]), (ys[1], ys[3])) for ix, wx in ((xs[0], xs[2]), (xs[1], xs[3]))]
        if a["mode"] == "avg":
            y[r] = sum(corners).sum(axis=(2, 4)) / (gh * gw)
        else:
            y[r] = np.max(corners, axis=0).max(axis=(2, 4))
    return y.astype(x.dtype)


# ---- NonMaxSuppression -------------------------------------------------------------------------------------
def _infer_nms(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [0, 1, 3, 4])
    check_dtypes(ctx, {i64}, [2])
    one_of("center_point_box", (0, 1))(ctx)
    boxes, scores = ctx.in_types[:2]
    require_rank(ctx, boxes.shape, 3, what="boxes")
    require_rank(ctx, scores.shape, 3, what="scores")
    if boxes.shape is not None and scores.shape is not None:
        same_dim(ctx, (boxes.shape[0], scores.shape[0]), "batch sizes of boxes and scores")
        same_dim(ctx, (boxes.shape[1], scores.shape[2]), "box counts of boxes and scores")
    return [tensor(i64, [None, 3])]


def _corners(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of boxes [n, 4], given as corners (either diagonal) or, with center,
    as (x_center, y_center, width, height)."""
    if center:
        xc, yc, w, h = boxes.T
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _iou(boxes: np.ndarray, center: bool) -> np.ndarray:
    """Pairwise intersection over union [n, n]; 0 where boxes do not overlap or one is empty."""
    y0, x0, y1, x1 = _corners(boxes.astype(np.float64), center)
    ih = np.minimum(y1[:, None], y1[None]) - np.maximum(y0[:, None], y0[None])
    iw = np.minimum(x1[:, None], x1[None]) - np.maximum(x0[:, None], x0[None])
    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
    area = (y1 - y0) * (x1 - x0)
    union = area[:, None] + area[None] - inter
    valid = (inter > 0) & (area[:, None] > 0) & (area[None] > 0) & (union > 0)
    return np.where(valid, inter / np.where(valid, union, 1), 0.0)


def _optional_scalar(ctx: OpContext, a: np.ndarray | None, what: str, default):
    return default if a is None or a.size == 0 else scalar_of(ctx, a, what)


@register("NonMaxSuppression", H, infer=_infer_nms, attrs={"center_point_box": 0}, inputs=(2, 5))
def non_max_suppression(ctx: OpContext, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None):
    """Per batch and class, greedily keep the highest-scoring boxes (ties: the lower index) that overlap
    no kept box by an IoU above iou_threshold, at most max_output_boxes_per_class (default 0) of them,
    skipping scores not above score_threshold. Rows [batch, class, box] in that order."""
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
            (scores.shape[0], scores.shape[2]) != boxes.shape[:2]:
        raise ctx.fail(f"boxes {shape_str(boxes.shape)} and scores {shape_str(scores.shape)} must be "
                       "[batch, boxes, 4] and [batch, classes, boxes]")
    limit = int(_optional_scalar(ctx, max_output_boxes_per_class, "max_output_boxes_per_class", 0))
    iou_max = float(_optional_scalar(ctx, iou_threshold, "iou_threshold", 0.0))
    score_min = _optional_scalar(ctx, score_threshold, "score_threshold", None)
    selected = []
    for b in range(boxes.shape[0]):
        iou = _iou(boxes[b], bool(ctx.attrs["center_point_box"]))
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = np.argsort(-s.astype(np.float64), kind="stable")
            if score_min is not None:
                order = order[s[order] > score_min]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not kept or iou[i, kept].max() <= iou_max:
                    kept.append(int(i))
            selected += [(b, c, i) for i in kept]
    return np.array(selected, np.int64).reshape(-1, 3)


# ---- LinearAttention ---------------------------------------------------------------------------------------
_UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                 "gated_delta": (True, True)}  # rule: (decays the state, corrects by delta)
_ATTENTION_FLOATS = FLOATS - {f64}


def _heads(ctx: OpContext) -> tuple[int, int]:
    q, kv = ctx.attrs["q_num_heads"], ctx.attrs["kv_num_heads"]
    if q < 1 or kv < 1 or q % kv:
        raise ctx.fail(f"q_num_heads ({q}) must be a positive multiple of kv_num_heads ({kv})")
    return q, kv


def _infer_linear_attention(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, _ATTENTION_FLOATS)
    one_of("update_rule", tuple(_UPDATE_RULES))(ctx)
    hq, hkv = _heads(ctx)
    gated, delta = _UPDATE_RULES[ctx.attrs["update_rule"]]
    for i, name, needed in ((4, "decay", gated), (5, "beta", delta)):
        if ctx.has_input(i) != needed:
            verb = "needs" if needed else "takes no"
            raise ctx.fail(f"update_rule {ctx.attrs['update_rule']!r} {verb} {name} input")
    q, k, v = ctx.in_types[:3]
    for t, name in ((q, "query"), (k, "key"), (v, "value")):
        require_rank(ctx, t.shape, 3, what=name)
    for t in ctx.in_types[1:3] + ctx.in_types[4:]:
        if t is not None and t.dtype != q.dtype:
            raise ctx.fail(f"inputs have dtypes {q.dtype} and {t.dtype}")
    batch = same_dim(ctx, [t.shape[0] for t in (q, k, v) if t.shape is not None], "batch sizes")
    steps = same_dim(ctx, [t.shape[1] for t in (q, k, v) if t.shape is not None], "sequence lengths")
    d_k = None if q.shape is None else dim_affine(q.shape[2], div=hq)
    d_v = None if v.shape is None else dim_affine(v.shape[2], div=hkv)
    state = ctx.in_types[3].dtype if ctx.has_input(3) else q.dtype
    out = None if v.shape is None else dim_affine(v.shape[2], mul=hq, div=hkv)
    return [tensor(q.dtype, [batch, steps, out]), tensor(state, [batch, hkv, d_k, d_v])]


def _split_heads(ctx: OpContext, x: np.ndarray, heads: int, what: str) -> np.ndarray:
    """[B, T, H * D] as [B, H, T, D]."""
    if x.ndim != 3 or x.shape[2] % heads:
        raise ctx.fail(f"{what} of shape {shape_str(x.shape)} must be [B, T, {heads} * D]")
    b, t, hd = x.shape
    return upcast(x).reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3)


@register("LinearAttention", H, infer=_infer_linear_attention, inputs=(3, 6), outputs=2,
          attrs={"chunk_size": 64, "kv_num_heads": REQUIRED, "q_num_heads": REQUIRED, "scale": 0.0,
                 "update_rule": "gated_delta"})
def linear_attention(ctx: OpContext, query, key, value, past_state=None, decay=None, beta=None):
    """Causal linear attention as its recurrence over the T steps of query/key/value [B, T, H * D]:
    per KV head a state S [d_k, d_v] (past_state, else zeros) is updated by k_t v_t^T, "gated" first
    scaling it by exp(decay_t), "delta" writing beta_t * (v_t - S^T k_t) instead of v_t; the output is
    scale * q_t^T S (scale 0: 1/sqrt(d_k)), query heads sharing KV heads in groups. Returns the outputs
    [B, T, H_q * d_v] and the final state [B, H_kv, d_k, d_v]; chunk_size is a tuning hint only."""
    hq, hkv = _heads(ctx)
    gated, delta = _UPDATE_RULES[ctx.attrs["update_rule"]]
    q, k, v = (_split_heads(ctx, a, h, n) for a, h, n in ((query, hq, "query"), (key, hkv, "key"),
                                                          (value, hkv, "value")))
    b, _, steps, d_k = q.shape
    d_v = v.shape[-1]
    if k.shape != (b, hkv, steps, d_k) or v.shape[:3] != (b, hkv, steps):
        raise ctx.fail(f"query {shape_str(query.shape)}, key {shape_str(key.shape)} and value "
                       f"{shape_str(value.shape)} do not agree")
    if gated:
        if decay.ndim != 3 or decay.shape[:2] != (b, steps) or decay.shape[2] not in (hkv, hkv * d_k):
            raise ctx.fail(f"decay of shape {shape_str(decay.shape)} must be [B, T, {hkv}] or "
                           f"[B, T, {hkv * d_k}]")
        gate = np.exp(_split_heads(ctx, decay, hkv, "decay"))[..., None]   # [B, H_kv, T, 1 or d_k, 1]
    if delta:
        if beta.ndim != 3 or beta.shape[:2] != (b, steps) or beta.shape[2] not in (1, hkv):
            raise ctx.fail(f"beta of shape {shape_str(beta.shape)} must be [B, T, {hkv}] or [B, T, 1]")
        rate = _split_heads(ctx, beta, beta.shape[2], "beta")                # [B, H_kv or 1, T, 1]
    if past_state is None:
        state = np.zeros((b, hkv, d_k, d_v), q.dtype)
    elif past_state.shape != (b, hkv, d_k, d_v):
        raise ctx.fail(f"past_state has shape {shape_str(past_state.shape)}, expected {[b, hkv, d_k, d_v]}")
    else:
        state = upcast(past_state)
    scale = ctx.attrs["scale"] or 1 / math.sqrt(d_k)
    out = np.zeros((b, hq, steps, d_v), q.dtype)
    for t in range(steps):
        if gated:
            state = state * gate[:, :, t]
        written = v[:, :, t]
        if delta:
            written = rate[:, :, t] * (written - np.einsum("bhkv,bhk->bhv", state, k[:, :, t]))
        state = state + k[:, :, t, :, None] * written[:, :, None, :]
        out[:, :, t] = scale * np.einsum("bhk,bhkv->bhv", q[:, :, t], np.repeat(state, hq // hkv, axis=1))
    output = out.transpose(0, 2, 1, 3).reshape(b, steps, hq * d_v).astype(query.dtype)
    return output, state.astype(query.dtype if past_state is None else past_state.dtype)


__all__ = ["Sampling", "reflect", "sample"]
