"""The threads a request's kernels run on: the process's pools, or a request's own (`Workers`).

By default every request shares the process's native and Python pools, sized by `default_threads()`. A
model compiled with `num_threads` or `streams` gives each of its requests a `Workers` of its own instead:
while that request binds and runs (`running_on`), `get_native_pool()` and `get_pool()` answer with its
pools, so its launches are prepared for and run on its threads only. Requests of two models with one
thread each then run side by side on two cores, and S streams of T threads each use S × T threads
without taking turns on one pool.
"""
from __future__ import annotations

import threading
from typing import Callable

from ..scoped import ThreadScoped


class Workers:
    """`threads` threads for one request: the calling thread plus pool workers, started on first use by
    the pools' modules (`pool(kind, make)`); a one-thread `Workers` starts none."""

    def __init__(self, threads: int):
        if threads < 1:
            raise ValueError(f"a request needs at least one thread, got {threads}")
        self.threads = threads
        self._pools: dict[str, object] = {}
        self._lock = threading.Lock()

    def pool(self, kind: str, make: Callable[[], object]) -> object:
        """Its pool of `kind` ("native", "python"), made by `make()` the first time (None: none)."""
        with self._lock:
            if kind not in self._pools:
                self._pools[kind] = make()
            return self._pools[kind]

    def existing(self, kind: str) -> object:
        """Its pool of `kind` if one was made (never makes one)."""
        return self._pools.get(kind)

    def close(self) -> None:
        """Stop its pools' threads (they would otherwise idle until the process exits)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for p in pools:
            if hasattr(p, "close"):
                p.close()


running_on: ThreadScoped[Workers] = ThreadScoped()
"""`with running_on(workers):` kernels launched and prepared on this thread inside the block use
`workers` (None: the process's pools)."""
active = running_on.get
