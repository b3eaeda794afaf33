"""Ops that read or write elements at index positions: Gather, GatherElements, GatherND, ScatterElements,
ScatterND and TensorScatter (a KV-cache update along the sequence axis).

Indices may be negative (counting from the end of their axis); an index out of range fails naming the node.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import i64
from ..ir.graph import TensorType
from ..ir.shape import Shape, shape_str
from ._indexing import norm_axis, require_int, require_rank, same_dim, tensor
from .common import check_dtypes, one_of
from .registry import Category, OpContext, register

M = Category.MOVEMENT


# ---- Gather / Scatter ----------------------------------------------------------------------------
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


# ---- TensorScatter -------------------------------------------------------------------------------
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
