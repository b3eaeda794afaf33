"""Ops that keep every element and change only where it sits: Reshape, Flatten, Squeeze, Unsqueeze,
Transpose, DepthToSpace and SpaceToDepth; Identity, and Dropout (an identity at inference).

Every op follows its latest ONNX opset signature. Reference kernels return fresh arrays (never views of
their inputs), so a caller may write into an output without touching an input.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import boolean
from ..ir.graph import TensorType
from ..ir.shape import Dim, Shape
from ._indexing import (dim_affine, dim_prod, dim_quotient, fresh_copy, ints, norm_axes, require_int, require_rank,
                        scalar_of, static_length, tensor)
from .registry import REQUIRED, Category, OpContext, register

M = Category.MOVEMENT


# ---- Reshape, Flatten, Squeeze, Unsqueeze, Identity ----------------------------------------------
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
    return fresh_copy(data.reshape(_reshape_dims(ctx, data.shape, ints(shape))))


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
    return fresh_copy(x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:])))


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
    return fresh_copy(data.reshape([d for i, d in enumerate(data.shape) if i not in drop]))


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
    return fresh_copy(data.reshape(_unsqueeze_shape(ctx, data.shape, ints(axes))))


def _infer_identity(ctx: OpContext) -> list[TensorType]:
    return [ctx.in_types[0]]


@register("Identity", M, infer=_infer_identity)
def identity(ctx: OpContext, x):
    """A copy of the input."""
    return fresh_copy(x)


# ---- Transpose, DepthToSpace, SpaceToDepth -------------------------------------------------------
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
    return fresh_copy(y).reshape(n, c // (b * b), h * b, w * b)


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
    return fresh_copy(y).reshape(n, c * b * b, h // b, w // b)


# ---- Dropout -------------------------------------------------------------------------------------
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
        out, mask = fresh_copy(data), np.ones(data.shape, dtype=bool)
    else:
        if not 0 <= r < 1:
            raise ctx.fail(f"ratio must lie in [0, 1), got {r}")
        mask = np.random.RandomState(ctx.attrs["seed"]).uniform(0, 1, data.shape) >= r
        out = (data * mask / data.dtype.type(1 - r)).astype(data.dtype)
    return (out, mask) if len(ctx.out_types) > 1 else out
