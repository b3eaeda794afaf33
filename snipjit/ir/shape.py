"""Shapes with static and dynamic dimensions.

A dimension is an ``int`` (static), a ``str`` (a named dynamic dimension: two dims with the same name are
equal at run time) or ``None`` (dynamic and anonymous, written ``?``). A shape is a tuple of dimensions;
``None`` instead of a tuple means the rank itself is unknown (written ``*``).
"""
from __future__ import annotations

from typing import Iterable, Union

Dim = Union[int, str, None]
Shape = Union[tuple, None]


class ShapeError(ValueError):
    """A shape or broadcast that cannot be valid."""


def make_shape(dims: Iterable | None) -> Shape:
    if dims is None:
        return None
    out = []
    for d in dims:
        if d is None or isinstance(d, str):
            out.append(None if d in (None, "?", "") else d)
        else:
            out.append(int(d))
    return tuple(out)


def is_static(shape: Shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def numel(shape: Shape) -> int | None:
    if not is_static(shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def dim_str(d: Dim) -> str:
    return "?" if d is None else str(d)


def shape_str(shape: Shape) -> str:
    if shape is None:
        return "[*]"
    return "[" + ",".join(dim_str(d) for d in shape) + "]"


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    """The broadcast of two dims (NumPy rules); raises ShapeError when they can never match."""
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise ShapeError(f"dimensions {a} and {b} do not broadcast")
        return a
    if isinstance(a, int):  # b dynamic: at run time it must be a or 1; a is the better guess
        return a
    if isinstance(b, int):
        return b
    if a == b:
        return a
    # two different dynamic dims: the result is one of them (or 1); keep the named one
    return a if a is not None else b


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy/ONNX multidirectional broadcast of several shapes."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        padded = (1,) * (rank - len(s)) + tuple(s)
        out = [broadcast_dim(a, b) for a, b in zip(out, padded)]
    return tuple(out)


def merge_dim(declared: Dim, inferred: Dim) -> Dim:
    """Combine a declared dim with an inferred one, keeping the more precise (raises on conflict)."""
    if declared is None:
        return inferred
    if inferred is None:
        return declared
    if isinstance(declared, int) and isinstance(inferred, int) and declared != inferred:
        raise ShapeError(f"declared dimension {declared} but inferred {inferred}")
    if isinstance(inferred, int):
        return inferred
    return declared


def merge_shapes(declared: Shape, inferred: Shape) -> Shape:
    if declared is None:
        return inferred
    if inferred is None:
        return declared
    if len(declared) != len(inferred):
        raise ShapeError(f"declared rank {len(declared)} but inferred rank {len(inferred)}")
    return tuple(merge_dim(a, b) for a, b in zip(declared, inferred))


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0
