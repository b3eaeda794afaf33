"""Ops that cut, join, pad or repeat tensors along axes: Slice, Concat, Split, Pad, Expand and Tile.

Every op follows its latest ONNX opset signature. Reference kernels return fresh arrays (never views of
their inputs); Slice and Expand register their view form too, for runtimes that copy into their own memory.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import TensorType
from ..ir.shape import Dim, broadcast_shapes
from ._indexing import (UNBOUNDED, dim_affine, dim_sum, ints, norm_axes, norm_axis, require_int, same_dim,
                        same_rank_unknown, scalar_of, static_length, tensor)
from .common import one_of
from .registry import REQUIRED, Category, OpContext, register

M = Category.MOVEMENT


# ---- Concat, Split -------------------------------------------------------------------------------
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


@register("Split", M, infer=_infer_split, attrs={"axis": 0, "num_outputs": None}, inputs=(1, 2), outputs=(1, -1),
          returns_view=True)
def split(ctx: OpContext, x, split=None):
    """Cut `x` along `axis` into parts of the given sizes (or equal parts, the last one smaller)."""
    axis = norm_axis(ctx, ctx.attrs["axis"], x.ndim)
    sizes = _split_sizes(ctx, x.shape[axis], ints(split), max(1, len(ctx.out_types)))
    bounds = np.cumsum([0] + sizes)
    return tuple(x[(slice(None),) * axis + (slice(a, b),)] for a, b in zip(bounds[:-1], bounds[1:]))


# ---- Slice ---------------------------------------------------------------------------------------
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
        return same_rank_unknown(t)
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


# ---- Expand, Tile, Pad ---------------------------------------------------------------------------
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
        return same_rank_unknown(t)
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
        return same_rank_unknown(t)
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
