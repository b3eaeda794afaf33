"""The thread pool: parallel_for covers [0, total) exactly once on persistent threads, worker errors reach
the caller, and nested or concurrent callers run inline instead of deadlocking."""
import threading
import time
from collections import Counter

import pytest

from snipjit.runtime.parallel.python_threads import ThreadPool


@pytest.fixture(scope="module")
def pool():
    return ThreadPool(4)


def covered(pool, total):
    chunks = []
    lock = threading.Lock()

    def body(lo, hi):
        with lock:
            chunks.append((lo, hi))

    pool.parallel_for(body, total)
    return sorted(chunks)


@pytest.mark.parametrize("total", [0, 1, 2, 3, 4, 5, 7, 100, 1001])
def test_covers_every_index_exactly_once(pool, total):
    chunks = covered(pool, total)
    counts = Counter(i for lo, hi in chunks for i in range(lo, hi))
    assert counts == Counter(range(total))
    assert len(chunks) <= max(1, min(4, total))
    assert all(lo < hi for lo, hi in chunks) or total == 0
    sizes = [hi - lo for lo, hi in chunks]
    assert max(sizes) - min(sizes) <= 1   # balanced


def test_threads_are_reused(pool):
    idents = set()

    def body(lo, hi):
        idents.add(threading.get_ident())
        time.sleep(0.001)

    before = threading.active_count()
    for _ in range(50):
        pool.parallel_for(body, 8)
    assert threading.active_count() == before
    assert threading.get_ident() in idents and len(idents) <= 4


def test_worker_exception_reaches_the_caller(pool):
    def body(lo, hi):
        if lo != 0:
            raise ValueError(f"chunk {lo}")

    with pytest.raises(ValueError, match="chunk"):
        pool.parallel_for(body, 8)
    assert covered(pool, 8) == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_caller_exception_reaches_the_caller(pool):
    def body(lo, hi):
        if lo == 0:
            raise KeyError("first chunk")

    with pytest.raises(KeyError):
        pool.parallel_for(body, 8)


def test_call_after_a_failed_call_waits_for_its_own_chunks():
    pool = ThreadPool(2)
    worker_started = threading.Event()

    def failing(lo, hi):
        if lo == 0:
            worker_started.wait(5)
            raise ValueError("caller's chunk")
        worker_started.set()
        time.sleep(0.3)

    with pytest.raises(ValueError):
        pool.parallel_for(failing, 2)
    done = []

    def slow(lo, hi):
        time.sleep(0.2)
        done.append((lo, hi))

    pool.parallel_for(slow, 2)
    assert sorted(done) == [(0, 1), (1, 2)]


def run_with_timeout(fn, seconds=20):
    errors = []

    def target():
        try:
            fn()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "deadlock"
    if errors:
        raise errors[0]


def test_nested_parallel_for_runs_inline(pool):
    inner = Counter()
    lock = threading.Lock()

    def outer(lo, hi):
        for i in range(lo, hi):
            def body(a, b, i=i):
                with lock:
                    inner.update((i, j) for j in range(a, b))
            pool.parallel_for(body, 10)

    run_with_timeout(lambda: pool.parallel_for(outer, 8))
    assert inner == Counter((i, j) for i in range(8) for j in range(10))


def test_concurrent_callers_all_complete(pool):
    results = {}

    def caller(k):
        for _ in range(100):
            total = 50 + k
            hits = Counter()
            lock = threading.Lock()

            def body(lo, hi):
                with lock:
                    hits.update(range(lo, hi))

            pool.parallel_for(body, total)
            assert hits == Counter(range(total))
        results[k] = True

    def all_callers():
        threads = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    run_with_timeout(all_callers)
    assert sorted(results) == list(range(6))
