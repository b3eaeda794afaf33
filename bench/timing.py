"""The suite's timing loop: every engine loaded in its own worker process, its outputs checked against
a reference engine's, then all timed in alternating rounds.

Each round times every engine for about the same time, in a rotating order, so that a slow drift of
the machine (frequency, other load) touches all engines alike; a short pause between engines lets the
spinning threads of the last one go idle. Loading and the first run are timed apart from the steady
state.
"""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from bench.measurement import EngineResult, Measurement
from bench.worker import Engine, Job, Worker, WorkerFailed, read_arrays
from snipjit.benchmark import Feeds, max_abs_error


@dataclass
class Settings:
    """How long and on how many threads to measure."""

    rounds: int = 5
    threads: int = 2
    round_s: float = 0.3  # time per engine per round
    warmup_s: float = 0.2
    min_iterations: int = 1
    max_iterations: int = 5000
    load_timeout_s: float = 900.0
    settle_s: float = 0.05  # pause between engines, so spinning threads of the last one go idle


def engine_available(engine: Engine) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in engine.requires)


def measure(
    name: str,
    model: str | None,
    engines: Sequence[Engine],
    feeds: Feeds,
    settings: Settings | None = None,
    *,
    description: str = "",
    references: Sequence[Engine] = (),
    baseline: str = "snipjit",
    bytes_moved: int | None = None,
    skipped: dict[str, str] | None = None,
) -> Measurement:
    """Load each engine in its own process, then time them in alternating rounds.

    The outputs are compared with those of the first of `references` that runs (reused if it is
    also timed); `skipped` lists engines that cannot express this model, with the reason, for the table.
    """
    settings = settings or Settings()
    results = {e.name: EngineResult(e.name) for e in engines}
    for engine_name, note in (skipped or {}).items():
        results[engine_name] = EngineResult(engine_name, "skipped", note)
    workers: dict[str, Worker] = {}
    iterations: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="snipjit-bench-") as tmp:
        feeds_path = os.path.join(tmp, "feeds.npz")
        np.savez(feeds_path, *feeds.values())

        def job(engine: Engine) -> Job:
            outputs = os.path.join(tmp, f"out-{engine.name}.npz")
            return Job(engine, model, list(feeds), feeds_path, outputs, settings.threads)

        try:
            for engine in engines:
                result = results[engine.name]
                if not engine_available(engine):
                    result.status, result.note = "skipped", f"{', '.join(engine.requires)} not installed"
                    continue
                worker = Worker(job(engine), settings.warmup_s)
                try:
                    report = worker.load(settings.load_timeout_s)
                except WorkerFailed as failure:
                    result.status, result.note = failure.status, failure.note
                    worker.close()
                    continue
                workers[engine.name] = worker
                result.load_s, result.first_run_s, result.note = report.load_s, report.first_run_s, report.info
                wanted = math.ceil(settings.round_s / max(report.iteration_s, 1e-9))
                iterations[engine.name] = min(max(wanted, settings.min_iterations), settings.max_iterations)

            reference_name = _compare_outputs(results, engines, references, job, settings)

            for round_index in range(settings.rounds):
                names = list(workers)
                shift = round_index % max(len(names), 1)
                for engine_name in names[shift:] + names[:shift]:
                    _time_round(workers, engine_name, iterations[engine_name], results[engine_name], settings)
        finally:
            for worker in workers.values():
                worker.close()

    return Measurement(
        name,
        description,
        list(results.values()),
        baseline=_choose_baseline(results, baseline),
        reference=reference_name,
        bytes_moved=bytes_moved,
    )


def _time_round(workers: dict[str, Worker], name: str, n: int, result: EngineResult, settings: Settings) -> None:
    worker = workers[name]
    try:
        times = worker.time(n, timeout_s=max(120.0, 50 * settings.round_s))
    except WorkerFailed as failure:
        result.status, result.note = failure.status, failure.note
        worker.close()
        del workers[name]
        return
    result.samples_s.extend(times)
    result.round_medians_s.append(statistics.median(times))
    time.sleep(settings.settle_s)


def _compare_outputs(
    results: dict[str, EngineResult],
    engines: Sequence[Engine],
    references: Sequence[Engine],
    job: Callable[[Engine], Job],
    settings: Settings,
) -> str | None:
    """Fill in max_abs_err of every loaded engine; returns the name of the reference used."""
    for reference in references:
        timed = results.get(reference.name)
        if timed is not None:
            if timed.load_s is not None:
                break
        elif engine_available(reference):
            worker = Worker(job(reference), 0.0)
            try:
                worker.load(settings.load_timeout_s)
                break
            except WorkerFailed:
                pass
            finally:
                worker.close()
    else:
        return None
    expected = read_arrays(job(reference).outputs_path)
    for engine in engines:
        result = results[engine.name]
        if engine.compare and result.load_s is not None:
            result.max_abs_err = max_abs_error(read_arrays(job(engine).outputs_path), expected)
            if not math.isfinite(result.max_abs_err):
                result.note = f"outputs differ in shape, count or NaNs from {reference.name}'s; {result.note}"
    return reference.name


def _choose_baseline(results: dict[str, EngineResult], preferred: str) -> str | None:
    """The preferred engine if it ran, else the first one that did."""
    for name in [preferred, *results]:
        result = results.get(name)
        if result is not None and result.median_s is not None:
            return name
    return None
