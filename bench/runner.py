"""Runs the chosen workloads one after another on the chosen engines, printing each table as it
is measured."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from bench import engines, models
from bench.machine import machine_info
from bench.measurement import Measurement
from bench.table import format_table
from bench.timing import Settings, measure
from bench.workloads import Workload

SEED = 0


@dataclass
class SuiteResult:
    """Everything a run produced, for the JSON file and the chart."""

    machine: dict
    settings: Settings
    engines: list[str]
    measurements: list[Measurement] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # workload name -> reason


def _bytes_moved(workload: Workload, model: str, feeds: dict[str, np.ndarray]) -> int | None:
    """Inputs read plus outputs written: the least traffic of a memory-bound workload."""
    if not workload.memory_bound:
        return None
    outputs = sum(4 * int(np.prod(shape)) for shape in models.output_shapes(model))
    return sum(a.nbytes for a in feeds.values()) + outputs


def run_workload(workload: Workload, names: list[str], settings: Settings) -> Measurement:
    model = str(workload.model())
    feeds = workload.feeds(np.random.default_rng(SEED))
    chosen, unsupported = engines.engines_for(workload, names)
    return measure(
        workload.name,
        model,
        chosen,
        feeds,
        settings,
        description=workload.description,
        references=engines.references_for(workload),
        bytes_moved=_bytes_moved(workload, model, feeds),
        skipped=unsupported,
    )


def run_suite(
    chosen: list[Workload], names: list[str], settings: Settings, log: Callable[[str], None] = print
) -> SuiteResult:
    result = SuiteResult(machine_info(), settings, names)
    for index, workload in enumerate(chosen, 1):
        missing = [m for m in workload.requires if importlib.util.find_spec(m) is None]
        if missing:
            result.skipped[workload.name] = f"needs {' and '.join(missing)}, not installed"
            log(f"\n[{index}/{len(chosen)}] {workload.name}: skipped, {result.skipped[workload.name]}")
            continue
        log(f"\n[{index}/{len(chosen)}] {workload.name}")
        start = time.perf_counter()
        try:
            measurement = run_workload(workload, names, settings)
        except Exception as error:  # a model that cannot be built here; the other workloads go on
            result.skipped[workload.name] = f"could not prepare: {type(error).__name__}: {error}"
            log(f"skipped, {result.skipped[workload.name]}")
            continue
        result.measurements.append(measurement)
        log(format_table(measurement))
        log(f"({time.perf_counter() - start:.0f} s)")
    return result
