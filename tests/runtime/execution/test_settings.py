"""Execution settings: threads, streams and the hint, their defaults, their errors, and explain()."""
import pytest

import snipjit
from snipjit.runtime.execution.settings import ExecutionSettings
from snipjit.runtime.parallel import thread_count


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr("snipjit.runtime.execution.settings.default_threads", lambda: 4)


def test_defaults(four_cores):
    s = ExecutionSettings.from_options()
    assert (s.num_threads, s.streams, s.hint, s.threads_per_stream, s.own_threads) == (4, 1, "latency", 4, False)
    s = ExecutionSettings.from_options(hint="throughput")
    assert (s.num_threads, s.streams, s.threads_per_stream, s.own_threads) == (4, 4, 1, True)
    s = ExecutionSettings.from_options(num_threads=4, streams=2)
    assert (s.hint, s.threads_per_stream, s.own_threads) == ("throughput", 2, True)
    s = ExecutionSettings.from_options(num_threads=1)
    assert (s.streams, s.threads_per_stream, s.own_threads) == (1, 1, True)
    assert ExecutionSettings.from_options(num_threads=2, streams=5).threads_per_stream == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"num_threads": 0}, "num_threads must be a whole number of at least 1, got 0"),
    ({"num_threads": 1.5}, "num_threads must be"),
    ({"streams": -1}, "streams must be a whole number of at least 1, got -1"),
    ({"streams": True}, "streams must be"),
    ({"hint": "fast"}, "hint must be one of \\('latency', 'throughput'\\), got 'fast'"),
])
def test_bad_settings_are_refused_by_compile(kwargs, message):
    g = snipjit.parse_graph("graph(x: f32[2]) -> [y] { [y] = Relu(x) }")
    with pytest.raises(ValueError, match=message):
        snipjit.compile(g, **kwargs)


def test_explain_shows_the_settings_and_the_limits(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(thread_count, "cgroup_cpus", lambda: None)
    g = snipjit.parse_graph("graph(x: f32[2]) -> [y] { [y] = Relu(x) }")
    text = snipjit.compile(g, hint="throughput").explain()
    assert "== execution: throughput hint: 1 threads, 1 stream(s) of 1 thread(s)" in text
    assert "cgroup quota -, OMP_NUM_THREADS 1" in text
