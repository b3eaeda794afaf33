"""Reductions: the Reduce* family (one generic reduction serves them all), ArgMax/ArgMin, CumSum and
CumProd.

Reduce* follow the latest ONNX signature: `axes` is an optional int64 input. Without axes (or with an
empty axes tensor) every axis is reduced, unless `noop_with_empty_axes` is set: then nothing is, and
each element is "reduced" alone (ReduceSumSquare squares it, ReduceLogSum takes its log, ...).
Reducing an empty set gives the reduction's identity (0 for sums, -inf for ReduceMax, ...).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.dtypes import DType, boolean, i8, i32, i64, u8, u32, u64
from ..ir.graph import TensorType
from ..ir.shape import is_static, shape_str
from .common import FLOATS, NUMERIC, axis_of, check_dtypes, compute_dtype, one_of
from .registry import Category, OpContext, register

Axes = tuple[int, ...]

_REDUCE_DTYPES = FLOATS | {i32, i64, u32, u64}
_MINMAX_DTYPES = _REDUCE_DTYPES | {i8, u8, boolean}


def mean_of(x: np.ndarray, axes: Axes, keepdims: bool) -> np.ndarray:
    """The mean over `axes`: NaN for an empty set, without NumPy's warning about it."""
    return np.sum(x, axis=axes, keepdims=keepdims) / math.prod(x.shape[a] for a in axes)


def _log_sum_exp(x: np.ndarray, axes: Axes | int, keepdims: bool) -> np.ndarray:
    """log(sum(exp(x))) over `axes`, shifted by the maximum so that exp cannot overflow."""
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axes)


def _extreme(x: np.ndarray, largest: bool):
    """The identity of max (largest=False) or min: the lowest or highest value of x's dtype."""
    if x.dtype == np.bool_:
        return largest
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        return info.max if largest else info.min
    return np.inf if largest else -np.inf


@dataclass(frozen=True)
class Reduction:
    """One Reduce* op: `fn(x, axes, keepdims)` computes it on x in its compute dtype."""
    name: str
    fn: Callable[[np.ndarray, Axes, bool], np.ndarray]
    dtypes: frozenset[DType]


REDUCTIONS = [
    Reduction("ReduceSum", lambda x, a, k: np.sum(x, axis=a, keepdims=k), _REDUCE_DTYPES),
    Reduction("ReduceMean", mean_of, _REDUCE_DTYPES),
    Reduction("ReduceProd", lambda x, a, k: np.prod(x, axis=a, keepdims=k), _REDUCE_DTYPES),
    Reduction("ReduceMax", lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_extreme(x, False)),
              _MINMAX_DTYPES),
    Reduction("ReduceMin", lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_extreme(x, True)),
              _MINMAX_DTYPES),
    Reduction("ReduceL1", lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k), _REDUCE_DTYPES),
    Reduction("ReduceL2", lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)), _REDUCE_DTYPES),
    Reduction("ReduceSumSquare", lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k), _REDUCE_DTYPES),
    Reduction("ReduceLogSum", lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)), FLOATS),
    Reduction("ReduceLogSumExp", _log_sum_exp, FLOATS),
]


def _reduced_axes(ctx: OpContext, axes: np.ndarray | None, rank: int) -> Axes:
    """The axes to reduce, from the optional axes input and noop_with_empty_axes."""
    if axes is None or axes.size == 0:
        return () if ctx.attrs["noop_with_empty_axes"] else tuple(range(rank))
    if axes.ndim > 1:
        raise ctx.fail(f"axes must be a 1-D tensor, got shape {shape_str(axes.shape)}")
    out = tuple(axis_of(ctx, a, rank, "reduction axis") for a in axes.reshape(-1).tolist())
    if len(set(out)) != len(out):
        raise ctx.fail(f"axes {axes.tolist()} repeat an axis")
    return out


def _reduced_shape(shape: tuple, axes: Axes, keepdims: bool) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


def _infer_reduce(dtypes: frozenset[DType]) -> Callable[[OpContext], list[TensorType]]:
    def infer(ctx: OpContext) -> list[TensorType]:
        check_dtypes(ctx, dtypes, [0])
        check_dtypes(ctx, {i64}, [1])
        one_of("keepdims", (0, 1))(ctx)
        one_of("noop_with_empty_axes", (0, 1))(ctx)
        x = ctx.in_types[0]
        keep = bool(ctx.attrs["keepdims"])
        axes = ctx.value(1) if ctx.has_input(1) else np.zeros(0, np.int64)
        if axes is not None:
            if x.shape is not None:
                reduced = _reduced_axes(ctx, axes, len(x.shape))
                return [TensorType(x.dtype, _reduced_shape(x.shape, reduced, keep))]
            everything = axes.size == 0 and not ctx.attrs["noop_with_empty_axes"]
            return [TensorType(x.dtype, () if everything and not keep else None)]
        # the axes are known only at run time: how many there are may be
        axes_shape = ctx.in_types[1].shape
        count = axes_shape[0] if is_static(axes_shape) and len(axes_shape) == 1 else None
        if x.shape is None:
            return [TensorType(x.dtype, None)]
        if count == 0:
            return [TensorType(x.dtype, _reduced_shape(x.shape, _reduced_axes(ctx, None, len(x.shape)), keep))]
        if keep:  # each dim stays or becomes 1: known only where it already is 1
            return [TensorType(x.dtype, tuple(1 if d == 1 else None for d in x.shape))]
        if count is None:
            return [TensorType(x.dtype, None)]
        if count > len(x.shape):
            raise ctx.fail(f"{count} axes to reduce but the input has rank {len(x.shape)}")
        return [TensorType(x.dtype, (None,) * (len(x.shape) - count))]
    return infer


def _register_reduction(r: Reduction) -> None:
    def kernel(ctx: OpContext, data, axes=None):
        reduced = _reduced_axes(ctx, axes, data.ndim)
        x = data.astype(compute_dtype(data.dtype), copy=False)
        with np.errstate(all="ignore"):
            y = r.fn(x, reduced, bool(ctx.attrs["keepdims"]))
            return np.asarray(y).astype(data.dtype, copy=False)
    kernel.__doc__ = f"{r.name} of data over axes (see the module docstring)."
    register(r.name, Category.REDUCTION, infer=_infer_reduce(r.dtypes), inputs=(1, 2),
             attrs={"keepdims": 1, "noop_with_empty_axes": 0})(kernel)


for _r in REDUCTIONS:
    _register_reduction(_r)


# ---- ArgMax / ArgMin -----------------------------------------------------------------------------
def _infer_arg(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, NUMERIC)
    x = ctx.in_types[0]
    if x.shape is None:
        return [TensorType(i64, None)]
    axis = axis_of(ctx, ctx.attrs["axis"], len(x.shape))
    if isinstance(x.shape[axis], int) and x.shape[axis] == 0:
        raise ctx.fail(f"cannot take {ctx.op} along axis {axis} of size 0")
    return [TensorType(i64, _reduced_shape(x.shape, (axis,), bool(ctx.attrs["keepdims"])))]


def _arg_extreme(find: Callable, what: str) -> Callable:
    def kernel(ctx: OpContext, data):
        axis = axis_of(ctx, ctx.attrs["axis"], data.ndim)
        n = data.shape[axis] if data.ndim else 1
        if n == 0:
            raise ctx.fail(f"cannot take {ctx.op} along axis {axis} of size 0")
        keep = bool(ctx.attrs["keepdims"])
        x = data.reshape(1) if data.ndim == 0 else data
        if ctx.attrs["select_last_index"]:
            idx = n - 1 - find(np.flip(x, axis), axis=axis, keepdims=keep)
        else:
            idx = find(x, axis=axis, keepdims=keep)
        return np.asarray(idx, dtype=np.int64).reshape(_reduced_shape(data.shape, (axis,), keep))
    kernel.__doc__ = f"The index of the first (with select_last_index: the last) {what} along axis."
    return kernel


for _name, _find, _what in (("ArgMax", np.argmax, "maximum"), ("ArgMin", np.argmin, "minimum")):
    register(_name, Category.REDUCTION, infer=_infer_arg,
             attrs={"axis": 0, "keepdims": 1, "select_last_index": 0})(_arg_extreme(_find, _what))


# ---- CumSum, CumProd -----------------------------------------------------------------------------
def infer_cumulative(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, _REDUCE_DTYPES, [0])
    check_dtypes(ctx, {i32, i64}, [1])
    x, axis_type = ctx.in_types
    if is_static(axis_type.shape) and int(np.prod(axis_type.shape)) != 1:
        raise ctx.fail(f"axis must be a scalar, got shape {shape_str(axis_type.shape)}")
    if ctx.value(1) is not None and x.shape is not None:
        axis_of(ctx, ctx.value(1).reshape(-1)[0], len(x.shape))
    return [x]


def cumulative(ctx: OpContext, x: np.ndarray, axis: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    """`ufunc.accumulate` of x along the scalar `axis` input, with the CumSum/CumProd attributes:
    `exclusive` leaves out each element itself (the first result is the ufunc's identity), `reverse`
    accumulates from the end."""
    if axis.size != 1:
        raise ctx.fail(f"axis must be a scalar, got shape {shape_str(axis.shape)}")
    ax = axis_of(ctx, axis.reshape(-1)[0], x.ndim)
    y = x.astype(compute_dtype(x.dtype), copy=False)
    if ctx.attrs["reverse"]:
        y = np.flip(y, ax)
    if ctx.attrs["exclusive"]:  # shift by one along the axis, the identity first
        lead = (slice(None),) * ax
        first = np.full_like(y[lead + (slice(0, 1),)], ufunc.identity)
        y = np.concatenate([first, y[lead + (slice(0, -1),)]], axis=ax)
    y = ufunc.accumulate(y, axis=ax, dtype=y.dtype)
    if ctx.attrs["reverse"]:
        y = np.flip(y, ax)
    return y.astype(x.dtype)


@register("CumSum", Category.REDUCTION, infer=infer_cumulative, inputs=2, attrs={"exclusive": 0, "reverse": 0})
def cumsum(ctx: OpContext, x, axis):
    """Running sums of x along axis; `exclusive` leaves out each element itself, `reverse` sums from
    the end."""
    return cumulative(ctx, x, axis, np.add)


@register("CumProd", Category.REDUCTION, infer=infer_cumulative, inputs=2, attrs={"exclusive": 0, "reverse": 0})
def cumprod(ctx: OpContext, x, axis):
    """Running products of x along axis; `exclusive` leaves out each element itself, `reverse`
    multiplies from the end."""
    return cumulative(ctx, x, axis, np.multiply)
