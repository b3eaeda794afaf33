"""Concurrency: one compiled model (a blas step, a snippet kernel large enough to run on the thread pool,
a view) run from 8 threads gives exactly the single-threaded results."""
import threading
import time

import numpy as np
import pytest

import snipjit
from snipjit import GraphBuilder

THREADS = 8
SECONDS = 2.0   # per scenario


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", "f32", [64, 512])
    m = b.MatMul(x, b.const(rng.standard_normal((512, 512)).astype(np.float32) / 16))
    r = b.Relu(b.Add(m, b.const(rng.standard_normal(512).astype(np.float32))))
    v = b.Add(b.Tanh(b.Mul(r, b.const(np.float32(0.5)))), x)
    s = b.Reshape(v, b.const(np.array([128, 256], np.int64)))
    b.output(b.Softmax(s, axis=-1), "y")
    b.output(v, "v")
    cm = snipjit.compile(b.build())
    kinds = [s.kind for s in cm.plan]
    assert kinds[0] == "blas" and "snippet" in kinds and "Reshape" in cm.plan[kinds.index("snippet") + 1].ops
    feeds = [{"x": rng.standard_normal((64, 512)).astype(np.float32)} for _ in range(4)]
    expected = [cm.create_request().run(f) for f in feeds]
    return cm, feeds, expected


def hammer(run_for_thread):
    """Run `run_for_thread(k)` -> iterations in THREADS threads for SECONDS; re-raise the first failure."""
    errors, counts = [], []
    start = threading.Barrier(THREADS)

    def body(k):
        try:
            start.wait()
            counts.append(run_for_thread(k))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 60)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    if errors:
        raise errors[0]
    assert len(counts) == THREADS and min(counts) > 0
    return counts


def loop(model, run):
    cm, feeds, expected = model
    deadline = time.perf_counter() + SECONDS

    def thread(k):
        n = 0
        while time.perf_counter() < deadline:
            i = (k + n) % len(feeds)
            outputs = run(feeds[i])
            for got, want in zip(outputs, expected[i]):
                np.testing.assert_array_equal(got, want)
            n += 1
        return n

    return thread


def test_own_request_per_thread(model):
    cm = model[0]
    requests = [cm.create_request() for _ in range(THREADS)]

    def per_thread(k):
        return loop(model, requests[k].run)(k)

    counts = hammer(per_thread)
    assert sum(counts) >= THREADS


def test_compiled_model_run_from_threads(model):
    cm = model[0]
    hammer(loop(model, cm.run))


def test_held_outputs_survive_other_threads(model):
    """Each thread keeps every output it got; none changes while the other threads run."""
    cm, feeds, expected = model
    deadline = time.perf_counter() + SECONDS / 2

    def thread(k):
        kept = []
        while time.perf_counter() < deadline and len(kept) < 50:
            i = (k + len(kept)) % len(feeds)
            kept.append((i, cm.run(feeds[i])))
        for i, outputs in kept:
            for got, want in zip(outputs, expected[i]):
                np.testing.assert_array_equal(got, want)
        return len(kept)

    hammer(thread)


def test_new_signatures_planned_concurrently():
    """Threads start together on a fresh dynamic model, each cycling through batch sizes: plans for new
    signatures are made while other threads run."""
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 256])
    m = b.MatMul(x, b.const(rng.standard_normal((256, 256)).astype(np.float32) / 16))
    b.output(b.Mul(b.Sigmoid(m), x), "y")
    cm = snipjit.compile(b.build())
    assert {s.kind for s in cm.plan} == {"blas", "snippet"}
    sizes = [8, 16, 24, 128, 200]
    feeds = {n: {"x": rng.standard_normal((n, 256)).astype(np.float32)} for n in sizes}
    reference = snipjit.compile(b.build(), implementations={"reference"})
    expected = {n: reference.run(f)[0] for n, f in feeds.items()}
    deadline = time.perf_counter() + SECONDS / 2

    def thread(k):
        req, runs = cm.create_request(), 0
        while time.perf_counter() < deadline or runs < len(sizes):
            n = sizes[(k + runs) % len(sizes)]
            np.testing.assert_allclose(req.run(feeds[n])[0], expected[n], rtol=1e-5, atol=1e-6)
            runs += 1
        return runs

    hammer(thread)
    assert len(cm.program.plans()) == len(sizes)
