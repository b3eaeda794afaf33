"""Data-movement ops: they move, copy or select elements without arithmetic on them (Reshape, Transpose,
Concat, Split, Slice, Gather*/Scatter*, Pad, Tile, Expand, Resize, TopK, ...).

Every op follows its latest ONNX opset signature. Reference kernels return fresh arrays (never views of
their inputs), so a caller may write into an output without touching an input.

Upsample is not registered: the ONNX frontend rewrites it into Resize.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..ir.dtypes import boolean, i64
from ..ir.graph import TensorType
from ..ir.shape import Dim, Shape, broadcast_shapes
from ._indexing import (UNBOUNDED, dim_affine, dim_prod, dim_quotient, dim_sum, ints, norm_axes, norm_axis,
                        require_int, require_rank, same_dim, scalar_of, static_length, tensor)
from .common import one_of
from .registry import REQUIRED, Category, OpContext, register

M = Category.MOVEMENT


def _fresh(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy (movement kernels must not return views of their inputs)."""
    return np.asarray(a).copy()


def _same_rank_unknown(t: TensorType) -> list[TensorType]:
    """The output keeps the input's rank but no dim is known."""
    return [tensor(t.dtype, None if t.shape is None else [None] * len(t.shape))]


# ---- Reshape, Flatten, Squeeze, Unsqueeze, Identity ---------------------------------------------------
def _reshape_dims(ctx: OpContext, in_shape: Shape, target: list[int]) -> list[Dim]:
    """Resolve Reshape's target: 0 copies the input dim (unless allowzero), -1 takes what is left."""
    allowzero = bool(ctx.attrs["allowzero"])
    if allowzero and 0 in target and -1 in target:
        raise ctx.fail("with allowzero=1 the shape cannot contain both 0 and -1")
    if target.count(-1) > 1:
        raise ctx.fail(f"shape {target} has more than one -1")
    out: list[Dim] = []
    for i, t in enumerate(target):
        if t < -1:
            raise ctx.fail(f"shape {target} has an invalid dimension {t}")
        if t == 0 and not allowzero:
            if in_shape is not None and i >= len(in_shape):
                raise ctx.fail(f"shape {target} copies dimension {i} (0) but the input has rank {len(in_shape)}")
            out.append(None if in_shape is None else in_shape[i])
        else:
            out.append(None if t == -1 else t)
    if -1 in target:
        at = target.index(-1)
        out[at] = dim_quotient(ctx, in_shape, out[:at] + out[at + 1:])
    else:
        have, want = dim_prod(in_shape) if in_shape is not None else None, dim_prod(out)
        if isinstance(have, int) and isinstance(want, int) and have != want:
            raise ctx.fail(f"cannot reshape {list(in_shape)} ({have} elements) into {target} ({want} elements)")
    return out


def _infer_reshape(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "shape")
    t = ctx.in_types[0]
    target = ints(ctx.value(1))
    if target is None:
        n = static_length(ctx.in_types[1])
        return [tensor(t.dtype, None if n is None else [None] * n)]
    return [tensor(t.dtype, _reshape_dims(ctx, t.shape, target))]


@register("Reshape", M, infer=_infer_reshape, attrs={"allowzero": 0}, inputs=2)
def reshape(ctx: OpContext, data, shape):
    """Reshape to `shape` (0 copies the input dim unless allowzero=1; one -1 is inferred)."""
    return _fresh(data.reshape(_reshape_dims(ctx, data.shape, ints(shape))))


def _flatten_axis(ctx: OpContext, rank: int) -> int:
    axis = ctx.attrs["axis"]
    if not -rank <= axis <= rank:
        raise ctx.fail(f"axis {axis} is out of range [-{rank}, {rank}]")
    return axis + rank if axis < 0 else axis


def _infer_flatten(ctx: OpContext) -> list[TensorType]:
    t = ctx.in_types[0]
    if t.shape is None:
        return [tensor(t.dtype, [None, None])]
    a = _flatten_axis(ctx, len(t.shape))
    return [tensor(t.dtype, [dim_prod(t.shape[:a]), dim_prod(t.shape[a:])])]


@register("Flatten", M, infer=_infer_flatten, attrs={"axis": 1})
def flatten(ctx: OpContext, x):
    """2-D view: dims before `axis` form the rows, the rest the columns."""
    a = _flatten_axis(ctx, x.ndim)
    return _fresh(x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:])))


def _squeeze_axes(ctx: OpContext, shape: tuple, axes: list[int] | None) -> list[int]:
    if axes is None:
        return [i for i, d in enumerate(shape) if d == 1]
    axes = norm_axes(ctx, axes, len(shape))
    for a in axes:
        if isinstance(shape[a], int) and shape[a] != 1:
            raise ctx.fail(f"cannot squeeze axis {a} of size {shape[a]}")
    return axes


def _infer_squeeze(ctx: OpContext) -> list[TensorType]:
    t = ctx.in_types[0]
    if ctx.has_input(1):
        require_int(ctx, 1, "axes")
    axes = ints(ctx.value(1)) if ctx.has_input(1) else None
    if t.shape is None:
        return [tensor(t.dtype, None)]
    if ctx.has_input(1) and axes is None:
        n = static_length(ctx.in_types[1])
        return [tensor(t.dtype, None if n is None else [None] * (len(t.shape) - n))]
    if axes is None and not all(isinstance(d, int) for d in t.shape):
        return [tensor(t.dtype, None)]  # which dynamic dims are 1 is only known at run time
    drop = _squeeze_axes(ctx, t.shape, axes)
    return [tensor(t.dtype, [d for i, d in enumerate(t.shape) if i not in drop])]


@register("Squeeze", M, infer=_infer_squeeze, inputs=(1, 2))
def squeeze(ctx: OpContext, data, axes=None):
    """Remove the size-1 dims listed in `axes` (all size-1 dims when absent)."""
    drop = _squeeze_axes(ctx, data.shape, ints(axes))
    return _fresh(data.reshape([d for i, d in enumerate(data.shape) if i not in drop]))


def _unsqueeze_shape(ctx: OpContext, shape: tuple, axes: list[int]) -> list[Dim]:
    rank = len(shape) + len(axes)
    axes = norm_axes(ctx, axes, rank)
    rest = iter(shape)
    return [1 if i in axes else next(rest) for i in range(rank)]


def _infer_unsqueeze(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "axes")
    t = ctx.in_types[0]
    axes = ints(ctx.value(1))
    if t.shape is None:
        return [tensor(t.dtype, None)]
    if axes is None:
        n = static_length(ctx.in_types[1])
        return [tensor(t.dtype, None if n is None else [None] * (len(t.shape) + n))]
    return [tensor(t.dtype, _unsqueeze_shape(ctx, t.shape, axes))]


@register("Unsqueeze", M, infer=_infer_unsqueeze, inputs=2)
def unsqueeze(ctx: OpContext, data, axes):
    """Insert size-1 dims at `axes` (positions in the output)."""
    return _fresh(data.reshape(_unsqueeze_shape(ctx, data.shape, ints(axes))))


def _infer_identity(ctx: OpContext) -> list[TensorType]:
    return [ctx.in_types[0]]


@register("Identity", M, infer=_infer_identity)
def identity(ctx: OpContext, x):
    """A copy of the input."""
    return _fresh(x)


# ---- Transpose, DepthToSpace, SpaceToDepth --------------------------------------------------------
def _perm(ctx: OpContext, rank: int) -> list[int]:
    perm = ctx.attrs["perm"]
    if perm is None:
        return list(range(rank))[::-1]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ctx.fail(f"perm {perm} is not a permutation of the {rank} axes")
    return perm


def _infer_transpose(ctx: OpContext) -> list[TensorType]:
    t = ctx.in_types[0]
    if t.shape is None:
        perm = ctx.attrs["perm"]
        return [tensor(t.dtype, None if perm is None else [None] * len(perm))]
    return [tensor(t.dtype, [t.shape[p] for p in _perm(ctx, len(t.shape))])]


@register("Transpose", M, infer=_infer_transpose, attrs={"perm": None}, returns_view=True)
def transpose(ctx: OpContext, x):
    """Permute the axes (reverse them when perm is absent)."""
    return np.transpose(x, _perm(ctx, x.ndim))


def _block_mode(ctx: OpContext) -> str:
    mode = ctx.attrs["mode"]
    if mode not in ("DCR", "CRD"):
        raise ctx.fail(f"mode must be 'DCR' or 'CRD', got {mode!r}")
    if ctx.attrs["blocksize"] < 1:
        raise ctx.fail(f"blocksize must be positive, got {ctx.attrs['blocksize']}")
    return mode


def _infer_depth_to_space(ctx: OpContext) -> list[TensorType]:
    _block_mode(ctx)
    t, b = ctx.in_types[0], ctx.attrs["blocksize"]
    require_rank(ctx, t.shape, 4)
    if t.shape is None:
        return [tensor(t.dtype, [None] * 4)]
    n, c, h, w = t.shape
    if isinstance(c, int) and c % (b * b):
        raise ctx.fail(f"channels {c} are not divisible by blocksize² = {b * b}")
    return [tensor(t.dtype, [n, dim_affine(c, div=b * b), dim_affine(h, mul=b), dim_affine(w, mul=b)])]


@register("DepthToSpace", M, infer=_infer_depth_to_space, attrs={"blocksize": REQUIRED, "mode": "DCR"})
def depth_to_space(ctx: OpContext, x):
    """Move blocks of channels into b×b spatial blocks: DCR = depth-column-row order, CRD = column-row-depth."""
    mode, b = _block_mode(ctx), ctx.attrs["blocksize"]
    n, c, h, w = x.shape
    if c % (b * b):
        raise ctx.fail(f"channels {c} are not divisible by blocksize² = {b * b}")
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return _fresh(y).reshape(n, c // (b * b), h * b, w * b)


def _infer_space_to_depth(ctx: OpContext) -> list[TensorType]:
    _block_mode(ctx)
    t, b = ctx.in_types[0], ctx.attrs["blocksize"]
    require_rank(ctx, t.shape, 4)
    if t.shape is None:
        return [tensor(t.dtype, [None] * 4)]
    n, c, h, w = t.shape
    for d in (h, w):
        if isinstance(d, int) and d % b:
            raise ctx.fail(f"spatial dim {d} is not divisible by blocksize {b}")
    return [tensor(t.dtype, [n, dim_affine(c, mul=b * b), dim_affine(h, div=b), dim_affine(w, div=b)])]


@register("SpaceToDepth", M, infer=_infer_space_to_depth, attrs={"blocksize": REQUIRED, "mode": "DCR"})
def space_to_depth(ctx: OpContext, x):
    """Inverse of DepthToSpace: b×b spatial blocks become channels."""
    mode, b = _block_mode(ctx), ctx.attrs["blocksize"]
    n, c, h, w = x.shape
    if h % b or w % b:
        raise ctx.fail(f"spatial dims {h}x{w} are not divisible by blocksize {b}")
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return _fresh(y).reshape(n, c * b * b, h // b, w // b)


# ---- Concat, Split -----------------------------------------------------------------------------------
def _infer_concat(ctx: OpContext) -> list[TensorType]:
    types = list(ctx.in_types)
    dt = types[0].dtype
    for i, t in enumerate(types):
        if t.dtype != dt:
            raise ctx.fail(f"input {i} has dtype {t.dtype} but input 0 has {dt}")
    shapes = [t.shape for t in types if t.shape is not None]
    if not shapes:
        return [tensor(dt, None)]
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise ctx.fail(f"inputs have different ranks: {[len(s) for s in shapes]}")
    axis = norm_axis(ctx, ctx.attrs["axis"], rank)
    out: list[Dim] = []
    for d in range(rank):
        dims = [s[d] for s in shapes]
        if d == axis:
            out.append(dim_sum(dims) if len(shapes) == len(types) else None)
            continue
        out.append(same_dim(ctx, dims, f"input sizes along axis {d} (not the concat axis {axis})"))
    return [tensor(dt, out)]


@register("Concat", M, infer=_infer_concat, attrs={"axis": REQUIRED}, inputs=(1, -1))
def concat(ctx: OpContext, *xs):
    """Join the inputs along `axis`."""
    axis = norm_axis(ctx, ctx.attrs["axis"], xs[0].ndim)
    for i, x in enumerate(xs):
        if x.ndim != xs[0].ndim or any(a != b for k, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if k != axis):
            raise ctx.fail(f"input {i} has shape {list(x.shape)}, which does not fit input 0's "
                           f"{list(xs[0].shape)} outside axis {axis}")
    return np.concatenate(xs, axis=axis)


def _split_sizes(ctx: OpContext, dim: Dim, split: list[int] | None, n_out: int) -> list[Dim]:
    """The size of each output along the split axis (None where it is not known before run time)."""
    num = ctx.attrs["num_outputs"]
    if split is not None:
        if num is not None:
            raise ctx.fail("give either the split input or the num_outputs attribute, not both")
        if len(split) != n_out or any(s < 0 for s in split):
            raise ctx.fail(f"split {split} must list {n_out} non-negative sizes (one per output)")
        if isinstance(dim, int) and sum(split) != dim:
            raise ctx.fail(f"split {split} sums to {sum(split)} but the axis has size {dim}")
        return list(split)
    if num is not None and num != n_out:
        raise ctx.fail(f"num_outputs={num} but the node has {n_out} outputs")
    parts = n_out
    if parts < 1:
        raise ctx.fail("Split needs at least one output")
    if not isinstance(dim, int):
        return [None] * parts
    if num is None and dim % parts:
        raise ctx.fail(f"axis of size {dim} does not split evenly into {parts} outputs")
    chunk = -(-dim // parts)
    last = dim - chunk * (parts - 1)
    if last < 0:
        raise ctx.fail(f"axis of size {dim} cannot be split into {parts} chunks of {chunk}")
    return [chunk] * (parts - 1) + [last]


def _infer_split(ctx: OpContext) -> list[TensorType]:
    t = ctx.in_types[0]
    n_out = max(1, len(ctx.out_types))
    if t.shape is None:
        return [tensor(t.dtype, None)] * n_out
    axis = norm_axis(ctx, ctx.attrs["axis"], len(t.shape))
    if ctx.has_input(1):
        require_int(ctx, 1, "split")
    split = ints(ctx.value(1)) if ctx.has_input(1) else None
    if ctx.has_input(1) and split is None:
        sizes: list[Dim] = [None] * n_out       # the sizes are only known at run time
    else:
        sizes = _split_sizes(ctx, t.shape[axis], split, n_out)
    return [tensor(t.dtype, t.shape[:axis] + (s,) + t.shape[axis + 1:]) for s in sizes]


@register("Split", M, infer=_infer_split, attrs={"axis": 0, "num_outputs": None}, inputs=(1, 2), outputs=(1, -1))
def split(ctx: OpContext, x, split=None):
    """Cut `x` along `axis` into parts of the given sizes (or equal parts, the last one smaller)."""
    axis = norm_axis(ctx, ctx.attrs["axis"], x.ndim)
    sizes = _split_sizes(ctx, x.shape[axis], ints(split), max(1, len(ctx.out_types)))
    bounds = np.cumsum([0] + sizes)
    return tuple(_fresh(x[(slice(None),) * axis + (slice(a, b),)]) for a, b in zip(bounds[:-1], bounds[1:]))


# ---- Slice -------------------------------------------------------------------------------------------
def _clamp_slice(dim: int, start: int, end: int, step: int) -> slice:
    """ONNX slice bounds: negative values count from the end, then starts clamp to [0, dim] ([0, dim-1]
    for negative steps) and ends to [0, dim] ([-1, dim-1] for negative steps; -1 = before index 0)."""
    start += dim if start < 0 else 0
    end += dim if end < 0 else 0
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _slice_specs(ctx: OpContext, rank: int, starts, ends, axes, steps) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, validated."""
    axes = list(range(len(starts))) if axes is None else norm_axes(ctx, axes, rank)
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.fail(f"starts, ends, axes and steps must have the same length, got "
                       f"{len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}")
    if 0 in steps:
        raise ctx.fail("slice steps cannot be 0")
    return list(zip(axes, starts, ends, steps))


def _sliced_dim(d: Dim, start: int, end: int, step: int) -> Dim:
    if isinstance(d, int):
        return len(range(d)[_clamp_slice(d, start, end, step)])
    whole_forward = step == 1 and (start == 0 or start <= -UNBOUNDED) and end >= UNBOUNDED
    whole_backward = step == -1 and (start == -1 or start >= UNBOUNDED) and end <= -UNBOUNDED
    return d if whole_forward or whole_backward else None


def _infer_slice(ctx: OpContext) -> list[TensorType]:
    for i, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
        if ctx.has_input(i):
            require_int(ctx, i, what)
    t = ctx.in_types[0]
    if t.shape is None:
        return [tensor(t.dtype, None)]
    starts, ends = ints(ctx.value(1)), ints(ctx.value(2))
    axes = ints(ctx.value(3)) if ctx.has_input(3) else None
    steps = ints(ctx.value(4)) if ctx.has_input(4) else None
    known = starts is not None and ends is not None and (axes is not None or not ctx.has_input(3)) and \
        (steps is not None or not ctx.has_input(4))
    if not known:
        if axes is not None:  # only the listed axes change
            changed = set(norm_axes(ctx, axes, len(t.shape)))
            return [tensor(t.dtype, [None if i in changed else d for i, d in enumerate(t.shape)])]
        return _same_rank_unknown(t)
    out = list(t.shape)
    for axis, start, end, step in _slice_specs(ctx, len(t.shape), starts, ends, axes, steps):
        out[axis] = _sliced_dim(out[axis], start, end, step)
    return [tensor(t.dtype, out)]


@register("Slice", M, infer=_infer_slice, inputs=(3, 5), returns_view=True)
def slice_(ctx: OpContext, data, starts, ends, axes=None, steps=None):
    """Take data[start:end:step] on each listed axis, with ONNX clamping of out-of-range bounds."""
    index = [slice(None)] * data.ndim
    for axis, start, end, step in _slice_specs(ctx, data.ndim, ints(starts), ints(ends), ints(axes), ints(steps)):
        index[axis] = _clamp_slice(data.shape[axis], start, end, step)
    return data[tuple(index)]


# ---- Gather / Scatter ----------------------------------------------------------------------------------
def _checked_indices(ctx: OpContext, idx: np.ndarray, dim: int, what: str = "indices") -> np.ndarray:
    """Indices in [-dim, dim) made non-negative; out-of-range ones fail."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        bad = idx[(idx < -dim) | (idx >= dim)].reshape(-1)[0]
        raise ctx.fail(f"{what} value {bad} is out of range for a dimension of size {dim}")
    return np.where(idx < 0, idx + dim, idx)


def _infer_gather(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "indices")
    data, idx = ctx.in_types
    if data.shape is None or idx.shape is None:
        return [tensor(data.dtype, None)]
    axis = norm_axis(ctx, ctx.attrs["axis"], len(data.shape))
    return [tensor(data.dtype, data.shape[:axis] + idx.shape + data.shape[axis + 1:])]


@register("Gather", M, infer=_infer_gather, attrs={"axis": 0}, inputs=2)
def gather(ctx: OpContext, data, indices):
    """Select entries of `data` along `axis` (output: data dims with that axis replaced by indices dims)."""
    axis = norm_axis(ctx, ctx.attrs["axis"], data.ndim)
    return np.take(data, _checked_indices(ctx, indices, data.shape[axis]), axis=axis)


def _element_index(ctx: OpContext, data_shape: tuple, indices: np.ndarray) -> tuple:
    """Index tuple for GatherElements/ScatterElements: position p of `indices` addresses data[p with its
    `axis` coordinate replaced by indices[p]]."""
    rank = len(data_shape)
    if indices.ndim != rank:
        raise ctx.fail(f"indices have rank {indices.ndim} but data has rank {rank}")
    axis = norm_axis(ctx, ctx.attrs["axis"], rank)
    for d, (n, m) in enumerate(zip(indices.shape, data_shape)):
        if d != axis and n > m:
            raise ctx.fail(f"indices shape {list(indices.shape)} exceeds data shape {list(data_shape)} on axis {d}")
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = _checked_indices(ctx, indices, data_shape[axis])
    return tuple(grid)


def _infer_gather_elements(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "indices")
    data, idx = ctx.in_types
    if data.shape is not None and idx.shape is not None and len(data.shape) != len(idx.shape):
        raise ctx.fail(f"indices have rank {len(idx.shape)} but data has rank {len(data.shape)}")
    if data.shape is not None:
        norm_axis(ctx, ctx.attrs["axis"], len(data.shape))
    return [tensor(data.dtype, idx.shape)]


@register("GatherElements", M, infer=_infer_gather_elements, attrs={"axis": 0}, inputs=2)
def gather_elements(ctx: OpContext, data, indices):
    """out[p] = data[p with its `axis` coordinate replaced by indices[p]]."""
    return data[_element_index(ctx, data.shape, indices)]


_SCATTER_REDUCTIONS: dict[str, np.ufunc | None] = {
    "none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(ctx: OpContext, data: np.ndarray, index: tuple, updates: np.ndarray) -> np.ndarray:
    """A copy of `data` with `updates` written (or reduced) at `index`."""
    reduction = ctx.attrs["reduction"]
    if reduction not in _SCATTER_REDUCTIONS:
        raise ctx.fail(f"reduction must be one of {sorted(_SCATTER_REDUCTIONS)}, got {reduction!r}")
    out = data.copy()
    ufunc = _SCATTER_REDUCTIONS[reduction]
    if ufunc is None:
        out[index] = updates
    else:
        ufunc.at(out, index, updates)
    return out


def _infer_scatter(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "indices")
    data, idx, upd = ctx.in_types
    if upd.dtype != data.dtype:
        raise ctx.fail(f"updates have dtype {upd.dtype} but data has {data.dtype}")
    if ctx.attrs["reduction"] not in _SCATTER_REDUCTIONS:
        raise ctx.fail(f"reduction must be one of {sorted(_SCATTER_REDUCTIONS)}, got {ctx.attrs['reduction']!r}")
    if data.shape is None or idx.shape is None or upd.shape is None:
        return [data]
    if ctx.op == "ScatterElements":
        if len(idx.shape) != len(data.shape):
            raise ctx.fail(f"indices have rank {len(idx.shape)} but data has rank {len(data.shape)}")
        want: Shape = idx.shape
    else:
        require_rank(ctx, idx.shape, 1, -1, "indices")
        k = idx.shape[-1]
        if isinstance(k, int) and k > len(data.shape):
            raise ctx.fail(f"index length {k} exceeds the data rank {len(data.shape)}")
        want = None if not isinstance(k, int) else idx.shape[:-1] + data.shape[k:]
    if want is not None and (len(want) != len(upd.shape) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(want, upd.shape))):
        raise ctx.fail(f"updates have shape {list(upd.shape)}, expected {list(want)}")
    return [data]


@register("ScatterElements", M, infer=_infer_scatter, attrs={"axis": 0, "reduction": "none"}, inputs=3)
def scatter_elements(ctx: OpContext, data, indices, updates):
    """Copy of data with data[p with `axis` coordinate = indices[p]] (reduction)= updates[p]."""
    if updates.shape != indices.shape:
        raise ctx.fail(f"updates shape {list(updates.shape)} differs from indices shape {list(indices.shape)}")
    return _scatter(ctx, data, _element_index(ctx, data.shape, indices), updates)


def _nd_index(ctx: OpContext, shape: tuple, indices: np.ndarray) -> tuple:
    """Index tuple addressing `shape` with the last axis of `indices` as coordinates."""
    k = indices.shape[-1] if indices.ndim else 0
    if indices.ndim == 0 or k > len(shape):
        raise ctx.fail(f"indices of shape {list(indices.shape)} cannot address a tensor of rank {len(shape)}")
    return tuple(_checked_indices(ctx, indices[..., j], shape[j]) for j in range(k))


def _infer_gather_nd(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "indices")
    data, idx = ctx.in_types
    b = ctx.attrs["batch_dims"]
    if data.shape is None or idx.shape is None:
        return [tensor(data.dtype, None)]
    require_rank(ctx, idx.shape, b + 1, -1, "indices")
    k = idx.shape[-1]
    if not isinstance(k, int):
        return [tensor(data.dtype, None)]
    if b + k > len(data.shape):
        raise ctx.fail(f"batch_dims {b} + index length {k} exceed the data rank {len(data.shape)}")
    batch = [same_dim(ctx, dims, "batch dims of data and indices") for dims in zip(data.shape[:b], idx.shape[:b])]
    return [tensor(data.dtype, batch + list(idx.shape[b:-1]) + list(data.shape[b + k:]))]


@register("GatherND", M, infer=_infer_gather_nd, attrs={"batch_dims": 0}, inputs=2)
def gather_nd(ctx: OpContext, data, indices):
    """Gather slices of data addressed by the last axis of `indices`, per batch (the first batch_dims
    dims, shared by data and indices)."""
    b = ctx.attrs["batch_dims"]
    if indices.ndim < b + 1 or data.shape[:b] != indices.shape[:b]:
        raise ctx.fail(f"batch_dims={b}: data {list(data.shape)} and indices {list(indices.shape)} must "
                       "share their leading batch dims")
    nb = math.prod(data.shape[:b])
    flat_data = data.reshape((nb,) + data.shape[b:])
    flat_idx = indices.reshape(nb, -1, indices.shape[-1])
    coords = _nd_index(ctx, flat_data.shape[1:], flat_idx)
    out = flat_data[(np.arange(nb)[:, None],) + coords]
    return out.reshape(indices.shape[:-1] + data.shape[b + indices.shape[-1]:])


@register("ScatterND", M, infer=_infer_scatter, attrs={"reduction": "none"}, inputs=3)
def scatter_nd(ctx: OpContext, data, indices, updates):
    """Copy of data with the slices addressed by the last axis of `indices` set (or reduced) to `updates`."""
    index = _nd_index(ctx, data.shape, indices)
    want = indices.shape[:-1] + data.shape[indices.shape[-1]:]
    if updates.shape != want:
        raise ctx.fail(f"updates have shape {list(updates.shape)}, expected {list(want)}")
    return _scatter(ctx, data, index, updates)


# ---- Expand, Tile, Pad -------------------------------------------------------------------------------
def _infer_expand(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "shape")
    t = ctx.in_types[0]
    target = ints(ctx.value(1))
    if target is not None:
        if t.shape is None:
            return [tensor(t.dtype, None)]
        return [tensor(t.dtype, broadcast_shapes(t.shape, tuple(target)))]
    n = static_length(ctx.in_types[1])
    if n is None or t.shape is None:
        return [tensor(t.dtype, None)]
    rank = max(n, len(t.shape))
    padded = (1,) * (rank - len(t.shape)) + t.shape
    # where the input dim is static and not 1, the target dim must be 1 or equal to it
    return [tensor(t.dtype, [d if isinstance(d, int) and d != 1 else None for d in padded])]


@register("Expand", M, infer=_infer_expand, inputs=2, returns_view=True)
def expand(ctx: OpContext, x, shape):
    """Broadcast x against `shape` (bidirectionally: a target dim of 1 keeps the input's)."""
    try:
        out = np.broadcast_shapes(x.shape, tuple(ints(shape)))
    except ValueError:
        raise ctx.fail(f"cannot expand shape {list(x.shape)} to {ints(shape)}") from None
    return np.broadcast_to(x, out)


def _infer_tile(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "repeats")
    t = ctx.in_types[0]
    reps = ints(ctx.value(1))
    if t.shape is None:
        return [tensor(t.dtype, None)]
    if reps is None:
        return _same_rank_unknown(t)
    _check_repeats(ctx, len(t.shape), reps)
    return [tensor(t.dtype, [dim_affine(d, mul=r) if r != 0 else 0 for d, r in zip(t.shape, reps)])]


def _check_repeats(ctx: OpContext, rank: int, reps: list[int]) -> None:
    if len(reps) != rank or any(r < 0 for r in reps):
        raise ctx.fail(f"repeats {reps} must give one non-negative count per axis (rank {rank})")


@register("Tile", M, infer=_infer_tile, inputs=2)
def tile(ctx: OpContext, x, repeats):
    """Repeat the whole tensor `repeats[i]` times along each axis i."""
    reps = ints(repeats)
    _check_repeats(ctx, x.ndim, reps)
    return np.tile(x, reps)


_check_pad_mode = one_of("mode", ("constant", "reflect", "edge", "wrap"))


def _pad_widths(ctx: OpContext, rank: int, pads: list[int], axes: list[int] | None) -> list[tuple[int, int]]:
    """(before, after) per axis; negative values remove elements."""
    axes = list(range(rank)) if axes is None else norm_axes(ctx, axes, rank)
    if len(pads) != 2 * len(axes):
        raise ctx.fail(f"pads has {len(pads)} values; {2 * len(axes)} are needed for {len(axes)} axes")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    return widths


def _infer_pad(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "pads")
    _check_pad_mode(ctx)
    t = ctx.in_types[0]
    if ctx.has_input(2) and ctx.in_types[2].dtype != t.dtype:
        raise ctx.fail(f"constant_value has dtype {ctx.in_types[2].dtype} but data has {t.dtype}")
    if t.shape is None:
        return [tensor(t.dtype, None)]
    pads = ints(ctx.value(1))
    axes = ints(ctx.value(3)) if ctx.has_input(3) else None
    if pads is None or (axes is None and ctx.has_input(3)):
        if axes is not None:
            changed = set(norm_axes(ctx, axes, len(t.shape)))
            return [tensor(t.dtype, [None if i in changed else d for i, d in enumerate(t.shape)])]
        return _same_rank_unknown(t)
    widths = _pad_widths(ctx, len(t.shape), pads, axes)
    return [tensor(t.dtype, [dim_affine(d, add=b + e) for d, (b, e) in zip(t.shape, widths)])]


@register("Pad", M, infer=_infer_pad, attrs={"mode": "constant"}, inputs=(2, 4))
def pad(ctx: OpContext, data, pads, constant_value=None, axes=None):
    """Pad (or, with negative pads, crop) each axis; modes constant, reflect, edge and wrap."""
    _check_pad_mode(ctx)
    mode = ctx.attrs["mode"]
    widths = _pad_widths(ctx, data.ndim, ints(pads), ints(axes))
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(data.shape, widths))
    x = data[crop]
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        value = 0 if constant_value is None or np.size(constant_value) == 0 else \
            scalar_of(ctx, constant_value, "constant_value")
        return np.pad(x, grow, mode="constant", constant_values=np.asarray(value, dtype=data.dtype))
    for d, (b, e) in zip(x.shape, grow):
        if d == 0 and b + e > 0:
            raise ctx.fail(f"mode {mode!r} cannot pad an empty axis")
    return np.pad(x, grow, mode=mode)


# ---- Selection: Compress, NonZero, TopK, Trilu, ReverseSequence, OneHot ----------------------------------
def _infer_compress(ctx: OpContext) -> list[TensorType]:
    t, cond = ctx.in_types
    if cond.dtype != boolean:
        raise ctx.fail(f"condition must be bool, got {cond.dtype}")
    require_rank(ctx, cond.shape, 1, what="condition")
    c = ctx.value(1)
    kept = None if c is None else int(np.count_nonzero(c))
    axis = ctx.attrs["axis"]
    if axis is None:
        return [tensor(t.dtype, [kept])]
    if t.shape is None:
        return [tensor(t.dtype, None)]
    axis = norm_axis(ctx, axis, len(t.shape))
    return [tensor(t.dtype, t.shape[:axis] + (kept,) + t.shape[axis + 1:])]


@register("Compress", M, infer=_infer_compress, attrs={"axis": None}, inputs=2)
def compress(ctx: OpContext, x, condition):
    """Keep the slices along `axis` (of the flattened input when axis is absent) where condition is true."""
    axis = ctx.attrs["axis"]
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = norm_axis(ctx, axis, x.ndim)
    cond = np.asarray(condition).astype(bool).reshape(-1)
    if cond.size > x.shape[axis]:
        raise ctx.fail(f"condition has {cond.size} entries but the axis has size {x.shape[axis]}")
    return np.compress(cond, x, axis=axis)


def _infer_nonzero(ctx: OpContext) -> list[TensorType]:
    t, x = ctx.in_types[0], ctx.value(0)
    count = None if x is None else int(np.count_nonzero(x))
    return [tensor(i64, [None if t.shape is None else len(t.shape), count])]


@register("NonZero", M, infer=_infer_nonzero)
def nonzero(ctx: OpContext, x):
    """Coordinates of the non-zero elements, one row per axis, in row-major order."""
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def _infer_topk(ctx: OpContext) -> list[TensorType]:
    require_int(ctx, 1, "K")
    t = ctx.in_types[0]
    if t.shape is None:
        return [tensor(t.dtype, None), tensor(i64, None)]
    axis = norm_axis(ctx, ctx.attrs["axis"], len(t.shape))
    k = ctx.value(1)
    k = None if k is None else int(scalar_of(ctx, k, "K"))
    if k is not None and (k < 0 or (isinstance(t.shape[axis], int) and k > t.shape[axis])):
        raise ctx.fail(f"K={k} is out of range for an axis of size {t.shape[axis]}")
    shape = t.shape[:axis] + (k,) + t.shape[axis + 1:]
    return [tensor(t.dtype, shape), tensor(i64, shape)]


@register("TopK", M, infer=_infer_topk, attrs={"axis": -1, "largest": 1, "sorted": 1}, inputs=2, outputs=2)
def topk(ctx: OpContext, x, k):
    """The K largest (or smallest) values along `axis` and their indices, sorted; among equal values the
    lower index comes first."""
    axis = norm_axis(ctx, ctx.attrs["axis"], x.ndim)
    k = int(scalar_of(ctx, k, "K"))
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ctx.fail(f"K={k} is out of range for an axis of size {n}")
    if ctx.attrs["largest"]:
        # a stable ascending sort of the reversed axis, read backwards: descending, ties by lower index
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def _infer_trilu(ctx: OpContext) -> list[TensorType]:
    require_rank(ctx, ctx.in_types[0].shape, 2, -1)
    if ctx.has_input(1):
        require_int(ctx, 1, "k")
    return [ctx.in_types[0]]


@register("Trilu", M, infer=_infer_trilu, attrs={"upper": 1}, inputs=(1, 2))
def trilu(ctx: OpContext, x, k=None):
    """Keep the upper (or lower) triangle of the last two dims, from diagonal k on; zero the rest."""
    if x.ndim < 2:
        raise ctx.fail(f"input must have rank >= 2, got {x.ndim}")
    k = 0 if k is None else int(scalar_of(ctx, k, "k"))
    return np.triu(x, k) if ctx.attrs["upper"] else np.tril(x, k)


def _sequence_axes(ctx: OpContext) -> tuple[int, int]:
    b, t = ctx.attrs["batch_axis"], ctx.attrs["time_axis"]
    if {b, t} != {0, 1}:
        raise ctx.fail(f"batch_axis and time_axis must be 0 and 1 in some order, got {b} and {t}")
    return b, t


def _infer_reverse_sequence(ctx: OpContext) -> list[TensorType]:
    _sequence_axes(ctx)
    require_int(ctx, 1, "sequence_lens")
    require_rank(ctx, ctx.in_types[0].shape, 2, -1)
    return [ctx.in_types[0]]


@register("ReverseSequence", M, infer=_infer_reverse_sequence, attrs={"batch_axis": 1, "time_axis": 0}, inputs=2)
def reverse_sequence(ctx: OpContext, x, sequence_lens):
    """Reverse the first sequence_lens[b] steps along time_axis of each batch entry b."""
    b_axis, t_axis = _sequence_axes(ctx)
    n_batch, n_time = x.shape[b_axis], x.shape[t_axis]
    lens = np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
    if lens.size != n_batch or lens.min(initial=0) < 0 or lens.max(initial=0) > n_time:
        raise ctx.fail(f"sequence_lens {lens.tolist()} must give one length in [0, {n_time}] per batch entry")
    t = np.arange(n_time)[:, None]
    src = np.where(t < lens, lens - 1 - t, t)            # [time, batch]
    src = src if t_axis == 0 else src.T
    return np.take_along_axis(x, src.reshape(src.shape + (1,) * (x.ndim - 2)), axis=t_axis)


def _infer_one_hot(ctx: OpContext) -> list[TensorType]:
    idx, _, values = ctx.in_types
    d = ctx.value(1)
    depth = None if d is None else int(scalar_of(ctx, d, "depth"))
    if idx.shape is None:
        return [tensor(values.dtype, None)]
    axis = norm_axis(ctx, ctx.attrs["axis"], len(idx.shape), extra=1)
    return [tensor(values.dtype, idx.shape[:axis] + (depth,) + idx.shape[axis:])]


@register("OneHot", M, infer=_infer_one_hot, attrs={"axis": -1}, inputs=3)
def one_hot(ctx: OpContext, indices, depth, values):
    """values[1] where the new `axis` coordinate equals the index (negative ones count from depth),
    values[0] elsewhere; out-of-range indices give an all-off row."""
    depth = int(scalar_of(ctx, depth, "depth"))
    if depth < 0:
        raise ctx.fail(f"depth must be non-negative, got {depth}")
    if values.size != 2:
        raise ctx.fail(f"values must hold [off_value, on_value], got shape {list(values.shape)}")
    axis = norm_axis(ctx, ctx.attrs["axis"], indices.ndim, extra=1)
    idx = np.asarray(indices).astype(np.int64)
    idx = np.expand_dims(np.where(idx < 0, idx + depth, idx), axis)
    positions = np.arange(depth).reshape([-1 if i == axis else 1 for i in range(idx.ndim)])
    off, on = values.reshape(-1)
    return np.where(idx == positions, on, off).astype(values.dtype)


# ---- Dropout --------------------------------------------------------------------------------------------
def _infer_dropout(ctx: OpContext) -> list[TensorType]:
    t = ctx.in_types[0]
    return [t, tensor(boolean, t.shape)]


@register("Dropout", M, infer=_infer_dropout, attrs={"seed": None}, inputs=(1, 3), outputs=(1, 2))
def dropout(ctx: OpContext, data, ratio=None, training_mode=None):
    """Inference: the input unchanged and an all-true mask. In training mode (training_mode true and
    ratio > 0) elements are dropped with probability `ratio` and the rest scaled by 1/(1-ratio)."""
    r = 0.5 if ratio is None else float(scalar_of(ctx, ratio, "ratio"))
    training = training_mode is not None and bool(scalar_of(ctx, training_mode, "training_mode"))
    if not training or r == 0:
        out, mask = _fresh(data), np.ones(data.shape, dtype=bool)
    else:
        if not 0 <= r < 1:
            raise ctx.fail(f"ratio must lie in [0, 1), got {r}")
        mask = np.random.RandomState(ctx.attrs["seed"]).uniform(0, 1, data.shape) >= r
        out = (data * mask / data.dtype.type(1 - r)).astype(data.dtype)
    return (out, mask) if len(ctx.out_types) > 1 else out


# ---- Resize ---------------------------------------------------------------------------------------------
_RESIZE_MODES = ("nearest", "linear", "cubic")
_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_crop_and_resize")
_NEAREST_ROUNDING: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}
_ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _check_resize_attrs(ctx: OpContext) -> None:
    a = ctx.attrs
    for key, allowed in (("mode", _RESIZE_MODES), ("coordinate_transformation_mode", _COORD_MODES),
                         ("nearest_mode", tuple(_NEAREST_ROUNDING)), ("keep_aspect_ratio_policy", _ASPECT_POLICIES)):
        if a[key] not in allowed:
            raise ctx.fail(f"{key} must be one of {list(allowed)}, got {a[key]!r}")
    if a["antialias"] and a["mode"] == "nearest":
        raise ctx.fail("antialias is only defined for the linear and cubic modes")


def _optional(a: np.ndarray | None) -> np.ndarray | None:
    """Resize's roi/scales/sizes: an empty tensor means the input is absent."""
    return None if a is None or np.size(a) == 0 else np.asarray(a)


def _resize_plan(ctx: OpContext, shape: tuple, scales: list[float] | None,
                 sizes: list[int] | None) -> tuple[list[int], list[Dim], list[float | None]]:
    """(resized axes, output dims, scale factor per axis). Output dims are None where a dynamic input dim
    makes them unknown."""
    rank = len(shape)
    axes = norm_axes(ctx, ctx.attrs["axes"] if ctx.attrs["axes"] is not None else range(rank), rank)
    if (scales is None) == (sizes is None):
        raise ctx.fail("exactly one of scales and sizes must be given")
    out: list[Dim] = list(shape)
    factors: list[float | None] = [1.0] * rank
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise ctx.fail(f"{'scales' if scales is not None else 'sizes'} has {len(given)} values for {len(axes)} axes")
    if scales is not None:
        for a, s in zip(axes, scales):
            if not s > 0:
                raise ctx.fail(f"scales must be positive, got {scales}")
            factors[a] = float(s)
            if isinstance(shape[a], int):
                out[a] = int(math.floor(float(s) * shape[a]))
            else:
                out[a] = shape[a] if s == 1 else None
        return axes, out, factors
    if any(n < 0 for n in sizes):
        raise ctx.fail(f"sizes must be non-negative, got {sizes}")
    policy = ctx.attrs["keep_aspect_ratio_policy"]
    if policy == "stretch":
        for a, n in zip(axes, sizes):
            out[a] = n
            factors[a] = n / shape[a] if isinstance(shape[a], int) and shape[a] else None
        return axes, out, factors
    if not all(isinstance(shape[a], int) and shape[a] for a in axes):
        return axes, [None if a in axes else d for a, d in enumerate(out)], [None] * rank
    ratios = [n / shape[a] for a, n in zip(axes, sizes)]
    s = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        out[a] = int(s * shape[a] + 0.5)
        factors[a] = s
    return axes, out, factors


def _infer_resize(ctx: OpContext) -> list[TensorType]:
    _check_resize_attrs(ctx)
    t = ctx.in_types[0]
    if t.shape is None:
        return [tensor(t.dtype, None)]
    # an input given as an empty tensor counts as absent
    present = {i: ctx.has_input(i) and static_length(ctx.in_types[i]) != 0 for i in (2, 3)}
    scales, sizes = (_optional(ctx.value(i)) if present[i] else None for i in (2, 3))
    if (present[2] and scales is None) or (present[3] and sizes is None):   # known only at run time
        axes = ctx.attrs["axes"]
        changed = set(range(len(t.shape)) if axes is None else norm_axes(ctx, axes, len(t.shape)))
        return [tensor(t.dtype, [None if i in changed else d for i, d in enumerate(t.shape)])]
    _, out, _ = _resize_plan(ctx, t.shape, None if scales is None else scales.reshape(-1).tolist(), ints(sizes))
    return [tensor(t.dtype, out)]


def _source_coords(ctx: OpContext, n_out: int, n_in: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """Where each output position samples the input axis (coordinate_transformation_mode)."""
    mode = ctx.attrs["coordinate_transformation_mode"]
    y = np.arange(n_out, dtype=np.float64)
    length = scale * n_in  # the output length before truncating to an int
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / length)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if length > 1 else np.full(n_out, -0.5)
    if mode == "align_corners":
        return y * (n_in - 1) / (length - 1) if length != 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return y / scale
    lo, hi = roi  # tf_crop_and_resize
    if length == 1:
        return np.full(n_out, (hi - lo) * (n_in - 1) / 2 + lo * (n_in - 1))
    return lo * (n_in - 1) + y * (hi - lo) * (n_in - 1) / (length - 1)


def _keys_cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _interp_weights(ctx: OpContext, x: np.ndarray, n_in: int, scale: float) -> np.ndarray:
    """Dense [n_out, n_in] interpolation matrix of the linear or cubic filter sampled at coordinates x;
    taps outside the input repeat the edge (or are dropped with exclude_outside)."""
    a = ctx.attrs
    cubic = a["mode"] == "cubic"
    radius = 2 if cubic else 1
    stretch = min(scale, 1.0) if a["antialias"] else 1.0   # antialias widens the filter when downscaling
    first = math.floor(-radius / stretch) + 1
    taps = np.floor(x)[:, None] + np.arange(first, 2 - first)
    dist = stretch * (taps - x[:, None])
    w = _keys_cubic(dist, a["cubic_coeff_a"]) if cubic else np.maximum(0.0, 1 - np.abs(dist))
    if a["antialias"]:
        w = w / w.sum(axis=1, keepdims=True)
    if a["exclude_outside"]:
        w = np.where((taps >= 0) & (taps < n_in), w, 0.0)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    matrix = np.zeros((len(x), n_in))
    np.add.at(matrix, (np.arange(len(x))[:, None], np.clip(taps, 0, n_in - 1).astype(np.intp)), w)
    return matrix


def _resize_axis(ctx: OpContext, data: np.ndarray, axis: int, n_out: int, scale: float,
                 roi: tuple[float, float]) -> np.ndarray:
    n_in = data.shape[axis]
    x = _source_coords(ctx, n_out, n_in, scale, roi)
    if ctx.attrs["mode"] == "nearest":
        src = np.clip(_NEAREST_ROUNDING[ctx.attrs["nearest_mode"]](x), 0, n_in - 1).astype(np.intp)
        out = np.take(data, src, axis=axis)
    else:
        w = _interp_weights(ctx, x, n_in, scale).astype(data.dtype)
        out = np.moveaxis(np.tensordot(w, data, axes=([1], [axis])), 0, axis)
    if ctx.attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        outside = ((x < 0) | (x > n_in - 1)).reshape([-1 if i == axis else 1 for i in range(data.ndim)])
        out = np.where(outside, np.asarray(ctx.attrs["extrapolation_value"], out.dtype), out)
    return out


@register("Resize", M, infer=_infer_resize, inputs=(1, 4), attrs={
    "mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
    "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0, "antialias": 0, "axes": None,
    "keep_aspect_ratio_policy": "stretch"})
def resize(ctx: OpContext, x, roi=None, scales=None, sizes=None):
    """Resample each resized axis in turn (the filters are separable) with nearest, linear or cubic
    interpolation."""
    _check_resize_attrs(ctx)
    scales, sizes, roi = _optional(scales), _optional(sizes), _optional(roi)
    axes, out_shape, factors = _resize_plan(ctx, x.shape, None if scales is None else scales.reshape(-1).tolist(),
                                            ints(sizes))
    if roi is not None and roi.size != 2 * len(axes):
        raise ctx.fail(f"roi has {roi.size} values; {2 * len(axes)} are needed for {len(axes)} axes")
    crop = ctx.attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    if crop and roi is None:
        raise ctx.fail("coordinate_transformation_mode 'tf_crop_and_resize' needs the roi input")
    if any(x.shape[a] == 0 and out_shape[a] for a in axes):
        raise ctx.fail(f"cannot resize an empty axis of {list(x.shape)} to {out_shape}")
    exact = ctx.attrs["mode"] == "nearest" or x.dtype in (np.float32, np.float64)
    y = x if exact else x.astype(np.float64)
    for i, a in enumerate(axes):
        window = (float(roi[i]), float(roi[i + len(axes)])) if roi is not None else (0.0, 1.0)
        unchanged = out_shape[a] == x.shape[a] and factors[a] == 1 and (not crop or window == (0.0, 1.0))
        if unchanged or x.shape[a] == 0:
            continue
        y = _resize_axis(ctx, y, a, out_shape[a], factors[a], window)
    if y.dtype == x.dtype:
        return _fresh(y) if y is x else y
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        y = np.clip(np.round(y), info.min, info.max)
    return y.astype(x.dtype)

