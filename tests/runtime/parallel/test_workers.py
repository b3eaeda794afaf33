"""A request's own workers: inside `running_on`, kernels find its pools (none with one thread), never the
process's; its threads stop when the request goes."""
import gc
import threading

import numpy as np
import pytest

import snipjit
from snipjit.runtime.parallel import native_threads, python_threads
from snipjit.runtime.parallel.workers import Workers, active, running_on


def test_one_thread_means_no_pool():
    w = Workers(1)
    with running_on(w):
        assert active() is w
        assert native_threads.get_native_pool() is None
        assert python_threads.get_pool().threads == 1
    assert active() is None


@pytest.mark.skipif(not native_threads.supported(), reason="no native pool here")
def test_own_pools_are_not_the_process_pools():
    w = Workers(3)
    with running_on(w):
        assert native_threads.existing_native_pool() is None   # not started before it is needed
        pool = native_threads.get_native_pool()
        assert pool.threads == 3 and pool is not native_threads._pool
        assert native_threads.get_native_pool() is pool and native_threads.existing_native_pool() is pool
        assert python_threads.get_pool() is not python_threads._pool
    before = threading.active_count()
    w.close()
    for t in pool._workers:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in pool._workers) and threading.active_count() <= before


@pytest.mark.skipif(not native_threads.supported(), reason="no native pool here")
def test_the_pool_threads_a_kernel_plans_for_are_known_without_starting_the_pool():
    w = Workers(3)
    with running_on(w):
        assert native_threads.native_pool_threads() == 3 and native_threads.existing_native_pool() is None
    with running_on(Workers(1)):
        assert native_threads.native_pool_threads() == 1
    w.close()


def test_nested_blocks_restore_the_outer_workers():
    outer, inner = Workers(1), Workers(2)
    with running_on(outer):
        with running_on(inner):
            assert active() is inner
        assert active() is outer


def test_workers_need_a_thread():
    with pytest.raises(ValueError, match="at least one thread"):
        Workers(0)


@pytest.mark.skipif(not native_threads.supported(), reason="no native pool here")
def test_a_request_with_threads_of_its_own_stops_them_when_it_goes():
    b = snipjit.GraphBuilder()
    x = b.input("x", "f32", [256, 256])
    b.output(b.MatMul(x, b.const(np.eye(256, dtype=np.float32))), "y")
    cm = snipjit.compile(b.build(), num_threads=2)
    request = cm.create_request()
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    np.testing.assert_allclose(request.run({"x": x})[0], x, rtol=1e-6)
    pool = request.workers.existing("native")
    assert pool is not None and pool.threads == 2 and all(t.is_alive() for t in pool._workers)
    del request
    gc.collect()
    for t in pool._workers:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in pool._workers)
