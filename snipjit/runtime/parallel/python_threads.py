"""A persistent pool of worker threads for kernels that release the GIL (ctypes calls do).

`parallel_for(fn, total)` splits [0, total) into one contiguous chunk per thread; the caller runs the
first chunk itself. Threads are created once, on first use, and live as long as the process.
"""
from __future__ import annotations

import threading
from typing import Callable

from .thread_count import default_threads
from .workers import active


class ThreadPool:
    def __init__(self, threads: int):
        self.threads = threads
        self._lock = threading.Lock()          # one parallel_for at a time uses the workers
        self._work: list[tuple[Callable, int, int] | None] = [None] * threads
        self._start = [threading.Event() for _ in range(threads)]
        self._done = [threading.Event() for _ in range(threads)]
        self._errors: list[BaseException | None] = [None] * threads
        self._stop = False
        for i in range(1, threads):
            threading.Thread(target=self._worker, args=(i,), daemon=True, name=f"snipjit-worker-{i}").start()

    def _worker(self, i: int) -> None:
        from .blas_threads import single_threaded_here
        single_threaded_here()   # products are split over this pool, each piece on one BLAS thread
        while True:
            self._start[i].wait()
            self._start[i].clear()
            if self._stop:
                return
            fn, lo, hi = self._work[i]
            try:
                fn(lo, hi)
            except BaseException as e:  # reported to the caller
                self._errors[i] = e
            self._done[i].set()

    def close(self) -> None:
        """Let the workers return (a request's own pool, when the request goes)."""
        with self._lock:
            self._stop = True
            for event in self._start[1:]:
                event.set()

    def parallel_for(self, fn: Callable[[int, int], None], total: int) -> None:
        n = min(self.threads, total)
        if n <= 1 or self._stop or not self._lock.acquire(blocking=False):
            fn(0, total)   # tiny work, one thread, or the workers are busy with another request
            return
        started = 0
        from .native_threads import existing_native_pool
        native = existing_native_pool()
        if native is not None:
            native.park(True)   # its idle workers would spin on the cores these threads need
        try:
            bounds = [total * k // n for k in range(n + 1)]
            for i in range(1, n):
                self._work[i] = (fn, bounds[i], bounds[i + 1])
                self._errors[i] = None
                self._done[i].clear()
                self._start[i].set()
                started = i
            fn(bounds[0], bounds[1])
        finally:
            for i in range(1, started + 1):   # even when our own chunk failed: the workers finish first
                self._done[i].wait()
            if native is not None:
                native.park(False)
            self._lock.release()
        for i in range(1, n):
            if self._errors[i] is not None:
                raise self._errors[i]


_pool: ThreadPool | None = None
_pool_lock = threading.Lock()


def get_pool() -> ThreadPool:
    """The Python pool of the request running on this thread (`workers.running_on`), else the process's."""
    global _pool
    own = active()
    if own is not None:
        return own.pool("python", lambda: ThreadPool(own.threads))
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPool(default_threads())
        return _pool
