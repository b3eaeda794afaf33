"""snipjit.benchmark, behind `snipjit bench`: engines that are missing, unable or broken are reported and
the others measured in alternating rounds, one stream or several; errors are measured against the
reference engine; the report has every figure, as a table and as JSON."""
import json
import math
import threading
import time

import numpy as np
import pytest

from snipjit import benchmark
from snipjit.bench_modes import Settings, Startup, StartupTimes
from snipjit.benchmark import (EngineUnavailable, ModelEngine, Opened, Report, compare, in_threads,
                               max_abs_error)

FEEDS = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
ONCE = dict(seconds=1e-12, threads=1, settle_s=0.0)   # every turn: one inference per stream (any call is longer)


def _engine(run=None, error: Exception | None = None, calls: list | None = None) -> ModelEngine:
    def open_(model, threads, feeds, streams=1, mode="latency"):
        if error is not None:
            raise error

        def make_runner():
            def counted(feeds):
                if calls is not None:
                    calls.append(threading.get_ident())
                return run(feeds)
            return counted
        return in_threads(make_runner, streams, f"{threads} threads")
    return ModelEngine("numpy", open_)


@pytest.fixture
def engines(monkeypatch):
    calls: list[int] = []
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
                                            Settings(rounds=3, **ONCE))}
    assert timings["unable"].note == "skipped: no such op" and not timings["unable"].latencies_s
    assert timings["broken"].note == "failed: RuntimeError: exploded" and timings["broken"].status == "failed"
    assert timings["absent"].note == "skipped: no_such_package_for_snipjit_tests is not installed"
    for name in ("close", "exact"):
        t = timings[name]
        assert len(t.latencies_s) == 3 and t.median_s > 0 and t.note == "1 threads" and t.status == "ok"
        assert t.inferences_per_s > 0 and t.first_run_s > 0 and t.load_s >= 0
    assert len(engines) == 1 + 1 + 3  # "close": the first run, the warm-up, one run in each of 3 rounds
    assert timings["close"].max_abs_err == pytest.approx(1e-3, rel=1e-3) and timings["exact"].max_abs_err == 0


def test_engines_take_turns_in_a_rotating_order(monkeypatch):
    order: list[str] = []
    for name in ("first", "second"):
        monkeypatch.setitem(benchmark.MODEL_ENGINES, name, ModelEngine(
            "numpy", lambda *a, name=name, **k: Opened(lambda feeds, name=name: order.append(name) or [feeds["x"]])))
    compare("m", FEEDS, ["first", "second"], Settings(rounds=3, **ONCE))
    assert order[4:] == ["first", "second", "second", "first", "first", "second"]   # after 2 runs each to open


def test_throughput_mode_runs_the_streams_concurrently_each_with_its_runner(monkeypatch):
    runners_used, active, most = set(), [0], [0]
    lock = threading.Lock()

    def make_runner(index=iter(range(99))):
        own = next(index)

        def run(feeds):
            with lock:
                runners_used.add(own)
                active[0] += 1
                most[0] = max(most[0], active[0])
            time.sleep(0.002)
            with lock:
                active[0] -= 1
            return [feeds["x"]]
        return run

    opener = lambda model, threads, feeds, streams=1, mode="latency": in_threads(make_runner, streams)  # noqa: E731
    monkeypatch.setitem(benchmark.MODEL_ENGINES, "streamed", ModelEngine("numpy", opener))
    settings = Settings(mode="throughput", streams=3, seconds=0.06, rounds=2, threads=1, settle_s=0.0)
    streamed, = compare("m", FEEDS, ["streamed"], settings)
    assert runners_used == {0, 1, 2} and most[0] >= 2
    assert len(streamed.latencies_s) >= 2 * 3 and streamed.wall_s >= 0.06
    assert streamed.inferences_per_s == pytest.approx(len(streamed.latencies_s) / streamed.wall_s)


def test_unknown_engines_are_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown engines \['tensorflow'\]; choose from snipjit, "):
        compare("model.onnx", FEEDS, ["snipjit", "tensorflow"])


def _report(timings, mode: str = "latency") -> Report:
    settings = Settings(mode=mode, streams=1 if mode == "latency" else 2, threads=2, seconds=1, batch=4)
    startup = StartupTimes(Startup(1.5, 0.125), Startup(0.25, 0.0625))
    return Report("model.onnx", {"x": {"dtype": "float32", "shape": [2, 3]}}, [t.engine for t in timings],
                  settings, timings, startup, {"cpu": "test"}, {"python": "3"}, baseline="exact")


def test_the_table_shows_percentiles_throughput_ratio_error_and_notes(engines):
    timings = compare("close", FEEDS, ["exact", "close", "broken"], Settings(rounds=1, **ONCE))
    timings[0].latencies_s, timings[0].wall_s = [0.001, 0.002, 0.003], 0.006
    timings[1].latencies_s, timings[1].wall_s = [0.004, 0.004], 0.004
    legend, *lines = _report(timings).table().splitlines()
    assert legend.startswith("(x exact: p50 / exact's p50, above 1: slower than exact; samples/s: inf/s x batch 4")
    assert lines[0].split() == ["engine", "mode", "streams", "threads", "p50", "ms", "p90", "ms", "p99", "ms",
                                "min", "ms", "max", "ms", "inf/s", "samples/s", "x", "exact", "max|err|", "note"]
    exact, close, broken = (line.split() for line in lines[1:4])
    assert exact[1:12] == ["latency", "1", "2", "2", "2.8", "2.98", "1", "3", "500.0", "2000.0", "1.00"]
    assert close[4] == "4" and close[9:13] == ["500.0", "2000.0", "2.00", "1.0e-03"]
    assert broken[4:] == ["-"] * 9 + ["failed:", "RuntimeError:", "exploded"]
    assert len({line.index("  1 threads") for line in lines[1:3]}) == 1  # columns line up
    assert lines[5].startswith("snipjit startup: cold compile 1.5 s + first inference 125 ms, warm compile 0.25 s "
                               "+ first inference 62.5 ms (each in a fresh process")
    assert lines[6] == "in this process (caches as found):" and lines[7].split()[:3] == ["exact", "opened", "in"]


def test_in_throughput_mode_engines_rank_by_inferences_per_second(engines):
    timings = compare("close", FEEDS, ["exact", "close"], Settings(rounds=1, **ONCE))
    timings[0].latencies_s, timings[0].wall_s = [0.001] * 10, 0.005   # 2000 inferences/s
    timings[1].latencies_s, timings[1].wall_s = [0.0001] * 10, 0.02   # 500 inferences/s, low latency
    report = _report(timings, "throughput")
    assert report.ratio(timings[1]) == pytest.approx(4.0)
    assert report.as_json()["results"][1]["vs_exact"] == pytest.approx(4.0)


def test_the_json_has_every_figure_and_setting(engines):
    timings = compare("close", FEEDS, ["exact", "close", "unable"], Settings(rounds=2, **ONCE))
    timings[1].max_abs_err = math.inf
    data = json.loads(json.dumps(_report(timings).as_json(), allow_nan=False))
    assert data["settings"] | {"engines": ["exact", "close", "unable"], "mode": "latency", "batch": 4,
                               "threads": 2, "seconds": 1} == data["settings"]
    assert data["snipjit_startup"]["cold"] == {"compile_s": 1.5, "first_inference_s": 0.125}
    assert data["snipjit_startup"]["warm"]["compile_s"] == 0.25 and "fresh process" in data["snipjit_startup"]["how"]
    exact, close, unable = data["results"]
    ms = exact["latency_ms"]
    assert ms["min"] <= ms["p50"] <= ms["p90"] <= ms["p99"] <= ms["max"] and ms["min"] <= ms["mean"] <= ms["max"]
    assert exact["inferences"] == 2 and exact["samples_per_s"] == pytest.approx(4 * exact["inferences_per_s"])
    assert exact["vs_exact"] == 1.0 and exact["first_inference_ms"] > 0 and exact["version"] is not None
    assert close["max_abs_err"] == "inf"
    assert unable["status"] == "skipped" and unable["latency_ms"] is None and unable["inferences_per_s"] is None


def test_max_abs_error_of_mismatched_outputs_is_infinite():
    a = np.ones((2, 3), np.float32)
    assert max_abs_error([a], [a + 0.5]) == 0.5
    assert max_abs_error([a], [a, a]) == math.inf
    assert max_abs_error([a.reshape(3, 2)], [a]) == math.inf
    assert max_abs_error([np.full_like(a, np.nan)], [a]) == math.inf
    assert max_abs_error([np.zeros((0, 3))], [np.zeros((0, 3))]) == 0
