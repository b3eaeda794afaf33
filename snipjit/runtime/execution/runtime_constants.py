"""Runtime constants: inputs the user declared constant, folded on the first run and cached.

The constant-folding passes split the work that depends only on such inputs into a folding function
(`RuntimeFolding.fold`). The first run evaluates it on the given values; the folded tensors are then fed
to every request of the model, never recomputed. A later run with a different value for a constant input
is an error, unless the model was compiled with `refold=True`, which folds again.
"""
from __future__ import annotations

import threading
from typing import Mapping

import numpy as np

from .feeds import FeedError
from ...ops.interpreter import run_graph_reference


class RuntimeConstants:
    def __init__(self, folding, refold: bool = False):
        self.folding = folding
        self.refold = refold
        self._lock = threading.Lock()
        self._values: dict[str, np.ndarray] | None = None   # the constant inputs folded
        self._folded: dict[str, np.ndarray] = {}
        self.folds = 0                                       # how many times the function ran

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.folding.constant_inputs)

    def complete(self, feeds: Mapping[str, object], entry_inputs: set[str]) -> dict[str, object]:
        """The entry function's feeds: the user's, minus constant inputs it does not read, plus the
        folded tensors."""
        missing = [n for n in self.names if n not in feeds]
        if missing:
            raise FeedError(f"constant input(s) {missing} must be given (they are folded on the first run)")
        given = {n: np.asarray(feeds[n]) for n in self.names}
        with self._lock:
            if self._values is None or self._changed(given):
                if self._values is not None and not self.refold:
                    changed = [n for n in self.names if not _same(given[n], self._values[n])]
                    raise FeedError(f"constant input(s) {changed} changed since the first run; compile with "
                                    "refold=True to allow new values")
                fold = self.folding.fold
                outs = run_graph_reference(fold, [given[v.name] for v in fold.inputs])
                self._folded = {v.name: np.ascontiguousarray(o) for v, o in zip(fold.outputs, outs)}
                self._values = {n: a.copy() for n, a in given.items()}
                self.folds += 1
            folded = self._folded
        merged = {k: v for k, v in feeds.items() if k in entry_inputs}
        merged.update(folded)
        return merged

    def _changed(self, given: dict[str, np.ndarray]) -> bool:
        return any(not _same(given[n], self._values[n]) for n in self.names)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True))
