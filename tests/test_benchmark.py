"""snipjit.benchmark, behind `snipjit bench`: engines that are missing, unable or broken are reported
and the others still timed in alternating rounds; errors are measured against the reference engine."""
import math

import numpy as np
import pytest

from snipjit import benchmark
from snipjit.benchmark import EngineUnavailable, ModelEngine, Opened, compare, format_table, max_abs_error

FEEDS = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}


def _engine(run=None, error: Exception | None = None, calls: list | None = None) -> ModelEngine:
    def open_(model, threads, feeds):
        if error is not None:
            raise error

        def counted(feeds):
            if calls is not None:
                calls.append(feeds)
            return run(feeds)
        return Opened(counted, f"{threads} threads")
    return ModelEngine("numpy", open_)


@pytest.fixture
def engines(monkeypatch):
    calls: list[str] = []
    fakes = {
        "exact": _engine(lambda f: [f["x"] * 2]),
        "close": _engine(lambda f: [f["x"] * 2 + 1e-3], calls=calls),
        "unable": _engine(error=EngineUnavailable("no such op")),
        "broken": _engine(error=RuntimeError("exploded\nsecond line")),
        "absent": ModelEngine("no_such_package_for_snipjit_tests", _engine().open),
    }
    for name, fake in fakes.items():
        monkeypatch.setitem(benchmark.MODEL_ENGINES, name, fake)
    monkeypatch.setattr(benchmark, "REFERENCE_ENGINE", "exact")
    return calls


def test_compare_times_the_engines_that_run_and_says_why_the_others_do_not(engines):
    timings = {t.engine: t for t in compare("close", FEEDS, ["close", "unable", "broken", "absent", "exact"],
                                            rounds=3, threads=1, round_s=0.0, settle_s=0.0)}
    assert timings["unable"].note == "skipped: no such op" and not timings["unable"].samples_s
    assert timings["broken"].note == "failed: RuntimeError: exploded"
    assert timings["absent"].note == "skipped: no_such_package_for_snipjit_tests is not installed"
    for name in ("close", "exact"):
        assert len(timings[name].samples_s) == 3 and timings[name].median_s > 0 and timings[name].note == "1 threads"
    assert len(engines) == 2 + 3  # "close": the output run, the sizing run, one run in each of 3 rounds
    assert timings["close"].max_abs_err == pytest.approx(1e-3, rel=1e-3) and timings["exact"].max_abs_err == 0


def test_the_table_shows_latency_ratio_error_and_notes(engines):
    timings = compare("close", FEEDS, ["exact", "close", "broken"], rounds=1, threads=1, round_s=0.0, settle_s=0.0)
    legend, *lines = format_table(timings, baseline="exact").splitlines()
    assert legend == "(x exact: latency / exact's latency; max|err|: against exact's outputs)"
    assert lines[0].split() == ["engine", "median", "ms", "x", "exact", "max|err|", "note"]
    exact, close, broken = (line.split() for line in lines[1:])
    assert exact[2:4] == ["1.00", "0.0e+00"] and close[3] == "1.0e-03"
    assert broken[:5] == ["broken", "-", "-", "-", "failed:"]
    assert len({line.index("  1 threads") for line in lines[1:3]}) == 1  # columns line up


def test_unknown_engines_are_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown engines \['tensorflow'\]; choose from snipjit, "):
        compare("model.onnx", FEEDS, ["snipjit", "tensorflow"])


def test_max_abs_error_of_mismatched_outputs_is_infinite():
    a = np.ones((2, 3), np.float32)
    assert max_abs_error([a], [a + 0.5]) == 0.5
    assert max_abs_error([a], [a, a]) == math.inf
    assert max_abs_error([a.reshape(3, 2)], [a]) == math.inf
    assert max_abs_error([np.full_like(a, np.nan)], [a]) == math.inf
    assert max_abs_error([np.zeros((0, 3))], [np.zeros((0, 3))]) == 0
