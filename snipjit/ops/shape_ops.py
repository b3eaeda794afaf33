"""Shape computation ops: they produce shapes, sizes, index ranges and constants (Shape, Size, Range,
ConstantOfShape, Constant, EyeLike).

Shape and Size depend only on their input's type, so their result is often known at compile time even
when the input's data is not. `VALUE_FROM_TYPES` maps those ops to a function giving that value from an
`OpContext` (None when the type does not fix it); constant folding uses it to replace such nodes by
constants. Their reference kernels also accept None for the data when the input type is static.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..ir.dtypes import dtype as to_dtype, i64
from ..ir.graph import TensorType
from ._indexing import dim_prod, ints, require_rank, scalar_of, static_length, tensor
from .registry import Category, OpContext, register

S = Category.SHAPE


# ---- Shape, Size ---------------------------------------------------------------------------------------
def _shape_window(ctx: OpContext, rank: int) -> range:
    """The dims Shape reports: start/end count from the end when negative and are clamped to [0, rank]."""
    return range(rank)[slice(ctx.attrs["start"], ctx.attrs["end"])]


def _infer_shape(ctx: OpContext) -> list[TensorType]:
    shape = ctx.in_types[0].shape
    return [tensor(i64, [None if shape is None else len(_shape_window(ctx, len(shape)))])]


def shape_value(ctx: OpContext) -> np.ndarray | None:
    """Shape's output when the input type makes the reported dims static."""
    shape = ctx.in_types[0].shape
    if shape is None:
        return None
    dims = [shape[i] for i in _shape_window(ctx, len(shape))]
    return np.array(dims, dtype=np.int64) if all(isinstance(d, int) for d in dims) else None


def _input_shape(ctx: OpContext, data: np.ndarray | None) -> tuple[int, ...]:
    """The shape of the data, or of the input type when the data is not given."""
    if data is not None:
        return data.shape
    shape = ctx.in_types[0].shape if ctx.in_types else None
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise ctx.fail(f"needs the input data or a static input shape, got {ctx.in_types[0] if ctx.in_types else None}")
    return shape


@register("Shape", S, infer=_infer_shape, attrs={"start": 0, "end": None})
def shape(ctx: OpContext, data):
    """The input's dims from `start` to `end` as a 1-D int64 tensor."""
    dims = _input_shape(ctx, data)
    return np.array([dims[i] for i in _shape_window(ctx, len(dims))], dtype=np.int64)


def _infer_size(ctx: OpContext) -> list[TensorType]:
    return [tensor(i64, ())]


def size_value(ctx: OpContext) -> np.ndarray | None:
    """Size's output when the input type fixes the element count."""
    shape = ctx.in_types[0].shape
    n = None if shape is None else dim_prod(shape)
    return np.array(n, dtype=np.int64) if isinstance(n, int) else None


@register("Size", S, infer=_infer_size)
def size(ctx: OpContext, data):
    """The number of elements of the input, as an int64 scalar."""
    return np.array(math.prod(_input_shape(ctx, data)), dtype=np.int64)


VALUE_FROM_TYPES: dict[str, Callable[[OpContext], np.ndarray | None]] = {"Shape": shape_value, "Size": size_value}


# ---- ConstantOfShape, Constant, EyeLike -------------------------------------------------------------------
def _fill_value(ctx: OpContext) -> np.ndarray:
    value = ctx.attrs["value"]
    if value is None:
        return np.zeros((), dtype=np.float32)
    value = np.asarray(value)
    if value.size != 1:
        raise ctx.fail(f"value must hold exactly one element, got shape {list(value.shape)}")
    return value.reshape(())


def _checked_dims(ctx: OpContext, dims: list[int]) -> list[int]:
    if any(d < 0 for d in dims):
        raise ctx.fail(f"shape {dims} has a negative dimension")
    return dims


def _infer_constant_of_shape(ctx: OpContext) -> list[TensorType]:
    dt = to_dtype(_fill_value(ctx).dtype)
    t = ctx.in_types[0]
    if t.dtype != i64:
        raise ctx.fail(f"the shape input must be int64, got {t.dtype}")
    require_rank(ctx, t.shape, 1, what="the shape input")
    dims = ints(ctx.value(0))
    if dims is not None:
        return [tensor(dt, _checked_dims(ctx, dims))]
    n = static_length(t)
    return [tensor(dt, None if n is None else [None] * n)]


@register("ConstantOfShape", S, infer=_infer_constant_of_shape, attrs={"value": None})
def constant_of_shape(ctx: OpContext, shape):
    """A tensor of the given shape filled with `value` (float32 0 by default)."""
    value = _fill_value(ctx)
    return np.full(_checked_dims(ctx, ints(shape)), value, dtype=value.dtype)


_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                   "value_strings", "sparse_value")


def _constant_array(ctx: OpContext) -> np.ndarray:
    given = [k for k in _CONSTANT_ATTRS if ctx.attrs[k] is not None]
    if len(given) != 1:
        raise ctx.fail(f"exactly one of {list(_CONSTANT_ATTRS)} must be given, got {given or 'none'}")
    key, v = given[0], ctx.attrs[given[0]]
    if key == "sparse_value":
        raise ctx.fail("sparse constants are not supported")
    if key == "value":
        return np.asarray(v)
    if key.startswith("value_float"):
        return np.asarray(v, dtype=np.float32)
    if key.startswith("value_int"):
        return np.asarray(v, dtype=np.int64)
    return np.asarray(v, dtype=object)


def _infer_constant(ctx: OpContext) -> list[TensorType]:
    a = _constant_array(ctx)
    return [tensor(to_dtype(a.dtype), a.shape)]


@register("Constant", S, infer=_infer_constant, attrs={k: None for k in _CONSTANT_ATTRS}, inputs=0)
def constant(ctx: OpContext):
    """The tensor held by whichever value* attribute is set."""
    return _constant_array(ctx).copy()


def _eye_dtype(ctx: OpContext, input_type) -> np.dtype:
    code = ctx.attrs["dtype"]
    return input_type.np if code is None else to_dtype(int(code)).np


def _infer_eye_like(ctx: OpContext) -> list[TensorType]:
    t = ctx.in_types[0]
    require_rank(ctx, t.shape, 2)
    try:
        dt = to_dtype(_eye_dtype(ctx, t.dtype))
    except TypeError as e:
        raise ctx.fail(f"dtype attribute: {e}") from None
    return [tensor(dt, t.shape if t.shape is not None else [None, None])]


@register("EyeLike", S, infer=_infer_eye_like, attrs={"dtype": None, "k": 0})
def eye_like(ctx: OpContext, x):
    """Ones on diagonal k of a matrix shaped like the input, zeros elsewhere."""
    if x.ndim != 2:
        raise ctx.fail(f"input must be 2-D, got shape {list(x.shape)}")
    return np.eye(*x.shape, k=ctx.attrs["k"], dtype=_eye_dtype(ctx, to_dtype(x.dtype)))


# ---- Range --------------------------------------------------------------------------------------------
_STASH = {1: np.float32, 11: np.float64}


def _range_length(ctx: OpContext, start, limit, delta) -> int:
    if delta == 0:
        raise ctx.fail("delta cannot be 0")
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        return max(-((start - limit) // delta), 0)
    return max(math.ceil((limit - start) / delta), 0)


def _infer_range(ctx: OpContext) -> list[TensorType]:
    types = ctx.in_types
    for i, t in enumerate(types):
        if t.dtype != types[0].dtype:
            raise ctx.fail(f"input {i} has dtype {t.dtype} but start has {types[0].dtype}")
        if t.shape is not None and (len(t.shape) > 1 or (len(t.shape) == 1 and t.shape[0] not in (1, None))):
            # (ONNX's own function bodies, AffineGrid's, give Range one-element vectors)
            raise ctx.fail(f"{('start', 'limit', 'delta')[i]} must be a scalar, got shape {list(t.shape)}")
    values = [ctx.value(i) for i in range(3)]
    if any(v is None for v in values):
        return [tensor(types[0].dtype, [None])]
    return [tensor(types[0].dtype, [_range_length(ctx, *(scalar_of(ctx, v, "Range input") for v in values))])]


@register("Range", S, infer=_infer_range, attrs={"stash_type": 1}, inputs=3)
def range_(ctx: OpContext, start, limit, delta):
    """start, start + delta, ... up to (not including) limit."""
    s, lim, d = (scalar_of(ctx, v, name) for v, name in ((start, "start"), (limit, "limit"), (delta, "delta")))
    n = _range_length(ctx, s, lim, d)
    out_dtype = start.dtype
    if np.issubdtype(out_dtype, np.integer):
        return (s + np.arange(n, dtype=np.int64) * d).astype(out_dtype)
    compute = np.float64
    if out_dtype.itemsize == 2:  # float16 / bfloat16 accumulate in the stash type
        if ctx.attrs["stash_type"] not in _STASH:
            raise ctx.fail(f"stash_type must be 1 (float) or 11 (double), got {ctx.attrs['stash_type']}")
        compute = _STASH[ctx.attrs["stash_type"]]
    return (compute(s) + np.arange(n, dtype=compute) * compute(d)).astype(out_dtype)
