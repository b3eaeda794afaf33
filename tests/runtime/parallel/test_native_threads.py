"""The native pool runs a compiled kernel over its whole domain, once per item, with per-thread scratch."""
import ctypes
import threading

import numpy as np
import pytest

from snipjit.runtime.parallel.native_threads import NativePool, get_native_pool

pytestmark = pytest.mark.skipif(get_native_pool() is None, reason="no native pool on this platform")

# fn(ptrs, dims, lo, hi, scratch): out[i] = scratch address for i in [lo, hi), and counts[i] += 1
MARK = r"""
define void @mark(ptr %ptrs, ptr %dims, i64 %lo, i64 %hi, ptr %scratch) {
entry:
  %out = load ptr, ptr %ptrs
  %countsp = getelementptr ptr, ptr %ptrs, i64 1
  %counts = load ptr, ptr %countsp
  %s = ptrtoint ptr %scratch to i64
  br label %head
head:
  %i = phi i64 [ %lo, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %body, label %done
body:
  %o = getelementptr i64, ptr %out, i64 %i
  store i64 %s, ptr %o
  %c = getelementptr i64, ptr %counts, i64 %i
  %old = atomicrmw add ptr %c, i64 1 monotonic
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


@pytest.fixture(scope="module")
def mark():
    from snipjit.targets.llvm import jit
    module = jit.compile(MARK)
    return module, module.address("mark")


def run_mark(pool, address, total, grain=0, stride=256):
    out = np.zeros(total, np.int64)
    counts = np.zeros(total, np.int64)
    ptrs = (ctypes.c_void_p * 2)(out.ctypes.data, counts.ctypes.data)
    scratch = np.empty(stride * pool.threads, np.uint8)
    parallel = pool.run(address, ctypes.addressof(ptrs), 0, total, grain, scratch.ctypes.data, stride)
    return out, counts, scratch.ctypes.data, parallel


@pytest.mark.parametrize("total,grain", [(1, 0), (7, 1), (1000, 0), (1000, 3), (12345, 64)])
def test_every_item_runs_once_with_its_threads_scratchpad(mark, total, grain):
    pool = get_native_pool()
    out, counts, base, _ = run_mark(pool, mark[1], total, grain)
    assert (counts == 1).all()
    assert set(np.unique(out)) <= {base + t * 256 for t in range(pool.threads)}


def test_a_job_published_before_the_workers_start_is_still_joined(mark):
    for _ in range(20):   # each new pool races its workers' start against the first job
        pool = NativePool(2)
        out, counts, _, parallel = run_mark(pool, mark[1], 64, 1)
        assert parallel and (counts == 1).all()
        pool.close()


def test_concurrent_launches_from_many_threads_all_complete(mark):
    pool = get_native_pool()
    results, errors = [], []

    def client():
        try:
            for _ in range(200):
                _, counts, _, _ = run_mark(pool, mark[1], 500, 7)
                results.append(bool((counts == 1).all()))
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 800 and all(results)


def test_workers_wake_after_sleeping(mark):
    import time
    pool = get_native_pool()
    time.sleep(0.05)   # longer than the spin phase: the workers sleep on the futex
    _, counts, _, parallel = run_mark(pool, mark[1], 256, 1)
    assert parallel and (counts == 1).all()


def test_a_wake_without_a_job_has_sleeping_workers_spin_again():
    """(What a request does as it starts a run: the workers are spinning by its first launch.)"""
    import time
    from snipjit.targets.llvm.thread_pool_ir import GEN, SLEEPERS, WAKE_UPS
    pool = NativePool(2)
    try:
        deadline = time.monotonic() + 5
        while pool._state[SLEEPERS] < 1 and time.monotonic() < deadline:   # idle longer than it spins
            time.sleep(0.01)
        assert pool._state[SLEEPERS] == 1
        before = pool._state[WAKE_UPS]
        pool.wake()
        while pool._state[WAKE_UPS] == before and time.monotonic() < deadline:
            time.sleep(0.001)
        assert pool._state[WAKE_UPS] > before and pool._state[GEN] == 0   # (woken, and no job published)
    finally:
        pool.close()


def test_items_run_here_when_not_every_pool_thread_has_a_scratchpad(monkeypatch):
    """Any pool thread may take an item, and thread t uses scratchpad t: a launch with fewer scratchpads
    than the pool has threads runs on the calling thread instead (it would write past them)."""
    from snipjit.runtime.parallel import native_threads as nt

    class Pool:
        threads = 8
        launched = 0

        def run(self, *args):
            Pool.launched += 1

    monkeypatch.setattr(nt, "get_native_pool", lambda: Pool())
    ptrs, dims, here = (ctypes.c_void_p * 1)(), (ctypes.c_int64 * 1)(), []
    for slots, expected_here in ((2, 1), (8, 0)):
        here.clear()
        nt.run_items(0, lambda *args: here.append(args), ptrs, dims, 4, 2, nt.scratchpads(slots, 64))
        assert len(here) == expected_here
    assert Pool.launched == 1
    nt.run_items(0, lambda *args: here.append(args), ptrs, dims, 4, 2, nt.scratchpads(2, 0))   # (no scratch)
    assert Pool.launched == 2


# fn(ptrs, dims, lo, hi, scratch): for i in [lo, hi): out[i] = scratch address, order[i] = the next number of
# a shared counter, then a short wait; item 0 waits until another thread has begun an item too (so that every
# launch has both threads take part, even on a busy machine)
ORDERED = r"""
define void @ordered(ptr %ptrs, ptr %dims, i64 %lo, i64 %hi, ptr %scratch) {
entry:
  %out = load ptr, ptr %ptrs
  %orderp = getelementptr ptr, ptr %ptrs, i64 1
  %order = load ptr, ptr %orderp
  %counterp = getelementptr ptr, ptr %ptrs, i64 2
  %counter = load ptr, ptr %counterp
  %s = ptrtoint ptr %scratch to i64
  br label %head
head:
  %i = phi i64 [ %lo, %entry ], [ %next, %waited ]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %body, label %done
body:
  %o = getelementptr i64, ptr %out, i64 %i
  store i64 %s, ptr %o
  %n = atomicrmw add ptr %counter, i64 1 seq_cst
  %q = getelementptr i64, ptr %order, i64 %i
  store i64 %n, ptr %q
  br label %wait
wait:
  %w = phi i64 [ 0, %body ], [ %w1, %wait ]
  %seen = load volatile i64, ptr %counter
  %w1 = add i64 %w, 1
  %short = icmp slt i64 %w1, 2000
  %first = icmp eq i64 %i, 0
  %alone = icmp slt i64 %seen, 2
  %patient = icmp slt i64 %w1, 100000000
  %for_another = and i1 %first, %alone
  %still = and i1 %for_another, %patient
  %waiting = or i1 %short, %still
  br i1 %waiting, label %wait, label %waited
waited:
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


def test_each_thread_starts_on_its_own_shard_of_the_items():
    """Items are split into one contiguous shard per thread; thread t claims its own shard's items before any
    other's (so it runs the same items launch after launch), unless they were all taken before it started."""
    from snipjit.targets.llvm import jit
    module = jit.compile(ORDERED)
    pool = NativePool(2)
    total, stride, joined = 64, 256, 0
    try:
        for _ in range(200):   # until the worker has taken part in 10 launches (a busy machine may delay it)
            out, order, counter = np.zeros(total, np.int64), np.zeros(total, np.int64), np.zeros(1, np.int64)
            ptrs = (ctypes.c_void_p * 3)(out.ctypes.data, order.ctypes.data, counter.ctypes.data)
            scratch = np.empty(stride * pool.threads, np.uint8)
            pool.run(module.address("ordered"), ctypes.addressof(ptrs), 0, total, 1, scratch.ctypes.data, stride)
            threads = (out - scratch.ctypes.data) // stride
            assert sorted(order) == list(range(total))
            for t in np.unique(threads):
                home = np.arange(t * total // pool.threads, (t + 1) * total // pool.threads)
                first = np.flatnonzero(threads == t)[np.argmin(order[threads == t])]
                assert first in home or (order[home] < order[first]).all(), (t, first, threads)
            joined += len(np.unique(threads)) == pool.threads
            if joined == 10:
                break
    finally:
        pool.close()
    assert joined, "the worker never took part"
