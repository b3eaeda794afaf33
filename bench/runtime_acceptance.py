"""Measures the runtime's acceptance figures and prints them (it asserts nothing):

  overhead  Python time per inference: a 200-node chain of tiny elementwise ops on 16 floats, one step
            per node (`fuse=False`): µs per node (target ≤ 5); the same chain fused into one kernel: µs
            per inference beyond the kernel's own time (target ≤ 30).
  memory    the BERT-style encoder at batch 8, sequence 128: peak RSS for the model against weights +
            planned arena (target ≤ 1.3×), and the arena against the sum of activations (target ≤ 0.5).
  threads   8 threads, each with its own request, for N seconds on the encoder give exactly the
            single-threaded results; `cm.run` from 8 threads likewise.
  compile   `snipjit.compile` in a fresh process with an empty kernel cache, then in another fresh
            process on the same cache directory: cold/warm compile time (target ≥ 5×) on ResNet-50
            from the ONNX light zoo and on the encoder.

    python bench/runtime_acceptance.py [--only overhead,memory,threads,compile] [--seconds 10]
                                       [--blas-threads N]

`--blas-threads N` sets OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) for the measuring processes: on a
loaded machine a multithreaded OpenBLAS can slow small products down by orders of magnitude.

Each section runs in its own interpreter (memory and cache figures need fresh ones). The machine may be
shared: the load average is printed, and timings are medians.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTIONS = ("overhead", "memory", "threads", "compile")
CHAIN_LENGTH = 200
CHAIN_ELEMENTS = 16


# ---- helpers --------------------------------------------------------------------------------------
def batch_times(fn, repeat: int, number: int, clock=time.perf_counter) -> list[float]:
    """The time of one call of `fn` in each of `repeat` batches of `number` calls, sorted."""
    times = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(number):
            fn()
        times.append((clock() - t0) / number)
    return sorted(times)


def median_seconds(fn, repeat: int, number: int, clock=time.perf_counter) -> float:
    """Median wall time; with clock=time.thread_time, the CPU time of this thread, which time spent
    waiting for a core on a loaded machine does not inflate (single-threaded work only)."""
    return statistics.median(batch_times(fn, repeat, number, clock))


def proc_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def bert():
    """The encoder's path and spec from bench/models.py, or None with the reason."""
    try:
        from bench import models
    except ImportError as e:
        return None, f"bench/models.py is not importable: {e}"
    try:
        spec = models.BertSpec()
        return (models, spec, models.bert_model(spec)), ""
    except ImportError as e:
        return None, f"exporting the encoder needs torch and transformers: {e}"


def resnet50() -> Path:
    import onnx
    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


# ---- overhead -------------------------------------------------------------------------------------
def elementwise_chain():
    """x: f32[16] through 200 tiny ops (unary, and binary with a scalar constant), bounded values."""
    import snipjit
    b = snipjit.GraphBuilder("chain")
    v = b.input("x", "f32", [CHAIN_ELEMENTS])
    half, shrink = b.const(np.float32(0.5)), b.const(np.float32(0.9))
    for i in range(CHAIN_LENGTH):
        kind = i % 5
        v = (b.Add(v, half) if kind == 0 else b.Mul(v, shrink) if kind == 1 else b.Neg(v) if kind == 2
             else b.Abs(v) if kind == 3 else b.Relu(v))
    b.output(v, "y")
    return b.build()


def kernel_call(step):
    """A call of a snippet step's compiled kernel alone, with arguments prepared once."""
    import ctypes
    kernel = step.kernel
    x = np.ones(CHAIN_ELEMENTS, np.float32)
    y = np.empty(CHAIN_ELEMENTS, np.float32)
    master = kernel.master_shape([x])
    ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data)
    dims = (ctypes.c_int64 * len(master))(*master)
    domain = int(np.prod(master[:kernel.compiled.parallel_rank]))
    scratch = kernel._scratchpad(master[-1] * 4 * kernel.compiled.scratch_rows)
    fn = kernel.fn
    return lambda: fn(ptrs, dims, 0, domain, scratch)   # the ABI of SnippetKernel._launch


def child_overhead(args) -> dict:
    import snipjit
    graph = elementwise_chain()
    x = np.linspace(-1, 1, CHAIN_ELEMENTS, dtype=np.float32)
    feeds = {"x": x}
    result = {}

    unfused = snipjit.compile(graph, fuse=False)
    req = unfused.create_request()
    expected = req.run(feeds)[0]
    times = batch_times(lambda: req.run(feeds), repeat=60, number=20)
    per_run, quick = statistics.median(times), times[len(times) // 10]
    c = np.float32(0.5)
    out = np.empty(CHAIN_ELEMENTS, np.float32)
    numpy_op = median_seconds(lambda: np.add(x, c, out=out), repeat=60, number=2000)
    result["unfused"] = {"steps": len(unfused.plan), "kinds": sorted({s.kind for s in unfused.plan}),
                         "us_per_inference": per_run * 1e6, "us_per_node": per_run * 1e6 / CHAIN_LENGTH,
                         "us_per_node_p10": quick * 1e6 / CHAIN_LENGTH,
                         "us_per_node_cpu": median_seconds(lambda: req.run(feeds), 60, 20, time.thread_time)
                         * 1e6 / CHAIN_LENGTH, "us_numpy_op_alone": numpy_op * 1e6,
                         "us_cm_run_per_node": median_seconds(lambda: unfused.run(feeds), 60, 20) * 1e6 / CHAIN_LENGTH}

    fused = snipjit.compile(graph)
    req = fused.create_request()
    got = req.run(feeds)[0]
    buf = np.empty(CHAIN_ELEMENTS, np.float32)
    per_run = median_seconds(lambda: req.run(feeds), repeat=60, number=200)
    per_run_cpu = median_seconds(lambda: req.run(feeds), repeat=60, number=200, clock=time.thread_time)
    into = median_seconds(lambda: req.run(feeds, outputs={"y": buf}), repeat=60, number=200)
    entry = {"steps": len(fused.plan), "kinds": [s.kind for s in fused.plan],
             "us_per_inference": per_run * 1e6, "us_per_inference_into_buffer": into * 1e6,
             "us_cm_run": median_seconds(lambda: fused.run(feeds), 60, 200) * 1e6,
             "max_abs_diff_vs_unfused": float(np.max(np.abs(got - expected)))}
    if len(fused.plan) == 1 and fused.plan[0].kind == "snippet":
        kernel = median_seconds(kernel_call(fused.plan[0]), repeat=60, number=2000)
        kernel_cpu = median_seconds(kernel_call(fused.plan[0]), repeat=60, number=2000, clock=time.thread_time)
        entry |= {"us_kernel_alone": kernel * 1e6, "us_beyond_kernel": (per_run - kernel) * 1e6,
                  "us_beyond_kernel_cpu": (per_run_cpu - kernel_cpu) * 1e6,
                  "us_beyond_kernel_into_buffer": (into - kernel) * 1e6}
    result["fused"] = entry
    return result


def report_overhead(r: dict) -> None:
    u, f = r["unfused"], r["fused"]
    print(f"  unfused: {u['steps']} steps ({', '.join(u['kinds'])}), {u['us_per_inference']:.0f} µs per inference")
    print(f"    per node: {u['us_per_node']:.2f} µs with Request.run (fastest tenth of batches "
          f"{u['us_per_node_p10']:.2f} µs; thread CPU time {u['us_per_node_cpu']:.2f} µs), "
          f"{u['us_cm_run_per_node']:.2f} µs with cm.run  (target ≤ 5; a NumPy op on 16 floats alone: "
          f"{u['us_numpy_op_alone']:.2f} µs)")
    print(f"  fused: {f['steps']} step(s) {f['kinds']}, {f['us_per_inference']:.1f} µs per inference "
          f"(cm.run {f['us_cm_run']:.1f} µs, into a caller buffer {f['us_per_inference_into_buffer']:.1f} µs); "
          f"max |fused - unfused| = {f['max_abs_diff_vs_unfused']:.2g}")
    if "us_kernel_alone" in f:
        print(f"    kernel alone {f['us_kernel_alone']:.2f} µs; beyond the kernel: {f['us_beyond_kernel']:.1f} µs "
              f"(thread CPU time {f['us_beyond_kernel_cpu']:.1f} µs; into a caller buffer "
              f"{f['us_beyond_kernel_into_buffer']:.1f} µs)  (target ≤ 30)")
    else:
        print("    the chain did not fuse into one snippet kernel: no kernel-alone figure")


# ---- memory ---------------------------------------------------------------------------------------
def warm_up_runtime() -> None:
    """Initialise what every model pays for once per process: the LLVM JIT, the thread pool, BLAS."""
    import snipjit
    g = snipjit.parse_graph("graph(x: f32[64,64]) -> [y] {\n [t] = Tanh(x)\n [y] = MatMul(t, x)\n}")
    cm = snipjit.compile(g)
    assert [s.kind for s in cm.plan] == ["snippet", "blas"], cm.plan
    cm.run({"x": np.ones((64, 64), np.float32)})


def child_memory(args) -> dict:
    found, why = bert()
    if found is None:
        return {"skipped": why}
    models, spec, path = found
    feeds = models.bert_feeds(8, 128, spec.vocab, np.random.default_rng(0))
    import snipjit
    gc.collect()
    process = proc_status()["VmRSS"]
    warm_up_runtime()
    gc.collect()
    baseline = proc_status()["VmRSS"]
    t0 = time.perf_counter()
    cm = snipjit.compile(str(path))
    compile_s = time.perf_counter() - t0
    gc.collect()
    after_compile = proc_status()["VmRSS"]
    peak_reset = reset_peak()
    req = cm.create_request()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        outputs = req.run(feeds)
        times.append(time.perf_counter() - t0)
    status = proc_status()
    import tracemalloc
    tracemalloc.start()
    outputs = req.run(feeds)
    transient = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    plan = next(p for key, p in cm.program.plans().items() if key[0][1] == (8, 128))
    weights = sum(data.nbytes for _, data in cm.program.constants)
    reference = snipjit.compile(str(path), fuse=False, implementations={"reference"}).run(feeds)
    diff = max(float(np.max(np.abs(o - r))) for o, r in zip(outputs, reference))
    return {"process": process, "baseline": baseline, "after_compile": after_compile, "peak": status["VmHWM"],
            "rss_after_runs": status["VmRSS"], "peak_reset": peak_reset, "weights": weights,
            "arena": plan.memory.arena_size, "activations": plan.activation_bytes,
            "outputs": sum(o.nbytes for o in outputs), "planned_buffers": len(plan.arena_slots),
            "total_without_reuse": plan.memory.total_size, "compile_s": compile_s, "run_s": times,
            "transient": transient, "max_abs_diff_vs_reference": diff}


def report_memory(r: dict) -> None:
    if "skipped" in r:
        print(f"  skipped: {r['skipped']}")
        return
    budget = r["weights"] + r["arena"]
    during = r["peak"] - r["after_compile"]
    print(f"  compile {r['compile_s']:.1f} s; runs (the first binds the arena): "
          + ", ".join(f"{t:.2f} s" for t in r["run_s"])
          + f"; max |output - reference-only run| = {r['max_abs_diff_vs_reference']:.2g}")
    print(f"  weights {mib(r['weights'])}, planned arena {mib(r['arena'])} ({r['planned_buffers']} buffers, "
          f"{mib(r['total_without_reuse'])} without reuse), outputs {mib(r['outputs'])}, "
          f"activations {mib(r['activations'])}")
    print(f"  RSS: after imports {mib(r['process'])}, after initialising the JIT/threads/BLAS on a tiny model "
          f"{mib(r['baseline'])}, after compile {mib(r['after_compile'])}, peak during inference {mib(r['peak'])}"
          + ("" if r["peak_reset"] else " (peak not resettable: includes compile)"))
    for label, base in (("the model", r["baseline"]), ("the model and the runtime's one-off cost", r["process"])):
        used = r["peak"] - base
        print(f"  peak for {label}: {mib(used)} = {used / budget:.2f}x (weights + arena)  (target ≤ 1.3)")
    print(f"  growth during inference (peak - RSS after compile) {mib(during)} = "
          f"{during / (r['arena'] + r['outputs']):.2f}x (arena + outputs); NumPy allocations during one "
          f"steady-state run peak at {mib(r['transient'])} (outputs and temporaries outside the arena)")
    print(f"  arena / activations = {r['arena'] / r['activations']:.3f}  (target ≤ 0.5)")


# ---- threads --------------------------------------------------------------------------------------
def child_threads(args) -> dict:
    found, why = bert()
    if found is None:
        return {"skipped": why}
    models, spec, path = found
    import snipjit
    cm = snipjit.compile(str(path))
    rng = np.random.default_rng(1)
    cases = [models.bert_feeds(batch, seq, spec.vocab, rng) for batch, seq in ((1, 128), (2, 64), (1, 32))]
    single = cm.create_request()
    expected = [single.run(f) for f in cases]

    def scenario(run_for_thread) -> dict:
        deadline = time.perf_counter() + args.seconds
        stats = [{"runs": 0, "mismatches": 0, "max_abs_diff": 0.0} for _ in range(8)]
        errors = []

        def body(k):
            s = stats[k]
            run = run_for_thread(k)
            try:
                while time.perf_counter() < deadline:
                    i = (k + s["runs"]) % len(cases)
                    got = run(cases[i])
                    diff = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected[i]))
                    s["mismatches"] += any(not np.array_equal(g, e) for g, e in zip(got, expected[i]))
                    s["max_abs_diff"] = max(s["max_abs_diff"], diff)
                    s["runs"] += 1
            except Exception as e:   # reported, not raised: the figures are the point
                errors.append(f"thread {k}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=body, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"runs": sum(s["runs"] for s in stats), "min_runs": min(s["runs"] for s in stats),
                "mismatches": sum(s["mismatches"] for s in stats),
                "max_abs_diff": max(s["max_abs_diff"] for s in stats), "errors": errors}

    requests = [cm.create_request() for _ in range(8)]
    return {"cases": [[list(a.shape) for a in f.values()][0] for f in cases], "seconds": args.seconds,
            "own_request": scenario(lambda k: requests[k].run), "cm_run": scenario(lambda k: cm.run)}


def report_threads(r: dict) -> None:
    if "skipped" in r:
        print(f"  skipped: {r['skipped']}")
        return
    print(f"  encoder inputs cycling through [batch, seq] {r['cases']}, 8 threads x {r['seconds']:.0f} s each")
    for name, label in (("own_request", "own request per thread"), ("cm_run", "cm.run from every thread")):
        s = r[name]
        same = "identical" if s["mismatches"] == 0 and not s["errors"] else "NOT identical"
        print(f"  {label}: {s['runs']} runs (fewest in one thread {s['min_runs']}), {s['mismatches']} differ "
              f"from the single-thread results (max |diff| {s['max_abs_diff']:.2g}): {same}")
        for e in s["errors"]:
            print(f"    error: {e}")


# ---- compile --------------------------------------------------------------------------------------
def child_compile_once(args) -> dict:
    """One timed compile (in a fresh interpreter), and a second one in the same process."""
    import snipjit
    from snipjit.compiler import load_graph
    from snipjit.runtime.caches.kernel_cache import get_kernel_cache
    t0 = time.perf_counter()
    load_graph(args.model)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cm = snipjit.compile(args.model)
    compile_s = time.perf_counter() - t0
    cache = get_kernel_cache()
    passes_s = sum(r.seconds for r in cm.history)
    lookups = {"misses": cache.misses, **cache.hits}
    t0 = time.perf_counter()
    snipjit.compile(args.model)
    again_s = time.perf_counter() - t0
    return {"compile_s": compile_s, "load_s": load_s, "passes_s": passes_s, "cache": lookups,
            "same_process_s": again_s, "steps": len(cm.plan),
            "kernels": sum(1 for s in cm.plan if s.kind == "snippet")}


def run_compile(args) -> dict:
    models = {"resnet50": resnet50()}
    found, why = bert()
    if found is not None:
        models["bert"] = found[2]
    results = {} if found is not None else {"bert": {"skipped": why}}
    for name, path in models.items():
        if not Path(path).exists():
            results[name] = {"skipped": f"{path} not found"}
            continue
        with tempfile.TemporaryDirectory(prefix="snipjit-cache-") as cache_dir:
            env = {"SNIPJIT_CACHE_DIR": cache_dir}
            cold = run_child("compile-once", env, ["--model", str(path)])
            warm = run_child("compile-once", env, ["--model", str(path)])
        results[name] = {"cold": cold, "warm": warm}
    return results


def report_compile(r: dict) -> None:
    for name, entry in r.items():
        if "skipped" in entry:
            print(f"  {name}: skipped: {entry['skipped']}")
            continue
        cold, warm = entry["cold"], entry["warm"]
        if "error" in cold or "error" in warm:
            print(f"  {name}: failed: {cold.get('error') or warm.get('error')}")
            continue
        print(f"  {name}: {cold['steps']} steps, {cold['kernels']} snippet kernels")
        for label, e in (("cold", cold), ("warm", warm)):
            rest = e["compile_s"] - e["load_s"] - e["passes_s"]
            print(f"    {label}: {e['compile_s']:.2f} s (loading the model {e['load_s']:.2f} s, graph passes "
                  f"{e['passes_s']:.2f} s, program build incl. kernels {rest:.2f} s); kernel cache {e['cache']}; "
                  f"a second compile in that process {e['same_process_s']:.2f} s")
        print(f"    cold / warm = {cold['compile_s'] / warm['compile_s']:.1f}x  (target ≥ 5)")


# ---- driver ---------------------------------------------------------------------------------------
CHILDREN = {"overhead": child_overhead, "memory": child_memory, "threads": child_threads,
            "compile-once": child_compile_once}


def run_child(section: str, env: dict | None = None, extra: list[str] = ()) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", section, *extra]
    if section == "threads":
        command += ["--seconds", str(ARGS.seconds)]
    proc = subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def main(argv=None) -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections: " + ", ".join(SECTIONS))
    parser.add_argument("--seconds", type=float, default=10.0, help="per threads scenario (default 10)")
    parser.add_argument("--blas-threads", type=int, help="OPENBLAS_NUM_THREADS for the measuring processes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    ARGS = args = parser.parse_args(argv)
    if args.blas_threads:
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.blas_threads)
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return 0

    print(f"snipjit runtime acceptance; {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; SNIPJIT_NUM_THREADS="
          f"{os.environ.get('SNIPJIT_NUM_THREADS', '(all)')}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '(all)')}")
    reports = {"overhead": report_overhead, "memory": report_memory, "threads": report_threads,
               "compile": report_compile}
    for section in [s.strip() for s in args.only.split(",") if s.strip()]:
        print(f"\n== {section} ==")
        t0 = time.perf_counter()
        result = run_compile(args) if section == "compile" else run_child(section)
        if "error" in result:
            print(f"  failed: {result['error']}")
        else:
            reports[section](result)
        print(f"  ({time.perf_counter() - t0:.0f} s; load average now {os.getloadavg()[0]:.1f})")
    return 0


ARGS: argparse.Namespace


if __name__ == "__main__":
    sys.exit(main())
