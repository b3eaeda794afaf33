"""The compile pool: a model's distinct uncached kernels compiled in worker processes into the kernel
cache, so the build only hits it; the same results as a serial compile; identical layers compiled once;
a kernel a worker fails on compiled (and its error raised) by the build; no workers when they cannot pay."""
import numpy as np
import pytest

import snipjit
from snipjit.runtime.planning import compile_workers
from snipjit.runtime.caches import kernel_cache, object_cache
from snipjit.runtime.implementations import gemm_launch, snippet_compile
from snipjit.runtime.planning.compile_workers import PoolReport, pending_jobs, worker_count
from snipjit.runtime.caches.kernel_cache import KernelCache
from snipjit.runtime.parallel import native_threads
from snipjit.runtime.parallel.native_threads import POOL_MODULE
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.gemm import MicroKernel

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


# ---- generated kernels (GEMM, convolution, window): named by the steps, compiled before the first run ----

def conv_network():
    """A 3-channel image through a planar conv, a depthwise conv with SiLU, a 1×1 conv and a max pool."""
    b = snipjit.GraphBuilder()
    x = b.input("x", "f32", [1, 3, 12, 12])
    y = b.Relu(b.Conv(x, b.const(rng.standard_normal((16, 3, 3, 3), dtype=np.float32) / 5), pads=[1, 1, 1, 1]))
    d = b.Conv(y, b.const(rng.standard_normal((16, 1, 3, 3), dtype=np.float32) / 3), group=16, pads=[1, 1, 1, 1])
    y = b.Mul(d, b.Sigmoid(d))
    y = b.Conv(y, b.const(rng.standard_normal((24, 16, 1, 1), dtype=np.float32) / 4))
    b.output(b.MaxPool(y, kernel_shape=[2, 2], strides=[2, 2]), "y")
    return b.build()


def pools():
    """A conv then max pools of three windows: 3×3/2 (on the input-reusing blocks), a 5×5 one larger than the
    9×9 image's last row of windows reaches, and the global one over the 5×5 map (the window is the image)."""
    b = snipjit.GraphBuilder()
    x = b.input("x", "f32", [1, 3, 18, 18])
    y = b.Relu(b.Conv(x, b.const(rng.standard_normal((16, 3, 3, 3), dtype=np.float32) / 5), pads=[1, 1, 1, 1]))
    y = b.MaxPool(y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = b.MaxPool(y, kernel_shape=[5, 5], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    b.output(b.GlobalMaxPool(y), "y")
    return b.build()


def mlp():
    """Products by constant weights: with a bias and Tanh, with a bias alone, a Gemm with Relu."""
    b = snipjit.GraphBuilder()
    x = b.input("x", "f32", [8, 32])   # (rows known: they choose whether the kernel asks for B ahead)
    y = b.Tanh(b.Add(b.MatMul(x, b.const(rng.standard_normal((32, 48), dtype=np.float32) / 6)),
                     b.const(rng.standard_normal(48, dtype=np.float32))))
    y = b.Add(b.MatMul(y, b.const(rng.standard_normal((48, 40), dtype=np.float32) / 7)),
              b.const(rng.standard_normal(40, dtype=np.float32)))
    b.output(b.Relu(b.Gemm(y, b.const(rng.standard_normal((24, 40), dtype=np.float32) / 6), transB=1)), "y")
    return b.build()


@pytest.mark.parametrize("graph, image, kernels", [(conv_network, [1, 3, 12, 12], 4), (pools, [1, 3, 18, 18], 4),
                                                   (mlp, [8, 32], None)])
def test_the_steps_name_the_generated_kernels_their_first_run_loads(graph, image, kernels, monkeypatch):
    """conv_network: the planar conv, the depthwise one, the product and the pool; pools: the conv and three
    max pools' kernels; mlp: the products' GEMM kernel with Tanh, and those without an activation of the second
    product and the Gemm (its Relu applied after it): one, where both take the same register block."""
    if kernels is None:
        kernels = 1 + len({gemm_launch.choose_kernel(n, k).shape for n, k in ((40, 48), (24, 40))})
    loaded = []
    real = object_cache._native
    monkeypatch.setattr(object_cache, "_native", lambda module, name, *rest: loaded.append(name) or
                        real(module, name, *rest))
    cm = snipjit.compile(graph(), compile_workers=1)
    named = {job.name for step in cm.plan for job in step.kernel.native_jobs()}
    assert len(named) == kernels
    cm.run({"x": rng.standard_normal(image, dtype=np.float32)})
    assert set(loaded) - {POOL_MODULE} == named


def unheld(monkeypatch):
    """Every generated kernel looks uncached (so the pool compiles it), and this process compiles none (but
    its thread pool's code, loaded first)."""
    native_threads.pool_code()
    monkeypatch.setattr(kernel_cache, "_offered", {})   # (what the workers send back, forgotten after the test)
    monkeypatch.setattr(object_cache.NativeJob, "held", lambda self: False)
    monkeypatch.setattr(compile_workers, "affinity_cpus", lambda: 8)

    def refused(*args, **kwargs):
        raise AssertionError("compiled in the parent")
    monkeypatch.setattr(object_cache, "compile_to_object", refused)


def test_generated_kernels_compile_in_workers_and_load_from_their_entries(monkeypatch, tmp_path):
    monkeypatch.setenv("SNIPJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SNIPJIT_CACHE", raising=False)
    graph = conv_network()
    want = snipjit.compile(graph, implementations={"reference"}, channels_last=False)
    x = rng.standard_normal((1, 3, 12, 12), dtype=np.float32)
    jobs = [job for step in snipjit.compile(graph, compile_workers=1).plan for job in step.kernel.native_jobs()]
    names = {job.name for job in jobs}
    monkeypatch.setattr(object_cache, "_loaded", {key: found for key, found in object_cache._loaded.items()
                                                  if key[0] not in names})   # (each loads its worker's entry)
    unheld(monkeypatch)
    seen: list[PoolReport] = []
    real = compile_workers.precompile_native
    monkeypatch.setattr(compile_workers, "precompile_native", lambda kernels, options: seen.append(
        real(list(kernels), options, compile_here=False)) or seen[-1])
    cm = snipjit.compile(graph, compile_workers=3)
    assert seen == [PoolReport(kernels=4, workers=2, compiled_in_workers=4)]
    assert all((tmp_path / "kernels" / f"{job.key}.o").exists() for job in jobs)   # and on disk
    np.testing.assert_allclose(cm.run({"x": x})[0], want.run({"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_generated_kernel_a_worker_cannot_compile_is_left_to_the_first_run(monkeypatch):
    host = jit.host()
    job = object_cache.NativeJob("gemm:gemm_module", MicroKernel(5, 1, host.level.f32_lanes, 3), "another-cpu",
                                 host.features)
    outcome = compile_workers.run_job(job)
    assert outcome.entry is None and "was chosen for another-cpu" in outcome.error
    assert not object_cache.accept_entry(job.key, b"not an entry")
    report = PoolReport()
    compile_workers._accept(compile_workers.Outcome("0" * 64, b"entry"), None, report, {job.key})
    assert "differs from its parent's" in report.failed["0" * 64] and report.compiled_in_workers == 0
    step = type("Step", (), {"native_jobs": lambda self: [job, job]})()
    for processes in (1, 8):   # one kernel (named twice), or one process: nothing started, nothing compiled
        assert compile_workers.precompile_native([step], {"compile_workers": processes}) == PoolReport(kernels=1)
