"""The Resize op: nearest, linear or cubic resampling of any axes, with every ONNX coordinate mode,
antialiasing and keep_aspect_ratio_policy.

The filters are separable: each resized axis is resampled in turn by a dense interpolation matrix built
from the filter (the cubic one is the shared Keys kernel of `interpolation`). Upsample is not registered:
the ONNX frontend rewrites it into Resize.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..ir.graph import TensorType
from ..ir.shape import Dim
from ._indexing import fresh_copy, ints, norm_axes, static_length, tensor
from .interpolation import keys_cubic
from .registry import Category, OpContext, register

M = Category.MOVEMENT


# ---- Resize --------------------------------------------------------------------------------------
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
    w = keys_cubic(dist, a["cubic_coeff_a"]) if cubic else np.maximum(0.0, 1 - np.abs(dist))
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
        return fresh_copy(y) if y is x else y
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        y = np.clip(np.round(y), info.min, info.max)
    return y.astype(x.dtype)
