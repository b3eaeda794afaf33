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
