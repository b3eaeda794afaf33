"""Ops that read their input at real-valued positions: GridSample, AffineGrid (the grids GridSample reads)
and DeformConv.

GridSample maps its normalised grid onto pixel coordinates and reads them with `interpolation.sample`;
DeformConv samples every kernel tap at its offset position (linear, zeros) and contracts the samples with
the weights like an im2col convolution.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import i64
from ..ir.graph import TensorType
from ..ir.shape import Shape, shape_str
from ._indexing import ints, require_rank, same_dim, shape_input, static_length, tensor
from .common import FLOATS, check_dtypes, compute_dtype, one_of, require_dtype_of_x, upcast
from .interpolation import PADDING_MODES, SAMPLE_MODES, Sampling, reflect, sample
from .registry import Category, OpContext, register
from .windows import Window, place_window, window_from_attrs

H = Category.HEAVY


# ---- GridSample ----------------------------------------------------------------------------------
def _infer_grid_sample(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [1])
    one_of("mode", SAMPLE_MODES)(ctx)
    one_of("padding_mode", PADDING_MODES)(ctx)
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


# ---- AffineGrid ----------------------------------------------------------------------------------
def _infer_affine_grid(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [0])
    check_dtypes(ctx, {i64}, [1])
    theta = ctx.in_types[0]
    require_rank(ctx, theta.shape, 3, what="theta")
    size = shape_input(ctx, 1, "size")
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


# ---- DeformConv ----------------------------------------------------------------------------------
def _deform_window(ctx: OpContext, w: Shape) -> Window | None:
    kernel = ctx.attrs["kernel_shape"]
    if kernel is None:
        if w is None or not all(isinstance(k, int) for k in w[2:]):
            return None
        kernel = w[2:]
    return window_from_attrs(ctx, tuple(int(k) for k in kernel))


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
    p = place_window(ctx, win, x.shape[2:])
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
