"""Asynchronous inference: `start_async` futures and callbacks, an `AsyncQueue` of several jobs each on a
request of its own, errors reported by `wait_all`, and every stream's results equal to `run`'s."""
import threading

import numpy as np
import pytest

import snipjit
from snipjit import FeedError, GraphBuilder
from snipjit.runtime.execution.async_queue import AsyncQueue

rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def model():
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 64])
    y = b.Tanh(b.MatMul(x, b.const(rng.standard_normal((64, 48)).astype(np.float32))))
    b.output(b.Softmax(y, axis=-1), "y")
    return b.build()


def feeds(n=3):
    return [{"x": rng.standard_normal((k % 4 + 1, 64)).astype(np.float32)} for k in range(n)]


@pytest.mark.parametrize("settings", [{}, {"num_threads": 1, "streams": 2}, {"hint": "throughput"},
                                      {"num_threads": 2, "streams": 1}])
def test_futures_give_what_run_gives(model, settings):
    cm = snipjit.compile(model, **settings)
    inputs = feeds(12)
    futures = [cm.start_async(f) for f in inputs]
    cm.wait_all()
    for f, x in zip(futures, inputs):
        np.testing.assert_array_equal(f.result()[0], cm.run(x)[0])


def test_callbacks_get_outputs_and_userdata(model):
    cm = snipjit.compile(model, num_threads=1, streams=2)
    got, lock = {}, threading.Lock()

    def done(outputs, userdata):
        with lock:
            got[userdata] = outputs[0].copy()

    inputs = feeds(8)
    for i, f in enumerate(inputs):
        cm.start_async(f, callback=done, userdata=i)
    cm.wait_all()
    assert sorted(got) == list(range(8))
    for i, f in enumerate(inputs):
        np.testing.assert_array_equal(got[i], cm.run(f)[0])


def test_a_queue_runs_on_requests_of_its_own(model):
    cm = snipjit.compile(model, num_threads=2, streams=2)
    threads = set()
    with cm.infer_queue(callback=lambda outputs, userdata: threads.add(threading.get_ident())) as queue:
        assert queue.jobs == 2 and queue.is_ready()
        for f in feeds(16):
            queue.start_async(f)
        queue.wait_all()
    assert 1 <= len(threads) <= 2 and threading.get_ident() not in threads


def test_wait_all_raises_the_first_error(model):
    cm = snipjit.compile(model)
    good = cm.start_async(feeds(1)[0])
    bad = cm.start_async({"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(FeedError, match="x"):
        cm.wait_all()
    assert good.result() is not None and isinstance(bad.exception(), FeedError)
    cm.wait_all()   # reported once


def test_a_failing_callback_is_reported(model):
    def boom(outputs, userdata):
        raise RuntimeError("callback failed")

    cm = snipjit.compile(model)
    future = cm.start_async(feeds(1)[0], callback=boom)
    with pytest.raises(RuntimeError, match="callback failed"):
        cm.wait_all()
    assert isinstance(future.exception(), RuntimeError)

    with AsyncQueue(snipjit.compile(model).create_request, 1, boom) as queue:
        queue.start_async(feeds(1)[0])
        with pytest.raises(RuntimeError, match="callback failed"):
            queue.wait_all()


@pytest.mark.parametrize("jobs", [0, -2, 1.5, True])
def test_a_queue_needs_jobs(model, jobs):
    with pytest.raises(ValueError, match="at least one job"):
        AsyncQueue(snipjit.compile(model).create_request, jobs)
