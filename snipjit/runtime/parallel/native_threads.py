"""A native thread pool for compiled kernels: a launch costs about a microsecond, not a Python wake-up.

The Python pool (`python_threads`) wakes its workers through `threading.Event`s and runs a Python callable
on each, so every parallel launch pays tens of microseconds of wake-up and GIL hand-over. Kernels
compiled by snipjit all share one C ABI (`KernelFunction`: `fn(ptrs, dims, begin, end, scratch)`), so
this pool runs them without Python in the loop. Its code is a small LLVM module compiled once
(`targets.llvm.thread_pool_ir`):

- workers are Python threads parked inside one native call (`pool_worker`, GIL released) that spin on
  a generation counter, then sleep on a futex once they have been idle for a while;
- `pool_run` publishes a job (function, arguments, domain size, grain, per-thread scratchpads), bumps
  the generation, wakes sleepers, works on the domain itself, and returns when every item is done —
  a worker still waking up is not waited for; chunks of `grain` iterations are claimed by
  compare-and-swap on a ticket tagged with the job, each thread from its own contiguous shard of the
  iterations first (the same items on the same core launch after launch), then from the others', so a slow
  core takes fewer and a late one none;
- one launch at a time: a launch finding the pool busy (another request's thread) runs inline;
- while the Python pool works, idle workers are parked (sleep without spinning), not competing with it.

Linux only (futex); elsewhere `get_native_pool()` returns None and callers use the Python pool.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...memory.solver import aligned_empty
from ...targets.llvm import thread_pool_ir
from ..caches.object_cache import native_module

from .thread_count import default_threads
from .workers import active

@dataclass(frozen=True)
class PreparedJob:
    """A kernel launch with every argument fixed once (`NativePool.prepare`): `run()` is one native call
    of two pointers, where `NativePool.run` converts eight arguments per launch."""
    words: ctypes.Array              # the job: fn, ptrs, dims, total, grain, scratch, stride
    run: Callable[[], int]           # 1 when it ran on the pool, 0 on the calling thread alone
    call: "NativeCall"               # the same launch, for a `JobSequence`


@dataclass(frozen=True)
class Scratchpads:
    """One scratchpad per thread, each on a cache line: thread t's starts at `base + t * stride`."""
    memory: np.ndarray | None   # keeps them alive (None: no scratch needed)
    base: int
    stride: int

    @property
    def slots(self) -> int | None:
        """How many threads have one (None: no scratch, any number)."""
        return None if not self.stride else self.memory.nbytes // self.stride


@dataclass(frozen=True)
class NativeCall:
    """One launch of a compiled kernel, as the pool's `jobs_run` takes it: `fn(ptrs, dims, begin, end,
    scratch)` over iterations [0, total), on the pool in chunks of `grain` (`pooled`), else on the calling
    thread with the first scratchpad. The arrays behind the addresses must outlive every run."""
    fn: int
    ptrs: int
    dims: int
    total: int
    grain: int
    scratch: int
    stride: int
    pooled: bool
    pool: "NativePool | None" = field(default=None, compare=False, repr=False)   # the pool it was made for

    def words(self) -> tuple[int, ...]:
        return (int(self.pooled), self.fn, self.ptrs, self.dims, self.total, self.grain, self.scratch, self.stride)


def native_call(pool: "NativePool | None", fn: int, ptrs: int, dims: int, total: int, grain: int = 0,
                scratch: int = 0, stride: int = 0, parallel: bool = True) -> NativeCall:
    """A launch on `pool` when there is one and `parallel`, else on the calling thread."""
    if pool is not None and parallel:
        return pool.call(fn, ptrs, dims, total, grain, scratch, stride)
    return NativeCall(fn, ptrs, dims, total, max(grain, 1), scratch or 0, stride, False)


def runner(pool: "NativePool | None", call: NativeCall, fn, repeats: bool) -> Callable[[], object]:
    """What runs `call`: a job prepared once when the launch `repeats` (a run costs a fifth of a
    microsecond), else the pool's `run`, or `fn` (the kernel's ctypes function) on the calling thread."""
    if pool is not None and repeats:
        return pool.prepared(call).run
    if call.pooled:
        return functools.partial(pool.run, call.fn, call.ptrs, call.dims, call.total, call.grain, call.scratch,
                                 call.stride)
    return functools.partial(fn, call.ptrs, call.dims, 0, call.total, call.scratch or None)


class JobSequence:
    """Native calls run one after another by one call into the pool's code (`jobs_run`): a program's
    consecutive kernel steps without Python between them. `keep` holds what their addresses point into."""

    def __init__(self, calls: list[NativeCall], pool: "NativePool | None", keep: list):
        if any(c.pooled and c.pool is not pool for c in calls):
            raise ValueError("a sequence's calls on a pool must all have been made for that pool")
        self.count = len(calls)
        self.words = (ctypes.c_int64 * (thread_pool_ir.JOB_WORDS * len(calls)))(*[w for c in calls for w in c.words()])
        self.state = None if pool is None else ctypes.addressof(pool._state)
        self.keep = (pool, keep)
        self._run = pool_code().cfunc("jobs_run", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                      ctypes.c_void_p)

    def run(self) -> None:
        self._run(self.state, ctypes.addressof(self.words), self.count, None)

    def run_timed(self) -> list[float]:
        """Run the calls and return each one's share of the time they took together (from the CPU's cycle
        counter read between them)."""
        stamps = (ctypes.c_int64 * (self.count + 1))()
        self._run(self.state, ctypes.addressof(self.words), self.count, ctypes.addressof(stamps))
        cycles = [b - a for a, b in zip(stamps[:-1], stamps[1:])]
        total = sum(cycles)
        return [c / total if total > 0 else 1 / self.count for c in cycles]


def scratchpads(threads: int, nbytes: int) -> Scratchpads:
    stride = -(-nbytes // 64) * 64
    if not stride:
        return Scratchpads(None, 0, 0)
    memory = aligned_empty(stride * threads)
    return Scratchpads(memory, memory.ctypes.data, stride)


class NativePool:
    """`run(fn, ptrs, dims, total, ...)`: a compiled kernel over [0, total) on all threads."""

    def __init__(self, threads: int):
        self.threads = threads
        self._module = pool_code()
        self._closed = False
        self._state = (ctypes.c_int64 * thread_pool_ir.STATE_WORDS)()
        self._state[thread_pool_ir.SHARDS] = min(threads, thread_pool_ir.MAX_SHARDS)
        libc = ctypes.CDLL(None)
        self._state[thread_pool_ir.SYSCALL] = ctypes.cast(libc.syscall, ctypes.c_void_p).value
        self._run = self._module.cfunc("pool_run", ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                       ctypes.c_void_p, ctypes.c_int64)
        self._launch_job, self._inline_job = (self._module.cfunc(name, ctypes.c_int64, ctypes.c_void_p,
                                                                 ctypes.c_void_p)
                                              for name in ("job_launch", "job_inline"))
        self._wake = functools.partial(self._module.cfunc("pool_wake", None, ctypes.c_void_p), self._state)
        worker = self._module.cfunc("pool_worker", None, ctypes.c_void_p, ctypes.c_int64)
        self._workers = [threading.Thread(target=self._park, args=(worker, i), daemon=True,
                                          name=f"snipjit-native-{i}") for i in range(1, threads)]
        for t in self._workers:
            t.start()
        _live.add(self)

    def _park(self, worker, tid: int) -> None:
        from .blas_threads import single_threaded_here
        single_threaded_here()
        worker(ctypes.addressof(self._state), tid)

    def run(self, fn: int, ptrs: int, dims: int, total: int, grain: int = 0, scratch: int = 0,
            stride: int = 0) -> bool:
        """Run kernel `fn` over iterations [0, total) in chunks of `grain` (default: 8 per thread);
        thread t gets `scratch + t*stride` as its scratchpad. False when it ran on this thread alone."""
        return bool(self._run(ctypes.addressof(self._state), fn, ptrs, dims, total, self._grain(total, grain),
                              scratch, stride))

    def prepare(self, fn: int, ptrs: int, dims: int, total: int, grain: int = 0, scratch: int = 0,
                stride: int = 0, parallel: bool = True) -> PreparedJob:
        """`run` with its arguments fixed (the arrays behind the addresses must outlive the job); not
        `parallel`: the job runs on the calling thread alone, with the first scratchpad."""
        return self.prepared(self.call(fn, ptrs, dims, total, grain, scratch, stride, parallel))

    def prepared(self, call: NativeCall) -> PreparedJob:
        """`call` as a job prepared once, on the pool or (not `call.pooled`) on the calling thread."""
        words = (ctypes.c_int64 * 7)(*call.words()[1:])
        entry = self._launch_job if call.pooled else self._inline_job
        return PreparedJob(words, functools.partial(entry, self._state, words), call)   # (holding both alive)

    def call(self, fn: int, ptrs: int, dims: int, total: int, grain: int = 0, scratch: int = 0,
             stride: int = 0, parallel: bool = True) -> NativeCall:
        """The launch `run` would make, as a `NativeCall` (for a `JobSequence`)."""
        return NativeCall(fn, ptrs, dims, total, self._grain(total, grain), scratch or 0, stride, parallel, self)

    def _grain(self, total: int, grain: int) -> int:
        return grain if grain > 0 else max(1, total // (self.threads * 8))

    def wake(self) -> None:
        """Wake the workers asleep (idle longer than they spin) without a job, so that they spin again when
        the launches about to come publish theirs: a request calls it as it starts a run, and the ~35 us a
        worker takes to wake (2-core Xeon under KVM) pass while it checks the feeds, not in the first launch."""
        self._wake()

    def park(self, parked: bool) -> None:
        """While parked, idle workers sleep at once instead of spinning: other threads (the Python pool's)
        get the cores."""
        self._state[thread_pool_ir.PARK] = int(parked)

    def close(self) -> None:
        """Stop the workers (at exit, or when the request owning them goes): they return from their
        native loop."""
        if self._closed:
            return
        self._closed = True
        self._state[thread_pool_ir.STOP] = 1
        self._state[thread_pool_ir.GEN] += 1   # a worker about to sleep sees a new generation instead
        libc = ctypes.CDLL(None)
        futex, wake_private, everyone = 202, 129, 2147483647   # (a variadic call: every argument typed)
        libc.syscall(ctypes.c_long(futex), ctypes.c_void_p(ctypes.addressof(self._state)),
                     ctypes.c_long(wake_private), ctypes.c_long(everyone), ctypes.c_void_p(None))
        for t in self._workers:
            t.join(timeout=1.0)


_lock = threading.Lock()
_live: "weakref.WeakSet[NativePool]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_live):
        pool.close()


POOL_MODULE = "snipjit_thread_pool"


def pool_code():
    """The pool's code, loaded once for every pool (each has its own state words); from the caches like
    any kernel, so a saved model carries it too."""
    return native_module(thread_pool_ir.module_source, POOL_MODULE)


@functools.cache
def supported() -> bool:
    """Whether the native pool runs here (Linux on x86-64: futexes and the pause instruction)."""
    import platform
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


_pool: NativePool | None = None
_single = False   # the process's pool would have one thread: there is none


def existing_native_pool() -> NativePool | None:
    """The native pool this thread's launches use, if one was started (never starts one)."""
    own = active()
    if own is not None:
        return own.existing("native")
    return _pool


def native_pool_threads() -> int:
    """The threads of the pool `get_native_pool` gives this thread (1: none), without starting one: what a kernel
    named ahead of the first run (`native_jobs`) plans for."""
    own = active()
    if own is not None:
        threads = own.threads
    elif _pool is not None or _single:
        threads = _pool.threads if _pool is not None else 1
    else:
        threads = default_threads()
    return threads if supported() and threads > 1 else 1


def new_native_pool(threads: int) -> NativePool | None:
    """A native pool of `threads` threads, or None where it is not supported or for one thread."""
    return NativePool(threads) if supported() and threads > 1 else None


def get_native_pool() -> NativePool | None:
    """The native pool of the request running on this thread (`workers.running_on`), else the process's
    (created on first use); None where it is not supported or there is one thread only."""
    global _pool, _single
    own = active()
    if own is not None:
        return own.pool("native", lambda: new_native_pool(own.threads))
    if _pool is not None or _single:
        return _pool
    with _lock:
        if _pool is None and not _single:
            _pool = new_native_pool(default_threads())
            _single = _pool is None
        return _pool


def run_items(address: int, fn, ptrs, dims, items: int, threads: int, scratch: Scratchpads) -> None:
    """Run a kernel of the `KernelFunction` ABI over work items [0, items): one item at a time on the
    native pool when `threads` > 1 (and there is one, and a scratchpad for each of its threads: any of
    them may take an item), else through `fn`, its ctypes callable, here."""
    pool = get_native_pool()
    if _items_on_pool(pool, threads, scratch):
        pool.run(address, ctypes.addressof(ptrs), ctypes.addressof(dims), items, 1, scratch.base, scratch.stride)
    else:
        fn(ptrs, dims, 0, items, scratch.base)


def items_call(address: int, ptrs, dims, items: int, threads: int, scratch: Scratchpads) -> NativeCall:
    """The launch `run_items` makes, as a `NativeCall`."""
    pool = get_native_pool()
    return native_call(pool, address, ctypes.addressof(ptrs), ctypes.addressof(dims), items, 1, scratch.base,
                       scratch.stride, _items_on_pool(pool, threads, scratch))


def _items_on_pool(pool: NativePool | None, threads: int, scratch: Scratchpads) -> bool:
    return pool is not None and threads > 1 and (scratch.slots is None or scratch.slots >= pool.threads)
