"""Ops that select or reorder elements by value or position: Compress, NonZero, TopK, Unique, Trilu,
ReverseSequence and OneHot.

Several have outputs whose size depends on the data (NonZero, Compress, Unique): their inference gives a
dynamic dim unless the input is known at compile time.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import boolean, dtype as to_dtype, i64
from ..ir.graph import TensorType
from ._indexing import dim_prod, norm_axis, require_int, require_rank, scalar_of, tensor
from .common import NUMERIC, check_dtypes, one_of
from .registry import Category, OpContext, register

M = Category.MOVEMENT


# ---- Compress, NonZero, TopK, Trilu, ReverseSequence, OneHot -------------------------------------
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


# ---- Unique --------------------------------------------------------------------------------------
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
