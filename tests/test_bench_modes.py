"""snipjit.bench_modes: the settings of `snipjit bench` refuse nonsense, streams run back to back until a
deadline (one, several threads, or an asynchronous queue), and the figures are what they claim."""
import threading
import time

import numpy as np
import pytest

from snipjit.bench_modes import (LatencySummary, Settings, async_queue, back_to_back, machine_description,
                                 snipjit_startup, threaded)

FEEDS: dict = {}


@pytest.mark.parametrize("changes, message", [
    ({"mode": "fastest"}, "unknown mode 'fastest'; choose latency or throughput"),
    ({"mode": "throughput", "streams": 0}, "streams must be at least 1, got 0"),
    ({"streams": 2}, "latency mode runs one stream, got 2; use throughput mode for more"),
    ({"seconds": 0}, "the measured time must be positive, got 0 s"),
    ({"seconds": -1.0}, "the measured time must be positive"),
    ({"threads": 0}, "threads must be at least 1"),
    ({"rounds": 0}, "rounds must be at least 1"),
    ({"batch": 0}, "batch must be at least 1"),
])
def test_settings_refuse_what_cannot_be_measured(changes, message):
    with pytest.raises(ValueError, match=message):
        Settings(**changes)


def test_latency_summary_of_known_samples():
    s = LatencySummary.of([i / 1000 for i in range(1, 101)])   # 1 ... 100 ms
    assert s.min == 0.001 and s.max == 0.1 and s.mean == pytest.approx(0.0505)
    assert s.p50 == pytest.approx(0.0505) and s.p90 == pytest.approx(0.0901) and s.p99 == pytest.approx(0.09901)
    assert s.milliseconds()["p99"] == pytest.approx(99.01)


def test_one_stream_runs_until_the_deadline_and_at_least_once():
    assert len(back_to_back(lambda feeds: [], FEEDS, -1.0).latencies_s) == 1
    burst = back_to_back(lambda feeds: time.sleep(0.001), FEEDS, 0.03)
    assert 2 <= len(burst.latencies_s) and burst.wall_s >= 0.03
    assert sum(burst.latencies_s) == pytest.approx(burst.wall_s, rel=0.2)


def test_threaded_streams_overlap_and_an_error_in_one_is_raised():
    starts = []
    burst = threaded([lambda feeds: starts.append(time.perf_counter()) or time.sleep(0.02)] * 3, FEEDS, 0.0)
    assert len(burst.latencies_s) == 3 and max(starts) - min(starts) < 0.02 and burst.wall_s < 0.06

    def failing(feeds):
        raise RuntimeError("stream broke")
    with pytest.raises(RuntimeError, match="stream broke"):
        threaded([lambda feeds: [], failing], FEEDS, 0.01)


class FakeQueue:
    """The part of OpenVINO's AsyncInferQueue that `async_queue` uses: jobs finish at once, 2 ms each."""

    def __init__(self):
        self.started, self.callback = 0, None

    def set_callback(self, callback):
        self.callback = callback

    def start_async(self, feeds, share_inputs=False):
        self.started += 1
        self.callback(type("Request", (), {"latency": 2.0})(), None)

    def wait_all(self):
        pass


def test_the_async_queue_is_kept_busy_until_the_deadline_with_every_job_started():
    queue = FakeQueue()
    burst = async_queue(queue, 4, FEEDS, 0.0)
    assert queue.started == 4 and burst.latencies_s == [0.002] * 4
    assert len(async_queue(queue, 4, FEEDS, 0.01).latencies_s) > 4


def test_the_machine_is_described():
    machine = machine_description()
    assert machine["cpu"] and machine["usable_cores"] >= 1 and machine["isa"] in ("avx512", "avx2", "sse")


def test_a_compile_that_fails_is_a_note_not_an_exception(tmp_path):
    times = snipjit_startup(str(tmp_path / "missing.onnx"), {}, {"x": np.zeros(2, np.float32)})
    assert times.cold is None and times.warm is None and times.note.startswith("compile failed: ")


def test_threads_see_the_deadline_set_after_they_started():
    seen = []
    burst = threaded([lambda feeds: seen.append(threading.get_ident())] * 2, FEEDS, 0.01)
    assert len(set(seen)) == 2 and burst.wall_s >= 0.01
