"""Compile a model's snippet kernels in parallel, in worker processes, before its program is built; and,
once it is built, the generated kernels (GEMM, convolution, window) its steps will load on their first run.

Why processes: llvmlite serialises every LLVM call behind one lock and the Snippets passes hold the
GIL, so threads gain nothing. Why workers started as fresh interpreters (`python -P -c ...`, the spawn
model) rather than by multiprocessing: fork would copy a parent that has live threads, and
multiprocessing's spawn and forkserver re-import the user's `__main__`, so an unguarded script calling
`snipjit.compile` would run again in every worker.

`precompile` takes the distinct (by cache key) kernels of the Subgraph nodes that the kernel cache does
not hold. This process compiles too; a worker, once started (~0.35 s, as long as ~8 kernels take), takes
the next kernel from the same queue, so workers start only for enough kernels (`worker_count`). A worker
rebuilds the parent's `KernelSpec` from the target name and loop depth, refuses a job whose key then
differs (another target or compiler source), compiles as a cache miss would and sends the kernel back as
a kernel-cache entry, which goes into memory (and onto disk when that cache is on). `Program.build` then
only hits the cache. A kernel a worker fails on is left to the build, which compiles it here and raises
the real error (or falls back to another implementation) exactly as without the pool.

`precompile_native` does the same for the generated kernels a built program's steps name
(`Kernel.native_jobs`, as `object_cache.NativeJob`s): a worker builds the kernel's module from the job
and sends its object code back as a sealed entry, which this process offers to its loads and writes to
the disk cache (`object_cache.accept_entry`); the first run then only loads.

The option `compile_workers` (else `$SNIPJIT_COMPILE_WORKERS`) caps the processes that compile at once,
this one included: 0 or 1 compiles serially; the default is the number of cores this process may use.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import queue
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ...ir.graph import Graph, Node
from ...targets import get_target
from ...snippets.target_machine import TargetError, TargetMachine
from ..caches.kernel_cache import compiler_fingerprint, encode_entry, get_kernel_cache
from ..caches.object_cache import NativeJob, accept_entry
from ..parallel.thread_count import affinity_cpus
from .progress import Progress
from ..implementations.snippet_compile import bypasses_cache, compile_body, kernel_spec

PACKAGE_ROOT = Path(__file__).resolve().parents[2]   # the directory that holds this `snipjit`
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
KERNELS_PER_WORKER = 8   # a worker pays for its start only with more kernels than it starts in (~0.35 s)
NATIVE_KERNELS_PER_WORKER = 2   # generated kernels (0.1-6 s each) per worker process


@dataclass(frozen=True)
class Job:
    key: str         # the kernel-cache key the parent computed
    body: Graph
    options: dict    # what `kernel_spec` reads: the target's name and the loop depth


@dataclass(frozen=True)
class Outcome:
    key: str
    entry: bytes | None = None   # the kernel as a kernel-cache entry
    error: str | None = None     # else why not (the worker's traceback)


@dataclass
class PoolReport:
    """What `precompile` did; kernels in `failed` (cache key -> error) are left to the build."""
    kernels: int = 0    # distinct kernels the cache did not hold
    workers: int = 0    # worker processes started (0: the build compiles serially)
    compiled_here: int = 0
    compiled_in_workers: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def compile_processes(options: dict) -> int:
    """How many processes may compile at once, this one included (0 or 1: serially)."""
    setting = options.get("compile_workers")
    if setting is None:
        setting = os.environ.get("SNIPJIT_COMPILE_WORKERS") or None
    return affinity_cpus() if setting is None else min(int(setting), affinity_cpus())


def pending_jobs(nodes: Iterable[Node], options: dict) -> list[Job]:
    """The distinct kernels of these nodes' snippet steps that the kernel cache does not hold."""
    allowed = options.get("implementations")
    if bypasses_cache(options) or (allowed is not None and "snippet" not in allowed):
        return []
    cache = get_kernel_cache()
    jobs: dict[str, Job] = {}
    for node in nodes:
        if node.op == "Subgraph" and not node.attrs.get("pattern"):   # (patterns have kernels of their own)
            body = node.attrs["body"]
            spec = kernel_spec(body, options)
            if spec.key not in jobs and not cache.holds(spec.key):
                jobs[spec.key] = Job(spec.key, body, {"target": spec.target.name, "loop_depth": spec.loop_depth})
    return list(jobs.values())


def worker_count(kernels: int, options: dict) -> int:
    """Worker processes worth starting for this many uncached kernels (0: compile serially): this process
    compiles too, so one joins per `KERNELS_PER_WORKER` kernels beyond the first, one per core at most."""
    return max(0, min(compile_processes(options) - 1, (kernels - 1) // KERNELS_PER_WORKER))


def precompile(nodes: Iterable[Node], options: dict, compile_here: bool = True) -> PoolReport:
    """Compile the distinct uncached kernels of these nodes into the kernel cache, in parallel when it
    pays (see `worker_count`), else leave them to the build. `compile_here=False` leaves every kernel to
    the workers while any is alive."""
    try:
        jobs = pending_jobs(nodes, options)
    except TargetError:
        return PoolReport()   # the target is not available here: the build says so
    report = PoolReport(len(jobs), worker_count(len(jobs), options))
    if not report.workers:
        return report
    return _pool(jobs, report, jobs[0].options["target"], compile_here)


def pending_native_jobs(kernels: Iterable[object]) -> list[NativeJob]:
    """The distinct generated kernels these step kernels name (`Kernel.native_jobs`) that neither this
    process nor a cache holds."""
    jobs: dict[str, NativeJob] = {}
    for kernel in kernels:
        try:
            named = [job for job in getattr(kernel, "native_jobs", list)() if not job.held()]
        except Exception:   # noqa: BLE001 - only a head start: the first run compiles what it needs
            continue
        jobs.update((job.key, job) for job in named if job.key not in jobs)
    return list(jobs.values())


def precompile_native(kernels: Iterable[object], options: dict, compile_here: bool = True) -> PoolReport:
    """Compile the generated kernels (GEMM, convolution, window) that the program's steps will load on their
    first run, in parallel: each takes 0.1-6 s (a depthwise kernel with SiLU, on AVX-512), so a worker pays
    for its start (~0.35 s and ~100 MB) with two. Left to the first run (compiled there, serially) when
    there are fewer than two, or one process may compile."""
    jobs = pending_native_jobs(kernels)
    report = PoolReport(len(jobs), max(0, min(compile_processes(options) - 1, len(jobs) // NATIVE_KERNELS_PER_WORKER)))
    return _pool(jobs, report, None, compile_here) if report.workers else report


def _pool(jobs: list, report: PoolReport, target_name: str | None, compile_here: bool) -> PoolReport:
    """Compile `jobs` here and in `report.workers` worker processes, sharing one queue."""
    todo: queue.Queue = queue.Queue()
    for job in jobs:
        todo.put(job)
    outcomes: queue.Queue[Outcome] = queue.Queue()
    workers = []
    for _ in range(report.workers):
        with contextlib.suppress(OSError):   # a process that cannot start is a worker fewer
            workers.append(Worker(todo, outcomes, target_name))
    report.workers = len(workers)
    target = None if target_name is None else get_target(target_name)
    keys = {job.key for job in jobs}
    progress = Progress(len(jobs), "snipjit: compiling kernels")
    live, ended = len(workers), 0
    try:
        while ended < len(jobs):   # each job ends once: compiled here or as the outcome a worker sends
            job = _take(todo) if compile_here or not live else None
            if job is not None:
                _compile_here(job, report)
            else:   # the rest is in the workers' hands
                outcome = outcomes.get()
                if outcome is None:   # a worker has ended
                    live -= 1
                    continue
                _accept(outcome, target, report, keys)
            ended += 1
            progress.advance()
    finally:
        progress.close()
        for worker in workers:
            worker.stop()
    return report


def _take(todo: queue.Queue) -> Job | None:
    try:
        return todo.get_nowait()
    except queue.Empty:
        return None


def _compile_here(job: Job | NativeJob, report: PoolReport) -> None:
    try:
        if isinstance(job, NativeJob):
            job.kernel()   # loaded here, as the first run would
        else:
            compile_body(job.body, job.options)   # the build's own path: the build then hits the cache
        report.compiled_here += 1
    except Exception as e:   # noqa: BLE001 - the build compiles it again and raises as it always has
        report.failed[job.key] = f"{type(e).__name__}: {e}"


def _accept(outcome: Outcome, target: TargetMachine | None, report: PoolReport, keys: set[str]) -> None:
    """A worker's kernel into the kernel cache (a generated kernel's, without a target, into the object
    cache), or its failure into the report."""
    if outcome.key not in keys:   # (a generated kernel's key as the worker computed it)
        report.failed[outcome.key] = "the worker's kernel key differs from its parent's (other compiler source)"
    elif outcome.entry is not None and (accept_entry(outcome.key, outcome.entry) if target is None else
                                        get_kernel_cache().add_entry(outcome.key, target, outcome.entry) is not None):
        report.compiled_in_workers += 1
    else:
        report.failed[outcome.key] = outcome.error or "the kernel-cache entry the worker sent does not load"


class Worker:
    """A worker process, and the thread here that feeds it jobs from the shared queue once it is ready."""

    def __init__(self, jobs: queue.Queue, outcomes: queue.Queue, target_name: str | None):
        command = f"from snipjit.runtime.planning.compile_workers import serve; serve({target_name!r})"
        path = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen([sys.executable, "-P", "-c", command], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={**os.environ, **WORKER_ENV, "PYTHONPATH": path})
        self.thread = threading.Thread(target=self._feed, args=(jobs, outcomes), daemon=True)
        self.thread.start()

    def _feed(self, jobs: queue.Queue, outcomes: queue.Queue) -> None:
        job = None
        try:
            if pickle.load(self.proc.stdout) != "ready":
                return
            while (job := _take(jobs)) is not None:
                pickle.dump(job, self.proc.stdin)
                self.proc.stdin.flush()
                outcomes.put(pickle.load(self.proc.stdout))
                job = None
        except BaseException as e:   # noqa: BLE001 - the worker died or garbled: its job goes back as failed
            if job is not None:
                outcomes.put(Outcome(job.key, error=f"compile worker failed: {type(e).__name__}: {e}"))
        finally:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()   # a worker exits at the end of its input
            outcomes.put(None)

    def stop(self) -> None:
        """End the worker: at the end of `precompile` it holds no job (or nobody waits for it)."""
        self.proc.kill()
        self.thread.join()
        self.proc.wait()
        self.proc.stdout.close()


def serve(target_name: str | None) -> None:
    """A worker's loop: jobs in on stdin, outcomes out on the original stdout (prints go to stderr)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    if target_name is not None:
        get_target(target_name)   # start the target and hash the compiler before taking work
    compiler_fingerprint()
    pickle.dump("ready", out)
    out.flush()
    while True:
        try:
            job = pickle.load(sys.stdin.buffer)
        except EOFError:
            return
        pickle.dump(run_job(job), out)
        out.flush()


def run_job(job: Job | NativeJob) -> Outcome:
    """Compile a job as a kernel-cache miss in the parent would."""
    try:
        if isinstance(job, NativeJob):
            return Outcome(job.key, job.entry())
        spec = kernel_spec(job.body, job.options)
        if spec.key != job.key:
            raise RuntimeError("the worker's kernel key differs from its parent's (other target or compiler)")
        entry = encode_entry(spec.key, spec.target, spec.compile(job.body))
        if entry is None:
            raise TargetError(f"target {spec.target.name!r} gives no binary to send a kernel back in")
        return Outcome(job.key, entry)
    except Exception:   # noqa: BLE001 - reported to the parent, which compiles the kernel itself
        return Outcome(job.key, error=traceback.format_exc())
