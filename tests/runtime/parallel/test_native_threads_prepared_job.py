"""A job prepared once on the native pool runs its kernel over the whole domain at every `run()`, on the
pool's threads or, not parallel, on the calling thread with the first scratchpad; a `JobSequence` runs
several such launches one after another in one call."""
import ctypes
import gc

import numpy as np
import pytest

from snipjit.runtime.parallel.native_threads import JobSequence, get_native_pool, native_call

# fn(ptrs, dims, lo, hi, scratch): counts[i] += 1 and owner[i] = scratch for i in [lo, hi)
COUNT = r"""
define void @count(ptr %ptrs, ptr %dims, i64 %lo, i64 %hi, ptr %scratch) {
entry:
  %counts = load ptr, ptr %ptrs
  %ownerp = getelementptr ptr, ptr %ptrs, i64 1
  %owner = load ptr, ptr %ownerp
  br label %head
head:
  %i = phi i64 [ %lo, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %body, label %done
body:
  %c = getelementptr i64, ptr %counts, i64 %i
  %old = load i64, ptr %c
  %new = add i64 %old, 1
  store i64 %new, ptr %c
  %o = getelementptr ptr, ptr %owner, i64 %i
  store ptr %scratch, ptr %o
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""

pytestmark = pytest.mark.skipif(get_native_pool() is None, reason="no native pool on this platform")

STRIDE = 256


@pytest.fixture(scope="module")
def count():
    from snipjit.targets.llvm import jit
    module = jit.compile(COUNT)
    return module, module.address("count")


def prepared_count(address, total, parallel):
    pool = get_native_pool()
    counts, out = np.zeros(total, np.int64), np.zeros(total, np.int64)
    ptrs = (ctypes.c_void_p * 2)(counts.ctypes.data, out.ctypes.data)
    scratch = np.empty(STRIDE * pool.threads, np.uint8)
    job = pool.prepare(address, ctypes.addressof(ptrs), 0, total, 0, scratch.ctypes.data, STRIDE, parallel)
    return job.run, (out, counts, ptrs, scratch)


@pytest.mark.parametrize("total", [1, 7, 1000])
def test_a_prepared_parallel_job_runs_every_item_once_per_run(count, total):
    run, (out, counts, _, scratch) = prepared_count(count[1], total, parallel=True)
    gc.collect()   # `run` alone keeps the job's words alive
    for launches in range(1, 4):
        run()
        assert (counts == launches).all()
    base = scratch.ctypes.data
    assert set(np.unique(out)) <= {base + t * STRIDE for t in range(get_native_pool().threads)}


def test_a_prepared_serial_job_runs_on_the_calling_thread_with_the_first_scratchpad(count):
    run, (out, counts, _, scratch) = prepared_count(count[1], 300, parallel=False)
    assert run() == 0
    assert (counts == 1).all() and (out == scratch.ctypes.data).all()


def test_a_job_sequence_runs_its_calls_in_order_on_the_pool_or_here(count):
    """Three launches of the counting kernel over one array, on the pool, here and on the pool again: each
    starts after the one before has finished (the increments are not atomic: an overlap would lose some)."""
    pool = get_native_pool()
    total = 5000
    counts, out = np.zeros(total, np.int64), np.zeros(total, np.int64)
    ptrs = (ctypes.c_void_p * 2)(counts.ctypes.data, out.ctypes.data)
    scratch = np.empty(STRIDE * pool.threads, np.uint8)
    calls = [native_call(pool, count[1], ctypes.addressof(ptrs), 0, total, 1, scratch.ctypes.data, STRIDE, parallel)
             for parallel in (True, False, True)]
    assert [c.pooled for c in calls] == [True, False, True]
    sequence = JobSequence(calls, pool, [ptrs, scratch])
    for runs in range(1, 4):
        sequence.run()
        assert (counts == 3 * runs).all()
    here = JobSequence(calls[1:2], None, [ptrs, scratch])   # calls on this thread alone need no pool
    here.run()
    assert (counts == 10).all() and (out == scratch.ctypes.data).all()


def test_a_job_sequence_refuses_calls_made_for_another_pool(count):
    call = get_native_pool().call(count[1], 0, 0, 0)
    with pytest.raises(ValueError, match="made for that pool"):
        JobSequence([call], None, [])


def test_a_timed_job_sequence_gives_each_call_its_share_of_the_time(count):
    """`run_timed` runs the calls as `run` does and splits their time by the cycle counter read between them:
    a launch over 2000× more items takes nearly all of it (in the best of 3 runs: another process may take
    the core during a small call, as it did once in a parallel test run, 0.86)."""
    total, runs = 1 << 21, 3
    counts, out = np.zeros(total, np.int64), np.zeros(total, np.int64)
    ptrs = (ctypes.c_void_p * 2)(counts.ctypes.data, out.ctypes.data)
    scratch = np.empty(STRIDE, np.uint8)
    calls = [native_call(None, count[1], ctypes.addressof(ptrs), 0, n, 1, scratch.ctypes.data, STRIDE, False)
             for n in (total // 2000, total, total // 2000)]
    sequence = JobSequence(calls, None, [ptrs, scratch])
    timed = [sequence.run_timed() for _ in range(runs)]
    assert (counts[:total // 2000] == 3 * runs).all() and (counts[total // 2000:] == runs).all()
    for shares in timed:
        assert len(shares) == 3 and abs(sum(shares) - 1) < 1e-9 and min(shares) > 0
    assert max(shares[1] for shares in timed) > 0.9
