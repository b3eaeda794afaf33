"""Matrix products: snipjit's GEMM against ONNX Runtime (MLAS), OpenVINO and NumPy, and the FMA peak.

    python -m bench.gemm [--threads 2] [--rounds 7] [--shapes 128x384x1536,...]

Each shape (M×K×N, f32) is one MatMul of an input A [M, K] by constant weights B [K, N] (an ONNX
initializer). The engines run in this one process, alternated round by round, each timed for a fixed
time per round; the figure is the median over rounds, in GFLOP/s (2·M·K·N per product), with the ratio
to ONNX Runtime. The FMA peak is a register-only loop of independent FMAs generated with llvmlite at the
ISA level snipjit compiles for (SNIPJIT_ISA applies), on 1 thread and on `threads` threads.

With SNIPJIT_ISA forcing a level below the host's, the MLAS engines still run at the host's (MLAS
dispatches on CPUID alone; OpenVINO hands a MatMul by constant weights to its copy of MLAS too). The
peer at the forced level is then OpenVINO's oneDNN MatMul, capped by ONEDNN_MAX_CPU_ISA (set here before
OpenVINO loads), which OpenVINO uses when B is fed at run time: B is then an input of its model, given
the same array at every call (oneDNN may repack it per call, a K·N copy).
"""
from __future__ import annotations

import argparse
import ctypes
import math
import os
import statistics
import tempfile
import threading
import time
from typing import Callable

import numpy as np

SHAPES = ((128, 384, 1536), (128, 1536, 384), (1024, 384, 384), (1024, 768, 3072), (3136, 64, 64),
          (784, 1152, 128))
FMA_CHAINS = 12          # independent accumulators: covers the latency × ports of any current x86 core
FMA_ITERATIONS = 1 << 25   # about 50 ms: long enough for every thread to be running


def matmul_model(k: int, n: int, weights: np.ndarray) -> bytes:
    """A one-MatMul ONNX model: Y = A @ W with W an initializer, A [M, K] with a dynamic M."""
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "W"], ["Y"])], "matmul",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        [numpy_helper.from_array(weights, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def fed_weights_model(m: int, k: int, n: int) -> bytes:
    """A one-MatMul ONNX model: Y = A @ W with both operands inputs."""
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "W"], ["Y"])], "matmul",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k]),
         helper.make_tensor_value_info("W", TensorProto.FLOAT, [k, n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def snipjit_engine(model: bytes, a: np.ndarray, out: np.ndarray) -> Callable[[], None]:
    import snipjit
    request = snipjit.compile(model).create_request()
    return lambda: request.run({"A": a}, {"Y": out})


def model_engine(name: str, model: bytes, feeds: dict[str, np.ndarray], threads: int, folder: str
                 ) -> Callable[[], object] | None:
    """A `snipjit.benchmark` engine (onnxruntime, openvino) on `model` (saved in `folder`), or None when
    it is not installed."""
    from snipjit.benchmark import MODEL_ENGINES, EngineUnavailable
    path = os.path.join(folder, f"{name}-{len(os.listdir(folder))}.onnx")
    with open(path, "wb") as f:
        f.write(model)
    try:
        opened = MODEL_ENGINES[name].open(path, threads, feeds)
    except (ImportError, EngineUnavailable):
        return None
    return lambda: opened.run(feeds)


def numpy_engine(a: np.ndarray, w: np.ndarray, out: np.ndarray) -> Callable[[], None]:
    return lambda: np.matmul(a, w, out=out)


ONEDNN_ISA = {"avx512": "AVX512_CORE", "avx2": "AVX2", "sse": "SSE41"}   # oneDNN's names of the levels


def forced_level() -> str | None:
    """The ISA level SNIPJIT_ISA forces below the host's, or None."""
    from snipjit.targets import isa
    target = isa.current()
    return None if target.native else target.level.name


SETTLE_SECONDS = 0.05   # pause before each engine, so the spinning threads of the last one go idle


def seconds_per_call(fn: Callable[[], None], budget: float) -> float:
    """The mean time of `fn` over calls filling about `budget` seconds (after a pause and a first call)."""
    time.sleep(SETTLE_SECONDS)
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / calls


def fma_peak_kernel():
    """A ctypes function `f(iterations)` running FMA_CHAINS independent vector FMA chains; its flops per
    iteration; and the ISA level name."""
    from llvmlite import ir
    from snipjit.targets.llvm import jit
    level = jit.host().level
    lanes = level.f32_lanes
    vec = ir.VectorType(ir.FloatType(), lanes)
    i64 = ir.IntType(64)
    module = ir.Module("fma_peak")
    fn = ir.Function(module, ir.FunctionType(ir.FloatType(), [i64]), "fma_peak")
    fma = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{lanes}f32")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    x = ir.Constant(vec, [1.0 + 1e-7] * lanes)
    y = ir.Constant(vec, [1e-7] * lanes)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    acc = [b.phi(vec) for _ in range(FMA_CHAINS)]
    for j, phi in enumerate(acc):
        phi.add_incoming(ir.Constant(vec, [float(j)] * lanes), entry)
    new = [b.call(fma, [phi, x, y]) for phi in acc]
    for phi, value in zip(acc, new):
        phi.add_incoming(value, loop)
    step = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(step, loop)
    b.cbranch(b.icmp_signed("<", step, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = new[0]
    for value in new[1:]:
        total = b.fadd(total, value)
    b.ret(b.extract_element(total, ir.Constant(ir.IntType(32), 0)))
    compiled = jit.compile(str(module))
    return compiled.cfunc("fma_peak", ctypes.c_float, ctypes.c_int64), FMA_CHAINS * lanes * 2, level.name


def fma_peak(threads: int, rounds: int) -> float:
    """GFLOP/s of the FMA loop on `threads` threads at once (median over rounds)."""
    kernel, flops, _ = fma_peak_kernel()
    kernel(FMA_ITERATIONS // 16)
    rates = []
    for _ in range(rounds):
        workers = [threading.Thread(target=kernel, args=(FMA_ITERATIONS,)) for _ in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        rates.append(threads * FMA_ITERATIONS * flops / (time.perf_counter() - start) / 1e9)
    return statistics.median(rates)


def measure(shape: tuple[int, int, int], threads: int, rounds: int, budget: float, peer_level: str | None,
            folder: str) -> dict[str, float]:
    """GFLOP/s per engine for one shape (engines alternated each round; medians), after checking that
    snipjit's product matches NumPy's. With `peer_level`, OpenVINO runs its oneDNN MatMul (B fed) there."""
    m, k, n = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    model = matmul_model(k, n, w)
    from snipjit.memory.solver import aligned_array   # (ORT's outputs start on a cache line too; NumPy's do not)
    out = aligned_array((m, n))
    engines = {"snipjit": snipjit_engine(model, a, out),
               "onnxruntime": model_engine("onnxruntime", model, {"A": a}, threads, folder),
               "openvino": (model_engine("openvino", model, {"A": a}, threads, folder) if peer_level is None
                            else model_engine("openvino", fed_weights_model(m, k, n), {"A": a, "W": w}, threads,
                                              folder)),
               "numpy": numpy_engine(a, w, np.empty((m, n), np.float32))}
    engines = {name: fn for name, fn in engines.items() if fn is not None}
    engines["snipjit"]()
    reference = a.astype(np.float64) @ w.astype(np.float64)
    error = np.abs(out - reference).max() / np.abs(reference).max()
    if error > 1e-5:
        raise AssertionError(f"snipjit's {m}x{k}x{n} product is off by {error:.2e} (relative)")
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, fn in engines.items():
            times[name].append(seconds_per_call(fn, budget))
    return {name: 2 * m * k * n / statistics.median(t) / 1e9 for name, t in times.items()}


def layer_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The options of the one-process layer benchmarks (`bench.window`, `bench.conv`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--budget", type=float, default=0.2, help="seconds per engine per round")
    return parser


def use_threads(threads: int) -> None:
    """Every engine of this process on `threads` threads (set before snipjit and the peers start theirs)."""
    os.environ.setdefault("SNIPJIT_NUM_THREADS", str(threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def cpu_model() -> str:
    from snipjit.benchmark import machine_description
    return machine_description()["cpu"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gemm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-seconds", type=float, default=0.2)
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                        help="comma-separated MxKxN")
    args = parser.parse_args(argv)
    os.environ["SNIPJIT_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.threads == 1:   # NumPy's BLAS read the environment when NumPy was imported: it has every core
        from snipjit.runtime.parallel.blas_threads import single_threaded_here
        single_threaded_here()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    from snipjit.targets.llvm import jit
    host = jit.host()
    peer_level = forced_level()
    if peer_level is not None:   # read when OpenVINO's oneDNN starts: before it is imported
        os.environ["ONEDNN_MAX_CPU_ISA"] = ONEDNN_ISA[peer_level]
    peak1, peak = fma_peak(1, args.rounds), fma_peak(args.threads, args.rounds)
    print(f"CPU: {cpu_model()} ({host.cpu}); ISA level: {host.level.name}"
          f"{' (forced)' if peer_level else ''}; threads: {args.threads}")
    print(f"FMA peak: {peak1:.1f} GFLOP/s on 1 thread, {peak:.1f} on {args.threads}")
    ov = f"OV@{peer_level}" if peer_level else "OpenVINO"
    print(f"{'M x K x N':>18} {'snipjit':>9} {'ORT':>9} {ov:>10} {'NumPy':>9} {'vs ORT':>7} {'vs OV':>7} "
          f"{'of peak':>8}   (GFLOP/s)")
    ratios: dict[str, list[float]] = {"onnxruntime": [], "openvino": []}
    with tempfile.TemporaryDirectory() as folder:
        for shape in shapes:
            rate = measure(shape, args.threads, args.rounds, args.round_seconds, peer_level, folder)
            for peer, r in ratios.items():
                if peer in rate:
                    r.append(rate["snipjit"] / rate[peer])
            cells = [f"{rate[name]:{width}.1f}" if name in rate else f"{'-':>{width}}"
                     for name, width in (("snipjit", 9), ("onnxruntime", 9), ("openvino", 10), ("numpy", 9))]
            vs = [f"{rate['snipjit'] / rate[peer]:6.2f}x" if peer in rate else f"{'-':>7}" for peer in ratios]
            print(f"{'x'.join(map(str, shape)):>18} {' '.join(cells)} {' '.join(vs)} {rate['snipjit'] / peak:7.0%}",
                  flush=True)
    for peer, r in ratios.items():
        if r:
            geomean = math.exp(sum(math.log(x) for x in r) / len(r))
            label = ov if peer == "openvino" else "ORT"
            print(f"geometric mean vs {label}: {geomean:.2f}x; lowest: {min(r):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
