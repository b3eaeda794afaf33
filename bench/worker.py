"""The process each engine of the suite runs in, and the parent's end of its pipe.

Every engine gets its own spawned process, so that the thread pools of different engines do not
disturb each other and one engine's crash does not end the run. The worker loads its engine when told
"load" (timing the loading and the first run apart), then times batches of runs when told "time N".
The thread-count variables are set before the process starts: thread pools read them when their
library loads.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import multiprocessing
import os
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from snipjit.benchmark import EngineUnavailable, Feeds, Opened, Runner

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


@dataclass
class Engine:
    """How a worker process loads one engine.

    `loader` names a function "module:function" called as loader(job, feeds) -> Opened; the modules
    in `requires` are imported first, outside the load timing.
    """

    name: str
    loader: str
    requires: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    compare: bool = True  # whether its outputs are checked against the reference


@dataclass
class Job:
    """What a worker process is told: the engine, the model file and where the arrays go."""

    engine: Engine
    model: str | None
    input_names: list[str]
    feeds_path: str
    outputs_path: str
    threads: int


@dataclass
class LoadReport:
    """A worker's answer to "load": the times of loading and of the first run, one warm run's."""

    load_s: float
    first_run_s: float
    iteration_s: float
    info: str


class WorkerFailed(Exception):
    """The engine was skipped or failed in its worker (status "skipped" or "failed"), or the worker died."""

    def __init__(self, status: str, note: str):
        super().__init__(note)
        self.status, self.note = status, note


def read_arrays(path: str) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def time_iterations(run: Runner, feeds: Feeds, n: int) -> list[float]:
    """The time of each of n runs, with the garbage collector paused."""
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(n):
            start = time.perf_counter()
            run(feeds)
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return times


def _resolve(reference: str) -> Callable[..., Opened]:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _load(job: Job, warmup_s: float) -> tuple[Runner, Feeds, LoadReport]:
    for module in job.engine.requires:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise EngineUnavailable(f"{module} is not installed ({error})") from error
    feeds = dict(zip(job.input_names, read_arrays(job.feeds_path)))
    loader = _resolve(job.engine.loader)
    start = time.perf_counter()
    loaded = loader(job, feeds)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    outputs = loaded.run(feeds)
    first_run_s = time.perf_counter() - start
    np.savez(job.outputs_path, *[np.asarray(o) for o in outputs])
    warm = time_iterations(loaded.run, feeds, 1)
    while sum(warm) < warmup_s and len(warm) < 50:
        warm += time_iterations(loaded.run, feeds, 1)
    return loaded.run, feeds, LoadReport(load_s, first_run_s, statistics.median(warm), loaded.info)


def _serve(conn, job: Job, warmup_s: float) -> None:
    run, feeds = None, None
    while True:
        command, *args = conn.recv()
        if command == "stop":
            return
        try:
            if command == "load":
                run, feeds, reply = _load(job, warmup_s)
            else:
                reply = time_iterations(run, feeds, args[0])
            conn.send(("ok", reply))
        except EngineUnavailable as error:
            conn.send(("skipped", str(error)))
        except Exception as error:  # reported in the table; the other engines go on
            conn.send(("failed", _describe_error(error)))


def _describe_error(error: Exception) -> str:
    where = traceback.extract_tb(error.__traceback__)[-1]
    message = (str(error).splitlines() or [""])[0][:300]
    return f"{type(error).__name__}: {message} (at {Path(where.filename).name}:{where.lineno})"


@contextlib.contextmanager
def _thread_env(threads: int) -> Iterator[None]:
    """Children inherit the environment at start."""
    saved = {name: os.environ.get(name) for name in THREAD_ENV}
    os.environ.update({name: str(threads) for name in THREAD_ENV})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Worker:
    """One engine's process and the parent's end of its pipe."""

    def __init__(self, job: Job, warmup_s: float):
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        with _thread_env(job.threads):
            self.process = context.Process(target=_serve, args=(child, job, warmup_s), daemon=True)
            self.process.start()
        child.close()

    def load(self, timeout_s: float) -> LoadReport:
        return self._call(("load",), timeout_s)

    def time(self, runs: int, timeout_s: float) -> list[float]:
        return self._call(("time", runs), timeout_s)

    def _call(self, message: tuple, timeout_s: float) -> Any:
        try:
            self.conn.send(message)
            if not self.conn.poll(timeout_s):
                self.close()
                raise WorkerFailed("failed", f"no answer within {timeout_s:.0f} s")
            status, payload = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self.process.join(5)
            raise WorkerFailed("failed", f"worker died (exit code {self.process.exitcode})")
        if status != "ok":
            raise WorkerFailed(status, payload)
        return payload

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
