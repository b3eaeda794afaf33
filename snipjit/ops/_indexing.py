"""Helpers private to the op package, shared by its structural families (rearranging, slicing, gather and
scatter, selection, sampling, shape, linalg, nn): reading index-like inputs, normalising axes, arithmetic on
dimensions that may be dynamic, and fresh output copies.

Dims follow `snipjit.ir.shape`: an int is static, a str names a dynamic dim, None is an anonymous dynamic
dim. The arithmetic here keeps a result static or named whenever that is certain, and gives None
otherwise.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from ..ir.dtypes import DType
from ..ir.graph import TensorType
from ..ir.shape import Dim, Shape, shape_str
from .common import axis_of
from .registry import OpContext

#: Slice/Pad bounds at least this large mean "to the end", whatever the dim (exporters write INT32_MAX or
#: INT64_MAX for it).
UNBOUNDED = 2**31 - 1


def ints(a: np.ndarray | Sequence[int] | None) -> list[int] | None:
    """An index-like tensor (or None) as a list of Python ints."""
    if a is None:
        return None
    return [int(v) for v in np.asarray(a).reshape(-1)]


def scalar_of(ctx: OpContext, a: np.ndarray, what: str):
    """The single element of a scalar or one-element tensor input, as a Python number."""
    arr = np.asarray(a)
    if arr.size != 1:
        raise ctx.fail(f"{what} must have exactly one element, got shape {list(arr.shape)}")
    return arr.reshape(-1)[0].item()


def norm_axis(ctx: OpContext, axis: int, rank: int, what: str = "axis", extra: int = 0) -> int:
    """`axis` in [0, rank + extra): negative values count from the end. `extra=1` allows the position
    one past the last axis (Unsqueeze, Flatten, OneHot)."""
    return axis_of(ctx, axis, rank + extra, what)


def norm_axes(ctx: OpContext, axes: Iterable[int], rank: int, what: str = "axes") -> list[int]:
    out = [norm_axis(ctx, a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.fail(f"{what} {list(axes)} repeat an axis")
    return out


def tensor(dtype: DType, shape: Iterable[Dim] | None) -> TensorType:
    return TensorType(dtype, None if shape is None else tuple(shape))


def static_length(t: TensorType | None) -> int | None:
    """The element count of a 1-D (or scalar) index-like input if its type fixes it."""
    if t is None or t.shape is None:
        return None
    if len(t.shape) == 0:
        return 1
    return t.shape[0] if len(t.shape) == 1 and isinstance(t.shape[0], int) else None


def require_rank(ctx: OpContext, shape: Shape, lo: int, hi: int | None = None, what: str = "input") -> None:
    """Fail unless a known rank lies in [lo, hi] (hi defaults to lo; -1 means unbounded)."""
    hi = lo if hi is None else hi
    if shape is not None and (len(shape) < lo or (hi >= 0 and len(shape) > hi)):
        want = str(lo) if lo == hi else (f"at least {lo}" if hi < 0 else f"{lo} to {hi}")
        raise ctx.fail(f"{what} must have rank {want}, got rank {len(shape)}")


def require_int(ctx: OpContext, i: int, what: str) -> None:
    t = ctx.in_types[i]
    if t is not None and not t.dtype.is_int:
        raise ctx.fail(f"{what} must be an integer tensor, got {t.dtype}")


# ---- dim arithmetic ------------------------------------------------------------------------------
def dim_prod(dims: Iterable[Dim]) -> Dim:
    """Product of dims: static if all are, the single named dim if the rest multiply to 1."""
    static, dynamic = 1, []
    for d in dims:
        if isinstance(d, int):
            static *= d
        else:
            dynamic.append(d)
    if not dynamic or static == 0:
        return static
    if len(dynamic) == 1 and static == 1:
        return dynamic[0]
    return None


def dim_sum(dims: Iterable[Dim]) -> Dim:
    """Sum of dims: static if all are, the single dynamic dim if the rest are 0."""
    dims = list(dims)
    dynamic = [d for d in dims if not isinstance(d, int)]
    static = sum(d for d in dims if isinstance(d, int))
    if not dynamic:
        return static
    return dynamic[0] if len(dynamic) == 1 and static == 0 else None


def dim_affine(d: Dim, mul: int = 1, add: int = 0, div: int = 1, ceil: bool = False) -> Dim:
    """(d * mul + add) // div (or ceiling division): static when d is, d itself when the map is the
    identity, None otherwise."""
    if isinstance(d, int):
        n = d * mul + add
        return -(-n // div) if ceil else n // div
    return d if (mul, add, div) == (1, 0, 1) else None


def same_dim(ctx: OpContext, dims: Sequence[Dim], what: str) -> Dim:
    """The common value of dims that must be equal: static if any is, else named if any is; fails when
    two static dims differ."""
    static = sorted({d for d in dims if isinstance(d, int)})
    if len(static) > 1:
        raise ctx.fail(f"{what} differ: {static}")
    return static[0] if static else next((d for d in dims if d is not None), None)


def dim_quotient(ctx: OpContext, num: Sequence[Dim] | None, den: Sequence[Dim]) -> Dim:
    """prod(num) / prod(den) with named dims cancelling (what a Reshape -1 stands for). Fails when
    static dims prove the division inexact."""
    if num is None or any(d is None for d in num) or any(d is None for d in den):
        return None
    names = Counter(d for d in num if isinstance(d, str))
    names.subtract(d for d in den if isinstance(d, str))
    if any(c < 0 for c in names.values()):
        return None
    left = [n for n, c in names.items() for _ in range(c)]
    n_static = int(np.prod([d for d in num if isinstance(d, int)], dtype=np.int64))
    d_static = int(np.prod([d for d in den if isinstance(d, int)], dtype=np.int64))
    if d_static == 0:
        raise ctx.fail("cannot infer a -1 dimension when another target dimension is 0")
    if not left:
        if n_static % d_static:
            raise ctx.fail(f"cannot reshape {n_static} elements into a multiple of {d_static}")
        return n_static // d_static
    return left[0] if len(left) == 1 and n_static == d_static else None


def shape_input(ctx: OpContext, i: int, what: str) -> list[int] | None:
    """A 1-D shape-like input (image_shape, output_shape, size, ...) as ints, if known at compile time."""
    v = ctx.value(i)
    if v is not None and v.ndim != 1:
        raise ctx.fail(f"{what} must be a 1-D tensor, got shape {shape_str(v.shape)}")
    return ints(v)


def fresh_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy (movement kernels must not return views of their inputs)."""
    return np.asarray(a).copy()


def same_rank_unknown(t: TensorType) -> list[TensorType]:
    """The output keeps the input's rank but no dim is known."""
    return [tensor(t.dtype, None if t.shape is None else [None] * len(t.shape))]
