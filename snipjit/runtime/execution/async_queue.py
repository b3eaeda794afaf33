"""Inferences in flight: `AsyncQueue` runs up to `jobs` of them at once, each on a stream of its own.

In the spirit of OpenVINO's `AsyncInferQueue`: `start_async(feeds, userdata)` returns at once with a
`concurrent.futures.Future`; a job thread picks the inference up and runs it on its own request (its
arena and its threads), then calls `callback(outputs, userdata)`. `wait_all()` waits for everything
started and raises the first error any inference or callback met. The feeds must stay unchanged until
their inference is done.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Mapping

import numpy as np

from .request import Request

Callback = Callable[[list[np.ndarray], Any], None]


class AsyncQueue:
    def __init__(self, make_request: Callable[[], Request], jobs: int, callback: Callback | None = None):
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"an async queue needs at least one job, got {jobs!r}")
        self.jobs = jobs
        self.callback = callback
        self._make_request = make_request
        self._local = threading.local()
        self._executor = ThreadPoolExecutor(jobs, thread_name_prefix="snipjit-stream")
        self._pending: list[Future] = []   # in the order started
        self._lock = threading.Lock()

    def start_async(self, feeds: Mapping[str, np.ndarray], userdata: Any = None,
                    callback: Callback | None = None) -> Future:
        """Start an inference; `callback` (default: the queue's) gets its outputs and `userdata`."""
        future = self._executor.submit(self._infer, dict(feeds), userdata, callback or self.callback)
        with self._lock:
            self._pending.append(future)
        return future

    def _infer(self, feeds: dict[str, np.ndarray], userdata: Any, callback: Callback | None) -> list[np.ndarray]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._make_request()
        outputs = request.run(feeds)
        if callback is not None:
            callback(outputs, userdata)
        return outputs

    def is_ready(self) -> bool:
        """Whether a job is free to start an inference now."""
        with self._lock:
            self._pending = [f for f in self._pending if not f.done() or f.exception() is not None]
            return sum(not f.done() for f in self._pending) < self.jobs

    def wait_all(self) -> None:
        """Wait for every inference started so far; raise the error of the first one started that failed."""
        with self._lock:
            pending, self._pending = self._pending, []
        wait(pending)
        for future in pending:
            if future.exception() is not None:
                raise future.exception()

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> "AsyncQueue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
