"""Normalisations: Softmax, LogSoftmax, Hardmax and LpNormalization along one axis; LayerNormalization,
BatchNormalization, InstanceNormalization, GroupNormalization, LRN and MeanVarianceNormalization.

Inputs are floats. Half-precision inputs are computed in f32; LayerNormalization and
GroupNormalization compute in their `stash_type` (an ONNX element type, f32 by default).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..ir.dtypes import DType, dtype as to_dtype
from ..ir.graph import TensorType
from ..ir.shape import Shape, shape_str
from .common import (FLOATS, axis_of, check_broadcast, check_dtypes, compute_dtype, one_of, unidirectional,
                     upcast)
from .reduce import mean_of
from .registry import REQUIRED, Category, OpContext, register

Axes = tuple[int, ...]


def _moments(x: np.ndarray, axes: Axes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, x - mean and (biased) variance of x over axes (statistics kept as size-1 dims), by the
    corrected two-pass algorithm, as the generated kernels compute them: c = x - m for the rounded
    mean m, d = mean(c) the offset m left, then c - d and mean(c*c) - d*d. A constant x centres to
    exact zeros with zero variance; a mean that dwarfs the spread costs no precision."""
    m = mean_of(x, axes, keepdims=True)
    c = x - m
    d = mean_of(c, axes, keepdims=True)
    return m + d, c - d, np.maximum(mean_of(np.square(c), axes, keepdims=True) - np.square(d), 0)


def _stash(ctx: OpContext) -> DType:
    """The dtype named by the stash_type attribute, which must be a float type."""
    try:
        dt = to_dtype(ctx.attrs["stash_type"])
    except TypeError:
        dt = None
    if dt not in FLOATS:
        raise ctx.fail(f"stash_type={ctx.attrs['stash_type']!r} is not a floating-point element type")
    return dt


def _require_rank(ctx: OpContext, shape: Shape | tuple, least: int) -> None:
    if shape is not None and len(shape) < least:
        raise ctx.fail(f"the input needs rank {least} or more, got shape {shape_str(shape)}")


# ---- along one axis ------------------------------------------------------------------------------
def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    """x minus its maximum along axis, so that exp cannot overflow."""
    return x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(_shifted(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    s = _shifted(x, axis)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    """1 at the first maximum along axis, 0 elsewhere."""
    y = np.zeros_like(x)
    if x.shape[axis]:
        np.put_along_axis(y, np.argmax(x, axis=axis, keepdims=True), 1, axis=axis)
    return y


def _lp_normalize(x: np.ndarray, axis: int, p: int) -> np.ndarray:
    """x divided by its L1 or L2 norm along axis; where the norm is 0 the result is 0."""
    norm = np.sum(np.abs(x) ** p, axis=axis, keepdims=True) ** (1 / p)
    return np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))


def _along_axis(name: str, fn: Callable[..., np.ndarray], attrs: dict | None = None,
                check: Callable[[OpContext], None] | None = None) -> None:
    """Register an op computing `fn(x, axis, **other_attrs)` along its `axis` attribute."""
    attrs = {"axis": -1, **(attrs or {})}

    def infer(ctx: OpContext) -> list[TensorType]:
        check_dtypes(ctx, FLOATS)
        if check is not None:
            check(ctx)
        x = ctx.in_types[0]
        if x.shape is not None:
            axis_of(ctx, ctx.attrs["axis"], len(x.shape))
        return [x]

    def kernel(ctx: OpContext, x):
        if check is not None:
            check(ctx)
        axis = axis_of(ctx, ctx.attrs["axis"], x.ndim)
        others = {k: v for k, v in ctx.attrs.items() if k != "axis"}
        with np.errstate(all="ignore"):
            return fn(upcast(x), axis, **others).astype(x.dtype)
    kernel.__doc__ = fn.__doc__
    register(name, Category.REDUCTION, infer=infer, attrs=attrs)(kernel)


_along_axis("Softmax", _softmax)
_along_axis("LogSoftmax", _log_softmax)
_along_axis("Hardmax", _hardmax)
_along_axis("LpNormalization", _lp_normalize, {"p": 2}, check=one_of("p", (1, 2)))


# ---- LayerNormalization --------------------------------------------------------------------------
def _infer_layer_norm(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x = ctx.in_types[0]
    stash = _stash(ctx)
    for i, what in ((1, "Scale"), (2, "B")):
        if ctx.has_input(i):
            t = ctx.in_types[i]
            if t.dtype != x.dtype:
                raise ctx.fail(f"{what} has dtype {t.dtype} but X has {x.dtype}")
            unidirectional(ctx, x.shape, t.shape, what)
    if x.shape is None:
        return [x, TensorType(stash, None), TensorType(stash, None)]
    axis = axis_of(ctx, ctx.attrs["axis"], len(x.shape))
    stats = TensorType(stash, tuple(x.shape[:axis]) + (1,) * (len(x.shape) - axis))
    return [x, stats, stats]


@register("LayerNormalization", Category.REDUCTION, infer=_infer_layer_norm, inputs=(2, 3), outputs=(1, 3),
          attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1})
def layer_normalization(ctx: OpContext, x, scale, bias=None):
    """Normalise x over the axes from `axis` on, then scale and shift; also returns the Mean and
    InvStdDev it used (in the stash type, reduced dims kept as 1)."""
    axis = axis_of(ctx, ctx.attrs["axis"], x.ndim)
    if check_broadcast(ctx, x, scale, bias) != x.shape:
        raise ctx.fail(f"Scale {shape_str(scale.shape)} and B must broadcast to X {shape_str(x.shape)}")
    stash = _stash(ctx).np
    xs = x.astype(compute_dtype(stash))
    with np.errstate(all="ignore"):
        mean, centered, var = _moments(xs, tuple(range(axis, x.ndim)))
        inv_std = 1 / np.sqrt(var + ctx.attrs["epsilon"])
        y = centered * inv_std * upcast(scale)
        if bias is not None:
            y = y + upcast(bias)
    return y.astype(x.dtype), mean.astype(stash), inv_std.astype(stash)


# ---- per-channel normalisations: BatchNormalization, InstanceNormalization, GroupNormalization ----
def _infer_channel_params(ctx: OpContext, params: dict[int, str], min_rank: int = 2) -> TensorType:
    """Check that X (input 0) is a float tensor of rank `min_rank` or more whose inputs `params` are
    1-D with one value per channel (dim 1 of X); returns X's type."""
    check_dtypes(ctx, FLOATS)
    x = ctx.in_types[0]
    _require_rank(ctx, x.shape, min_rank)
    channels = x.shape[1] if x.shape is not None else None
    for i, what in params.items():
        shape = ctx.in_types[i].shape
        if shape is None:
            continue
        if len(shape) != 1:
            raise ctx.fail(f"{what} must be 1-D (one value per channel), got shape {shape_str(shape)}")
        if isinstance(shape[0], int) and isinstance(channels, int) and shape[0] != channels:
            raise ctx.fail(f"{what} has {shape[0]} values but X has {channels} channels")
    return x


def _channel_params(ctx: OpContext, x: np.ndarray, min_rank: int, **params: np.ndarray) -> list[np.ndarray]:
    """Run-time counterpart of `_infer_channel_params`: the params in their compute dtype, shaped
    (C, 1, ..., 1) to broadcast over x's channel axis and the ones after it."""
    _require_rank(ctx, x.shape, min_rank)
    out = []
    for what, p in params.items():
        if p.shape != (x.shape[1],):
            raise ctx.fail(f"{what} must have shape [{x.shape[1]}] (one value per channel), "
                           f"got {shape_str(p.shape)}")
        out.append(upcast(p).reshape((-1,) + (1,) * (x.ndim - 2)))
    return out


def _infer_batch_norm(ctx: OpContext) -> list[TensorType]:
    x = _infer_channel_params(ctx, {1: "scale", 2: "B", 3: "input_mean", 4: "input_var"})
    one_of("training_mode", (0, 1))(ctx)
    for a, b in ((1, 2), (3, 4)):
        if ctx.in_types[a].dtype != ctx.in_types[b].dtype:
            raise ctx.fail(f"inputs {a} and {b} must have one dtype, got {ctx.in_types[a].dtype} and "
                           f"{ctx.in_types[b].dtype}")
    if not ctx.attrs["training_mode"] and len(ctx.out_types) > 1:
        raise ctx.fail("outputs running_mean and running_var exist only with training_mode=1")
    return [x, ctx.in_types[3], ctx.in_types[4]]


@register("BatchNormalization", Category.REDUCTION, infer=_infer_batch_norm, inputs=5, outputs=(1, 3),
          attrs={"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0})
def batch_normalization(ctx: OpContext, x, scale, bias, mean, var):
    """scale * (x - mean) / sqrt(var + epsilon) + B per channel (axis 1). With training_mode=1 the
    mean and biased variance of this batch are used, and running_mean/running_var are returned:
    input_mean * momentum + batch_mean * (1 - momentum), and the same for the variance."""
    s, b, m, v = _channel_params(ctx, x, 2, scale=scale, B=bias, input_mean=mean, input_var=var)
    xc = upcast(x)
    with np.errstate(all="ignore"):
        if not ctx.attrs["training_mode"]:
            return (s * (xc - m) / np.sqrt(v + ctx.attrs["epsilon"]) + b).astype(x.dtype)
        batch_mean, centered, batch_var = _moments(xc, (0,) + tuple(range(2, x.ndim)))
        y = s * centered / np.sqrt(batch_var + ctx.attrs["epsilon"]) + b
        momentum = ctx.attrs["momentum"]
        running_mean = m * momentum + batch_mean.reshape(m.shape) * (1 - momentum)
        running_var = v * momentum + batch_var.reshape(v.shape) * (1 - momentum)
    return (y.astype(x.dtype), running_mean.reshape(-1).astype(mean.dtype),
            running_var.reshape(-1).astype(var.dtype))


@register("InstanceNormalization", Category.REDUCTION, inputs=3, attrs={"epsilon": 1e-5},
          infer=lambda ctx: [_infer_channel_params(ctx, {1: "scale", 2: "B"}, min_rank=3)])
def instance_normalization(ctx: OpContext, x, scale, bias):
    """Normalise each channel of each sample over its spatial dims, then scale and shift per channel."""
    s, b = _channel_params(ctx, x, 3, scale=scale, B=bias)
    xc = upcast(x)
    with np.errstate(all="ignore"):
        _, centered, var = _moments(xc, tuple(range(2, x.ndim)))
        return (s * centered / np.sqrt(var + ctx.attrs["epsilon"]) + b).astype(x.dtype)


def _check_groups(ctx: OpContext, channels) -> None:
    groups = ctx.attrs["num_groups"]
    if not isinstance(groups, int) or groups <= 0:
        raise ctx.fail(f"num_groups={groups!r} must be a positive integer")
    if isinstance(channels, int) and channels % groups:
        raise ctx.fail(f"{channels} channels do not split into num_groups={groups} groups")


def _infer_group_norm(ctx: OpContext) -> list[TensorType]:
    x = _infer_channel_params(ctx, {1: "scale", 2: "bias"})
    _stash(ctx)
    _check_groups(ctx, x.shape[1] if x.shape is not None else None)
    return [x]


@register("GroupNormalization", Category.REDUCTION, infer=_infer_group_norm, inputs=3,
          attrs={"num_groups": REQUIRED, "epsilon": 1e-5, "stash_type": 1})
def group_normalization(ctx: OpContext, x, scale, bias):
    """Split the channels into num_groups groups, normalise each group of each sample over its channels
    and spatial dims (in the stash type), then scale and shift per channel (latest ONNX: scale and bias
    have one value per channel)."""
    s, b = _channel_params(ctx, x, 2, scale=scale, bias=bias)
    _check_groups(ctx, x.shape[1])
    groups = ctx.attrs["num_groups"]
    grouped = x.astype(compute_dtype(_stash(ctx).np))
    grouped = grouped.reshape(x.shape[0], groups, math.prod(x.shape[1:]) // groups)
    with np.errstate(all="ignore"):
        _, centered, var = _moments(grouped, (2,))
        normalized = (centered / np.sqrt(var + ctx.attrs["epsilon"])).reshape(x.shape)
        return (normalized * s + b).astype(x.dtype)


# ---- LRN and MeanVarianceNormalization -----------------------------------------------------------
def _check_lrn(ctx: OpContext) -> None:
    if not isinstance(ctx.attrs["size"], int) or ctx.attrs["size"] <= 0:
        raise ctx.fail(f"size={ctx.attrs['size']!r} must be a positive integer")


def _infer_lrn(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    _check_lrn(ctx)
    _require_rank(ctx, ctx.in_types[0].shape, 2)
    return [ctx.in_types[0]]


@register("LRN", Category.REDUCTION, infer=_infer_lrn,
          attrs={"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0})
def lrn(ctx: OpContext, x):
    """x / (bias + alpha / size * square_sum) ** beta, where square_sum sums x**2 over a window of
    `size` channels around each channel c: from c - floor((size-1)/2) to c + ceil((size-1)/2)."""
    _check_lrn(ctx)
    _require_rank(ctx, x.shape, 2)
    size, channels = ctx.attrs["size"], x.shape[1]
    before = (size - 1) // 2
    xc = upcast(x)
    padded = np.pad(np.square(xc), [(0, 0), (before, size - 1 - before)] + [(0, 0)] * (x.ndim - 2))
    square_sum = sum(padded[:, k:k + channels] for k in range(size))
    with np.errstate(all="ignore"):
        y = xc / (ctx.attrs["bias"] + ctx.attrs["alpha"] / size * square_sum) ** ctx.attrs["beta"]
    return y.astype(x.dtype)


def _mvn_axes(ctx: OpContext, rank: int) -> Axes:
    axes = tuple(axis_of(ctx, a, rank, "axes entry") for a in ctx.attrs["axes"])
    if len(set(axes)) != len(axes):
        raise ctx.fail(f"axes {list(ctx.attrs['axes'])} repeat an axis")
    return axes


def _infer_mvn(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x = ctx.in_types[0]
    if x.shape is not None:
        _mvn_axes(ctx, len(x.shape))
    return [x]


@register("MeanVarianceNormalization", Category.REDUCTION, infer=_infer_mvn, attrs={"axes": [0, 2, 3]})
def mean_variance_normalization(ctx: OpContext, x):
    """(x - mean) / (std + 1e-9), with mean and (biased) std over `axes`."""
    xc = upcast(x)
    with np.errstate(all="ignore"):
        _, centered, var = _moments(xc, _mvn_axes(ctx, x.ndim))
        return (centered / (np.sqrt(var) + 1e-9)).astype(x.dtype)
