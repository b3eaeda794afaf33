"""How a compiled model runs: its thread count, its streams and the hint that chose them.

A stream is a request (`Request`) with threads of its own. Latency (the default) runs one inference at a
time on every thread; throughput runs several inferences at once, each on fewer threads, which keeps
every core busy through the steps that do not split well (small products, Python between kernels).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..parallel.thread_count import default_threads, thread_limits

HINTS = ("latency", "throughput")


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


@dataclass(frozen=True)
class ExecutionSettings:
    num_threads: int           # threads the model may use in all
    streams: int               # inferences it is tuned to run at once
    hint: str                  # "latency" or "throughput"
    own_threads: bool          # each request starts threads of its own (else the process's pools)
    requested: dict            # what was asked for (None: the default), kept when the model is saved

    @property
    def threads_per_stream(self) -> int:
        return max(1, self.num_threads // self.streams)

    @staticmethod
    def from_options(num_threads: int | None = None, streams: int | None = None,
                     hint: str | None = None) -> "ExecutionSettings":
        """The settings `snipjit.compile` was given: `num_threads` defaults to `default_threads()`;
        `streams` to 1 with the latency hint and to one per thread with the throughput hint."""
        if hint is not None and hint not in HINTS:
            raise ValueError(f"hint must be one of {HINTS}, got {hint!r}")
        streams_given, hint_given = streams, hint
        threads = default_threads() if num_threads is None else _count("num_threads", num_threads)
        if streams is None:
            streams = threads if hint == "throughput" else 1
        streams = _count("streams", streams)
        if hint is None:
            hint = "throughput" if streams > 1 else "latency"
        requested = {"num_threads": num_threads, "streams": streams_given, "hint": hint_given}
        own = num_threads is not None or streams > 1
        return ExecutionSettings(threads, streams, hint, own, requested)

    def describe(self) -> str:
        limits = ", ".join(f"{k} {'-' if v is None else v}" for k, v in thread_limits().items())
        pools = "threads of its own" if self.own_threads else "the process's thread pools"
        return (f"{self.hint} hint: {self.num_threads} threads, {self.streams} stream(s) of "
                f"{self.threads_per_stream} thread(s), each request on {pools} (default threads are the "
                f"smallest of: {limits})")
