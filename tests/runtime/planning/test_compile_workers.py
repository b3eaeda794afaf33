"""The compile pool: a model's distinct uncached kernels compiled in worker processes into the kernel
cache, so the build only hits it; the same results as a serial compile; identical layers compiled once;
a kernel a worker fails on compiled (and its error raised) by the build; no workers when they cannot pay."""
import numpy as np
import pytest

import snipjit
from snipjit.runtime.planning import compile_workers
from snipjit.runtime.caches import kernel_cache
from snipjit.runtime.implementations import snippet_compile
from snipjit.runtime.planning.compile_workers import PoolReport, pending_jobs, worker_count
from snipjit.runtime.caches.kernel_cache import KernelCache

# four fused layers between MatMuls (BLAS), the first two identical: three distinct kernels
MODEL = """graph(x: f32[8,64], w: f32[64,64]) -> [y] {
  const c: f32[] = 2.0
  [m1] = MatMul(x, w)
  [a1] = Mul(m1, c)
  [t1] = Tanh(a1)
  [m2] = MatMul(t1, w)
  [a2] = Mul(m2, c)
  [t2] = Tanh(a2)
  [m3] = MatMul(t2, w)
  [s3] = Sigmoid(m3)
  [e3] = Exp(s3)
  [m4] = MatMul(e3, w)
  [b4] = Abs(m4)
  [y] = Sqrt(b4)
}"""
DISTINCT = 3
rng = np.random.default_rng(0)
FEEDS = {"x": rng.standard_normal((8, 64), dtype=np.float32),
         "w": rng.standard_normal((64, 64), dtype=np.float32) / 8}


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A fresh kernel cache (memory and a temporary disk directory), 8 cores, and a worker for every
    kernel after the first."""
    fresh = KernelCache(tmp_path / "kernels")
    monkeypatch.setattr(kernel_cache, "_cache", fresh)
    monkeypatch.setattr(compile_workers, "KERNELS_PER_WORKER", 1)
    monkeypatch.setattr(compile_workers, "affinity_cpus", lambda: 8)
    monkeypatch.delenv("SNIPJIT_COMPILE_WORKERS", raising=False)
    return fresh


@pytest.fixture
def reports(monkeypatch):
    """The reports of `precompile` as `snipjit.compile` calls it, with every kernel left to the workers."""
    seen: list[PoolReport] = []
    real = compile_workers.precompile
    monkeypatch.setattr(compile_workers, "precompile",
                        lambda nodes, options: seen.append(real(nodes, options, compile_here=False)) or seen[-1])
    return seen


def serial_outputs() -> list[np.ndarray]:
    """The model compiled without workers into a cache of its own."""
    saved = kernel_cache._cache
    kernel_cache._cache = KernelCache(None)
    try:
        return snipjit.compile(snipjit.parse_graph(MODEL), compile_workers=1).run(FEEDS)
    finally:
        kernel_cache._cache = saved


def test_pool_gives_the_serial_results_and_fills_both_caches(cache, reports):
    cm = snipjit.compile(snipjit.parse_graph(MODEL), compile_workers=3)
    (report,) = reports
    assert report == PoolReport(kernels=DISTINCT, workers=2, compiled_in_workers=DISTINCT)
    assert cache.misses == DISTINCT and cache.hits["disk"] == 0   # the build only hit memory
    assert len(list(cache.directory.glob("*.bin"))) == DISTINCT
    for got, want in zip(cm.run(FEEDS), serial_outputs()):
        np.testing.assert_array_equal(got, want)


def test_identical_layers_compile_once(cache, reports):
    cm = snipjit.compile(snipjit.parse_graph(MODEL), compile_workers=2)
    snippets = [s for s in cm.plan if s.kind == "snippet"]
    assert len(snippets) == 4 and reports[0].compiled_in_workers == DISTINCT
    assert snippets[0].kernel.compiled is snippets[1].kernel.compiled   # the two Mul+Tanh layers


def break_first_job(monkeypatch) -> str:
    """Give the first job a key no worker computes, so its worker refuses it; return that key."""
    bogus = "0" * 64
    real = compile_workers.pending_jobs

    def jobs(nodes, options):
        first, *rest = real(nodes, options)
        return [compile_workers.Job(bogus, first.body, first.options), *rest]
    monkeypatch.setattr(compile_workers, "pending_jobs", jobs)
    return bogus


def test_a_kernel_a_worker_fails_on_is_compiled_by_the_build(cache, reports, monkeypatch):
    bogus = break_first_job(monkeypatch)
    cm = snipjit.compile(snipjit.parse_graph(MODEL), compile_workers=2)
    (report,) = reports
    assert set(report.failed) == {bogus} and "differs from its parent's" in report.failed[bogus]
    assert report.compiled_in_workers == DISTINCT - 1
    assert cache.misses == DISTINCT   # the build compiled the failed one
    for got, want in zip(cm.run(FEEDS), serial_outputs()):
        np.testing.assert_array_equal(got, want)


def test_the_build_raises_the_real_error_of_a_failed_kernel(cache, reports, monkeypatch):
    break_first_job(monkeypatch)

    def broken(*args, **kwargs):   # this process's compiler only: the workers' is intact
        raise RuntimeError("the real error")
    monkeypatch.setattr(snippet_compile, "compile_subgraph", broken)
    with pytest.raises(RuntimeError, match="the real error"):
        snipjit.compile(snipjit.parse_graph(MODEL), compile_workers=2)
    assert reports[0].compiled_in_workers == DISTINCT - 1


def test_no_workers_for_zero_or_one_uncached_kernel(cache, monkeypatch):
    monkeypatch.setattr(compile_workers, "Worker", None)   # starting one would fail
    one = snipjit.parse_graph(MODEL.split("  [t1]")[0] + "  [y] = Tanh(a1)\n}")
    cm = snipjit.compile(one, compile_workers=4)
    assert cache.misses == 1
    assert compile_workers.precompile(cm.graph.nodes, cm.options) == PoolReport(kernels=0)
    assert worker_count(0, {}) == worker_count(1, {}) == 0


def test_compile_workers_option_and_environment(cache, monkeypatch):
    assert worker_count(10, {}) == 7   # one process per core, this one included
    assert worker_count(10, {"compile_workers": 3}) == 2
    assert worker_count(10, {"compile_workers": 0}) == worker_count(10, {"compile_workers": 1}) == 0
    monkeypatch.setenv("SNIPJIT_COMPILE_WORKERS", "1")
    assert worker_count(10, {}) == 0
    assert worker_count(10, {"compile_workers": 2}) == 1   # the option wins
    monkeypatch.setattr(compile_workers, "KERNELS_PER_WORKER", 8)   # a worker per 8 kernels after the first
    assert [worker_count(n, {"compile_workers": 8}) for n in (8, 9, 17)] == [0, 1, 2]


def test_debugging_options_compile_past_the_pool(cache):
    cm = snipjit.compile(snipjit.parse_graph(MODEL), compile_workers=1)
    kernel_cache._cache = KernelCache(None)
    assert len(pending_jobs(cm.graph.nodes, cm.options)) == DISTINCT
    assert pending_jobs(cm.graph.nodes, {**cm.options, "checked": True}) == []
    assert pending_jobs(cm.graph.nodes, {**cm.options, "implementations": {"reference"}}) == []
