"""What `snipjit bench` measures and how: the settings of a run, concurrent streams of inferences, latency
percentiles, snipjit's cold and warm compile times, and the machine the figures come from.

An engine's inferences run in bursts: one or more streams, each running inferences back to back until a
deadline. Latency mode is one stream; throughput mode is S streams at once (threads with a request each,
or an engine's own asynchronous queue), and its figure is inferences per second of wall time.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

Feeds = dict[str, np.ndarray]
Runner = Callable[[Feeds], Sequence[np.ndarray]]
MODES = ("latency", "throughput")


def usable_cores() -> int:
    """The default thread count: snipjit's own (the affinity mask, the cgroup CPU quota, OMP_NUM_THREADS,
    SNIPJIT_NUM_THREADS), which every engine then gets."""
    from .runtime.parallel.thread_count import default_threads
    return default_threads()


@dataclass(frozen=True)
class Settings:
    """How a comparison runs: `seconds` of measured inferences per engine, split over `rounds` turns in
    which the engines alternate; `batch` only scales samples per second."""

    mode: str = "latency"
    streams: int = 1
    threads: int = 1
    seconds: float = 2.0     # per engine
    rounds: int = 5
    batch: int = 1
    settle_s: float = 0.05   # pause after each engine's turn, so that its spinning threads go idle

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose {' or '.join(MODES)}")
        if self.streams < 1:
            raise ValueError(f"streams must be at least 1, got {self.streams}")
        if self.mode == "latency" and self.streams != 1:
            raise ValueError(f"latency mode runs one stream, got {self.streams}; use throughput mode for more")
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")
        if not self.seconds > 0:
            raise ValueError(f"the measured time must be positive, got {self.seconds} s")
        if self.rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {self.rounds}")
        if self.batch < 1:
            raise ValueError(f"batch must be at least 1, got {self.batch}")


@dataclass
class Burst:
    """Inferences run back to back by one or more streams: each one's latency, and the wall time from the
    start to the end of the last."""

    latencies_s: list[float]
    wall_s: float


BurstRunner = Callable[[Feeds, float], Burst]


def back_to_back(run: Runner, feeds: Feeds, seconds: float) -> Burst:
    """One stream in the calling thread, at least one inference."""
    latencies = []
    start = now = time.perf_counter()
    deadline = start + seconds
    while not latencies or now < deadline:
        before = now
        run(feeds)
        now = time.perf_counter()
        latencies.append(now - before)
    return Burst(latencies, now - start)


def threaded(runners: Sequence[Runner], feeds: Feeds, seconds: float) -> Burst:
    """One thread per runner, all started together, each running inferences back to back (at least one)
    until the deadline; an exception in any of them is raised here once all have stopped."""
    go = threading.Event()
    bursts: list[Burst | None] = [None] * len(runners)
    errors: list[BaseException] = []
    deadline = 0.0

    def stream(index: int) -> None:
        go.wait()
        try:
            bursts[index] = back_to_back(runners[index], feeds, deadline - time.perf_counter())
        except BaseException as error:  # handed to the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(len(runners))]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    deadline = start + seconds
    go.set()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    return Burst([s for b in bursts if b for s in b.latencies_s], wall)


def async_queue(queue, jobs: int, feeds: Feeds, seconds: float) -> Burst:
    """An OpenVINO AsyncInferQueue of `jobs` requests kept full until the deadline (at least one
    inference per job); latencies are the requests' own, which exclude the wait for a free one."""
    latencies: list[float] = []
    queue.set_callback(lambda request, _: latencies.append(request.latency / 1e3))  # ms
    started = 0
    start = time.perf_counter()
    deadline = start + seconds
    while started < jobs or time.perf_counter() < deadline:
        queue.start_async(feeds, share_inputs=True)
        started += 1
    queue.wait_all()
    return Burst(latencies, time.perf_counter() - start)


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles (linear interpolation), extremes and mean of a set of latencies, in seconds."""

    p50: float
    p90: float
    p99: float
    min: float
    max: float
    mean: float

    @staticmethod
    def of(samples_s: Sequence[float]) -> LatencySummary:
        a = np.asarray(samples_s, np.float64)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return LatencySummary(float(p50), float(p90), float(p99), float(a.min()), float(a.max()), float(a.mean()))

    def milliseconds(self) -> dict[str, float]:
        return {name: round(value * 1e3, 6) for name, value in vars(self).items()}


@dataclass(frozen=True)
class Startup:
    """A fresh process's snipjit.compile and the first inference after it (import excluded)."""

    compile_s: float
    first_inference_s: float


@dataclass(frozen=True)
class StartupTimes:
    """snipjit's startup in fresh processes: cold with an empty cache directory, then warm with the same
    directory, its disk caches (compiled graph, kernels) filled by the cold one."""

    cold: Startup | None
    warm: Startup | None
    note: str = ""

    HOW = "each in a fresh process, import excluded; cold: empty SNIPJIT_CACHE_DIR; warm: the same, disk caches hot"


_STARTUP_CHILD = """
import json, sys, time
import numpy as np
import snipjit
feeds = dict(np.load(sys.argv[3]))
start = time.perf_counter()
compiled = snipjit.compile(sys.argv[1], **json.loads(sys.argv[2]))
compiled_at = time.perf_counter()
compiled.run(feeds)
print(json.dumps([compiled_at - start, time.perf_counter() - compiled_at]))
"""


def snipjit_startup(model: str, options: dict[str, Any], feeds: Feeds) -> StartupTimes:
    """Cold and warm startup of `model` compiled with `options` and run on `feeds`, measured in child
    processes; a failure is reported in the note, not raised."""
    startups: list[Startup | None] = [None, None]
    with tempfile.TemporaryDirectory(prefix="snipjit-bench-") as scratch:
        feeds_file = Path(scratch) / "feeds.npz"
        np.savez(feeds_file, **feeds)
        env = {**os.environ, "SNIPJIT_CACHE_DIR": str(Path(scratch) / "cache"), "SNIPJIT_CACHE": "1"}
        for index in range(2):
            child = subprocess.run([sys.executable, "-c", _STARTUP_CHILD, str(model), json.dumps(options),
                                    str(feeds_file)], env=env, capture_output=True, text=True)
            if child.returncode != 0:
                last = (child.stderr.strip().splitlines() or ["no message"])[-1][:200]
                return StartupTimes(*startups, note=f"compile failed: {last}")
            startups[index] = Startup(*json.loads(child.stdout.strip().splitlines()[-1]))
    return StartupTimes(*startups)


CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_bf16", "amx_int8")


def machine_description() -> dict[str, Any]:
    """The CPU (model name and the vector extensions that matter here), the ISA level snipjit generates
    kernels for, and the cores: figures from different machines are not comparable."""
    cpu, flags = "", []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not cpu:
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = [f for f in CPU_FLAGS if f in value.split()]
    description: dict[str, Any] = {"cpu": cpu or platform.processor() or platform.machine(), "cpu_flags": flags,
                                   "logical_cpus": os.cpu_count(), "usable_cores": usable_cores()}
    try:
        from .targets import isa
        target = isa.current()
        description |= {"isa": target.level.name, "llvm_cpu": target.cpu}
    except Exception as error:  # no LLVM, or SNIPJIT_ISA asks for a level this CPU lacks
        description["isa"] = f"unknown ({type(error).__name__}: {error})"
    return description


def package_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions(packages: Sequence[str]) -> dict[str, str | None]:
    """Python's and each package's version (None: not installed)."""
    return {"python": platform.python_version(), **{p: package_version(p) for p in packages}}
