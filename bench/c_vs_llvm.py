"""The C target against the LLVM target: compile time per kernel and kernel speed.

    python bench/c_vs_llvm.py [--runs 20] [--threads N]

For each workload the fused body is compiled by both targets (the kernel cache off, so every compile is
real) and the model runs through `snipjit.compile(model, target=...)`. Columns:

    compile   seconds in the target's `compile_kernel` per kernel (C: emit source + gcc + dlopen; LLVM:
              emit IR + optimise + codegen + load), median of 3 compiles
    run       milliseconds per run of the compiled model: the median (and the minimum) over `--runs` runs,
              C and LLVM runs interleaved so that load from other processes hits both alike
    kernel    nanoseconds per element of the kernel alone, one thread, on the first rows of the parallel
              domain (about 256 KB of data, so in cache): the minimum over 200 interleaved calls, the
              number least disturbed by other processes

The kernels' results are checked against each other on the benchmark inputs (max relative difference).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import snipjit  # noqa: E402
from snipjit import parse_graph  # noqa: E402
from snipjit.runtime.caches import kernel_cache  # noqa: E402
from snipjit.snippets.subgraph_compiler import compile_subgraph  # noqa: E402
from snipjit.targets import get_target  # noqa: E402

WORKLOADS = {
    "(x*2+y)^2 [16,1024,1024]": ("""graph(x: f32[16,1024,1024], y: f32[16,1024,1024]) -> [z] {
        const two: f32[] = 2.0
        [a] = Mul(x, two)
        [b] = Add(a, y)
        [z] = Mul(b, b)
    }""", [(16, 1024, 1024), (16, 1024, 1024)]),
    "erf-GELU [16,512,3072]": ("""graph(x: f32[16,512,3072]) -> [y] {
        [y] = Gelu(x)
    }""", [(16, 512, 3072)]),
    "softmax [8,12,128,128]": ("""graph(x: f32[8,12,128,128]) -> [y] {
        [y] = Softmax(x) {axis=-1}
    }""", [(8, 12, 128, 128)]),
    "layernorm [64,128,768]": ("""graph(x: f32[64,128,768], g: f32[768], b: f32[768]) -> [y] {
        [y] = LayerNormalization(x, g, b) {axis=-1, epsilon=1e-5}
    }""", [(64, 128, 768), (768,), (768,)]),
}


def compile_seconds(body, target, repeats: int = 3) -> float:
    """Median seconds in target.compile_kernel for this body."""
    times = []
    original = target.compile_kernel

    def timed(lir, name):
        t0 = time.perf_counter()
        kernel = original(lir, name)
        times.append(time.perf_counter() - t0)
        return kernel

    target.compile_kernel = timed
    try:
        for _ in range(repeats):
            compile_subgraph(body, target, name="bench_kernel")
    finally:
        del target.compile_kernel
    return statistics.median(times)


def fused_body(graph):
    model = snipjit.compile(graph, target="llvm")
    (step,) = [s for s in model.plan if s.kind == "snippet"]
    return step.node.attrs["body"]


def run_ms(models: dict, feeds, runs: int) -> dict[str, list[float]]:
    """Milliseconds per run of each model, runs interleaved (after one warm-up run each)."""
    times: dict[str, list[float]] = {t: [] for t in models}
    for model in models.values():
        model.run(feeds)
    for _ in range(runs):
        for t, model in models.items():
            t0 = time.perf_counter()
            model.run(feeds)
            times[t].append(1e3 * (time.perf_counter() - t0))
    return times


def kernel_ns_per_element(models: dict, feeds: dict, calls: int = 200) -> dict[str, float]:
    """Single-thread time of each model's fused kernel on cache-resident rows, min over interleaved calls."""
    setup = {}
    for t, model in models.items():
        (step,) = [s for s in model.plan if s.kind == "snippet"]
        compiled = step.kernel.compiled
        arrays = [np.ascontiguousarray(feeds[v.name]) for v in model.graph.inputs]
        master = np.broadcast_shapes(*(a.shape for a in arrays))
        outs = [np.empty(master, np.float32) for _ in step.node.outputs]
        domain = int(np.prod(master[:compiled.parallel_rank]))
        row_elements = int(np.prod(master[compiled.parallel_rank:]))
        rows = max(1, min(domain, (256 << 10) // (4 * row_elements * (len(arrays) + len(outs)))))
        ptrs = (ctypes.c_void_p * (len(arrays) + len(outs)))(*[a.ctypes.data for a in arrays],
                                                             *[o.ctypes.data for o in outs])
        dims = (ctypes.c_int64 * len(master))(*master)
        scratch = np.empty(max(1, compiled.scratch_rows) * master[-1] + 64, np.float32)
        setup[t] = (compiled.kernel.fn, ptrs, dims, rows, scratch, rows * row_elements, arrays, outs)
    best = {t: float("inf") for t in models}
    for _ in range(calls):
        for t, (fn, ptrs, dims, rows, scratch, elements, *_keep) in setup.items():
            t0 = time.perf_counter_ns()
            fn(ptrs, dims, 0, rows, scratch.ctypes.data)
            best[t] = min(best[t], (time.perf_counter_ns() - t0) / elements)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    kernel_cache._cache = kernel_cache.KernelCache(None)   # every compile is real
    targets = {name: get_target(name) for name in ("c", "llvm")}
    print(f"C compiler: {targets['c'].compiler.version}; {targets['c'].vector_lanes} lanes")
    print(f"{'workload':28s} {'compile C s':>11s} {'compile LLVM s':>14s} {'run C ms':>15s} {'run LLVM ms':>15s} "
          f"{'kernel C ns/el':>14s} {'kernel LLVM ns/el':>17s} {'max rel diff':>13s}")
    rng = np.random.default_rng(0)
    for name, (text, shapes) in WORKLOADS.items():
        graph = parse_graph(text)
        feeds = {v.name: rng.normal(0, 1.5, shape).astype(np.float32) for v, shape in zip(graph.inputs, shapes)}
        body = fused_body(graph)
        compile_s = {t: compile_seconds(body, target) for t, target in targets.items()}
        models = {t: snipjit.compile(graph, target=t) for t in targets}
        run = run_ms(models, feeds, args.runs)
        kernel = kernel_ns_per_element(models, feeds)
        out = {t: np.asarray(model.run(feeds)[0], np.float64) for t, model in models.items()}
        with np.errstate(all="ignore"):
            diff = np.nanmax(np.abs(out["c"] - out["llvm"]) / np.maximum(np.abs(out["llvm"]), 1e-30))
        med = {t: statistics.median(v) for t, v in run.items()}
        cols = [f"{med[t]:7.2f} ({min(run[t]):5.2f})" for t in ("c", "llvm")]
        print(f"{name:28s} {compile_s['c']:11.3f} {compile_s['llvm']:14.3f} {cols[0]:>15s} {cols[1]:>15s} "
              f"{kernel['c']:14.3f} {kernel['llvm']:17.3f} {diff:13.2e}")


if __name__ == "__main__":
    main()
