"""Checking user feeds against a graph's inputs, binding dynamic dims to sizes."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ...ir.dtypes import dtype as to_dtype
from ...ir.graph import Value
from ...ir.shape import shape_str


class FeedError(ValueError):
    """A feed has the wrong name, dtype or shape; the message names the input and what was expected."""


def check_feeds(inputs: Sequence[Value], feeds: Mapping[str, object]) -> tuple[list[np.ndarray], dict[str, int]]:
    """Return the feed arrays in input order and the sizes bound to named dims."""
    expected = {v.name for v in inputs}
    unknown = [k for k in feeds if k not in expected]
    if unknown:
        raise FeedError(f"unknown input(s) {unknown}; the model's inputs are {sorted(expected)}")
    arrays: list[np.ndarray] = []
    dims: dict[str, int] = {}
    for v in inputs:
        if v.name not in feeds:
            raise FeedError(f"input '{v.name}' ({v.type}) is missing")
        arr = feeds[v.name]
        if not isinstance(arr, np.ndarray):
            arr = np.asarray(arr)
        want = v.type.dtype
        try:
            got = to_dtype(arr.dtype)
        except TypeError:
            got = None
        if got != want:
            raise FeedError(f"input '{v.name}' must have dtype {want} (numpy {want.np}), got {arr.dtype}")
        shape = v.type.shape
        if shape is not None:
            if arr.ndim != len(shape):
                raise FeedError(f"input '{v.name}' must have shape {shape_str(shape)} (rank {len(shape)}), "
                                f"got {list(arr.shape)}")
            for axis, (d, n) in enumerate(zip(shape, arr.shape)):
                if isinstance(d, int) and d != n:
                    raise FeedError(f"input '{v.name}' must have shape {shape_str(shape)}, got {list(arr.shape)} "
                                    f"(axis {axis} must be {d})")
                if isinstance(d, str):
                    if dims.setdefault(d, n) != n:
                        raise FeedError(f"input '{v.name}' axis {axis} is dim '{d}' = {n}, but another input "
                                        f"bound '{d}' = {dims[d]}")
        arrays.append(arr)
    return arrays, dims


class FeedChecker:
    """`check_feeds` for one graph's inputs, run after run: a feed whose arrays have the dtypes and shapes
    of an earlier accepted feed is accepted at once (a few lookups instead of the full check)."""

    MAX_SIGNATURES = 64

    def __init__(self, inputs: Sequence[Value]):
        self.inputs = list(inputs)
        self.names = [v.name for v in self.inputs]
        self._accepted: set[tuple] = set()

    def __call__(self, feeds: Mapping[str, object]) -> list[np.ndarray]:
        signature = self._signature(feeds)
        if signature is not None and signature in self._accepted:
            return [feeds[n] for n in self.names]
        arrays, _ = check_feeds(self.inputs, feeds)
        if signature is not None and len(self._accepted) < self.MAX_SIGNATURES:
            self._accepted.add(signature)
        return arrays

    def _signature(self, feeds: Mapping[str, object]) -> tuple | None:
        """The dtypes and shapes of the feed when it is exactly one ndarray per input, else None."""
        if len(feeds) != len(self.names):
            return None
        signature = []
        for n in self.names:
            a = feeds.get(n)
            if type(a) is not np.ndarray:
                return None
            signature.append((a.dtype, a.shape))
        return tuple(signature)
