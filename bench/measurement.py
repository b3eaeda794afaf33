"""What the suite measured: each engine's times, load times and output error on one workload
(`EngineResult`), all engines on that workload with the baseline they are compared to (`Measurement`),
and their JSON form in bench/results/latest.json."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineResult:
    """One engine's measurements on one model."""

    engine: str
    status: str = "ok"  # ok | skipped | failed
    note: str = ""
    load_s: float | None = None
    first_run_s: float | None = None
    round_medians_s: list[float] = field(default_factory=list)
    samples_s: list[float] = field(default_factory=list)
    max_abs_err: float | None = None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.samples_s) if self.samples_s else None

    def quartiles_s(self) -> tuple[float, float] | None:
        if len(self.samples_s) < 2:
            return None
        q = statistics.quantiles(self.samples_s, n=4)
        return q[0], q[2]

    def summary(self) -> dict[str, Any]:
        quartiles = self.quartiles_s()
        return {
            "engine": self.engine,
            "status": self.status,
            "note": self.note,
            "load_s": self.load_s,
            "first_run_s": self.first_run_s,
            "median_ms": _ms(self.median_s),
            "p25_ms": _ms(quartiles[0]) if quartiles else None,
            "p75_ms": _ms(quartiles[1]) if quartiles else None,
            "min_ms": _ms(min(self.samples_s)) if self.samples_s else None,
            "iterations": len(self.samples_s),
            "round_medians_ms": [_ms(s) for s in self.round_medians_s],
            "max_abs_err": _finite(self.max_abs_err),
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _finite(value: float | None) -> float | None:
    """JSON has no inf or NaN."""
    return value if value is not None and math.isfinite(value) else None


@dataclass
class Measurement:
    """All engines on one model: what the table and the JSON show."""

    name: str
    description: str
    results: list[EngineResult]
    baseline: str | None
    reference: str | None
    bytes_moved: int | None = None

    def result(self, engine: str) -> EngineResult | None:
        return next((r for r in self.results if r.engine == engine), None)

    def ratio(self, result: EngineResult) -> float | None:
        """`result`'s latency over the baseline's: the median over the rounds of the two engines' round medians'
        ratio (engines alternate within a round, so a round's pair met the same machine: this machine moves
        between phases where every engine is up to twice as slow, and a ratio of medians over all rounds mixes
        them), or the ratio of the medians when the two did not time the same rounds."""
        base = self.result(self.baseline) if self.baseline else None
        if base is None or base.median_s is None or result.median_s is None:
            return None
        if len(result.round_medians_s) == len(base.round_medians_s) and base.round_medians_s:
            return statistics.median(r / b for r, b in zip(result.round_medians_s, base.round_medians_s))
        return result.median_s / base.median_s

    def gb_per_s(self, result: EngineResult) -> float | None:
        if self.bytes_moved is None or not result.median_s:
            return None
        return self.bytes_moved / result.median_s / 1e9

    def summary(self) -> dict[str, Any]:
        rows = []
        for r in self.results:
            row = r.summary()
            row["ratio"] = self.ratio(r)
            row["gb_per_s"] = self.gb_per_s(r)
            rows.append(row)
        return {
            "name": self.name,
            "description": self.description,
            "baseline": self.baseline,
            "reference": self.reference,
            "bytes_moved": self.bytes_moved,
            "engines": rows,
        }
