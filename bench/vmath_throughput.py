"""Single-thread throughput of snipjit's vector math, in G elements/s.

    python bench/vmath_throughput.py [--ops exp,erf,...] [--runs 9] [--baseline other/vmath.py]

Each op runs in a JIT kernel ``void f(float* x, [float* y,] float* out, i64 n)`` shaped like the
loops snipjit's fused kernels compile to: full vectors of the host's width (16 lanes with
AVX-512) with plain loads and stores, then one masked vector for the remainder. Columns:

    cache   32K elements (in L2) timed over many passes: the cost of the math alone
    4M      4M elements (16 MB in, 16 MB out), one pass per run: memory included, like a fused
            elementwise kernel on a large tensor
    4M wide the same over each op's whole interesting range (the ranges the accuracy test samples
            densely), where NaN, infinities, overflow and underflow lanes take the slow paths

Inputs are standard normal, as in the benchmark suite's elementwise workloads (log, log1p, sqrt,
rsqrt, acosh and pow's base take absolute values plus one; asin, acos and atanh take values
scaled into (-1, 1)). Every number is the median over ``--runs`` runs of the thread's CPU time
(``time.thread_time``), which other processes on a busy machine do not inflate the way they do
wall-clock time; ``copy`` (the kernel with no math) is the memory reference. ``--baseline`` also
times another vmath module with the same ``OPS``/``emit`` interface (say, an older standalone
vmath.py), its runs alternated with snipjit's so that load from other processes hits both alike,
and prints both rates and snipjit's speed relative to the baseline.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np
from llvmlite import ir

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snipjit.targets.llvm import jit, vmath  # noqa: E402
from snipjit.targets.llvm.array_map import map_kernel  # noqa: E402

LARGE = 4 * 1024 * 1024
SMALL = 32 * 1024
SMALL_PASSES = 32

# Op parameters and input domains; ops not listed take standard normal input.
PARAMS = {"leaky_relu": {"alpha": 0.1}, "elu": {"alpha": 1.0}, "clip": {"lo": -1.0, "hi": 1.0},
          "pow_static": {"exponent": 1.5}}
POSITIVE = {"log", "log1p", "sqrt", "rsqrt", "acosh", "pow_static"}
UNIT = {"asin", "acos", "atanh"}
WIDE = {  # the accuracy test's dense ranges
    "exp": (-105.0, 90.0), "expm1": (-20.0, 90.0), "log": (0.0, 4.0), "log1p": (-1.0, 4.0),
    "sigmoid": (-110.0, 30.0), "silu": (-110.0, 30.0), "softplus": (-110.0, 30.0),
    "mish": (-110.0, 30.0), "erf": (-5.0, 5.0), "erfc": (-5.0, 11.0), "gelu_erf": (-15.0, 6.0),
    "gelu_tanh": (-12.0, 6.0), "sqrt": (0.0, 100.0), "rsqrt": (0.0, 100.0),
    "sin": (-100.0, 100.0), "cos": (-100.0, 100.0), "tan": (-100.0, 100.0),
    "asin": (-1.0, 1.0), "acos": (-1.0, 1.0), "atanh": (-1.0, 1.0), "sinh": (-95.0, 95.0),
    "cosh": (-95.0, 95.0), "acosh": (1.0, 10.0), "pow_static": (-4.0, 4.0), "pow": (0.0, 10.0),
}


# ---------------------------------------------------------------- kernels

def compile_kernels(bodies: dict[str, tuple[Callable[..., ir.Value], int]], width: int) -> dict[str, Callable]:
    """name -> (body, arity) compiled into one module; returns ctypes callables."""
    module = ir.Module(name="vmath_throughput")
    for name, (body, arity) in bodies.items():
        map_kernel(module, name, body, arity, width)
    compiled = jit.compile(module)
    return {
        name: compiled.cfunc(name, None, *[ctypes.c_void_p] * (arity + 1), ctypes.c_int64)
        for name, (_, arity) in bodies.items()
    }


# ---------------------------------------------------------------- inputs and timing

def inputs(op: str, arity: int, n: int, wide: bool, rng: np.random.Generator) -> list[np.ndarray]:
    if wide and op in WIDE:
        x = rng.uniform(*WIDE[op], n)
    else:
        x = rng.standard_normal(n)
        if op in POSITIVE or op == "pow":
            x = np.abs(x) + 1.0
        elif op in UNIT:
            x = np.tanh(x)
    if arity == 2:
        return [x.astype(np.float32), rng.uniform(-3.0, 3.0, n).astype(np.float32)]
    return [x.astype(np.float32)]


def seconds_per_element(kernels: list[Callable], arrays: list[np.ndarray], passes: int,
                        runs: int) -> list[float]:
    """For each kernel, the median over ``runs`` of its time per element; runs alternate kernels."""
    out = np.empty_like(arrays[0])  # touched by the warm-up run, so no page faults are timed
    args = [a.ctypes.data for a in arrays] + [out.ctypes.data, out.size]
    times: list[list[float]] = [[] for _ in kernels]
    for kernel in kernels:
        kernel(*args)
    for _ in range(runs):
        for kernel, samples in zip(kernels, times):
            start = time.thread_time()
            for _ in range(passes):
                kernel(*args)
            samples.append((time.thread_time() - start) / passes)
    return [statistics.median(samples) / out.size for samples in times]


def load_vmath(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("vmath_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma-separated op names (default: all)")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--baseline", help="also time this vmath module, alternated with snipjit's")
    args = parser.parse_args(argv)
    modules = [vmath] + ([load_vmath(args.baseline)] if args.baseline else [])
    ops = args.ops.split(",") if args.ops else [op for op in vmath.OPS if all(op in m.OPS for m in modules)]
    width = jit.host().vector_lanes(32)

    def body(module: ModuleType, op: str) -> Callable[..., ir.Value]:
        return lambda b, *xs: module.emit(b, op, *xs, **PARAMS.get(op, {}))

    kernels = []
    for module in modules:
        bodies = {"copy": (lambda b, x: x, 1)}
        bodies.update({op: (body(module, op), module.OPS[op].arity) for op in ops})
        kernels.append(compile_kernels(bodies, width))

    rng = np.random.default_rng(0)
    print(f"{width} lanes, {jit.host().cpu}; G elements/s, median of {args.runs} runs")
    header = f"{'op':16}{'cache':>8}{'4M':>8}{'4M wide':>9}"
    if args.baseline:
        header += f"   baseline:{'cache':>8}{'4M':>8}{'4M wide':>9}   speed vs baseline"
    print(header)
    for name in kernels[0]:
        arity = 1 if name == "copy" else vmath.OPS[name].arity
        rates = []
        for n, passes, wide in ((SMALL, SMALL_PASSES, False), (LARGE, 1, False), (LARGE, 1, True)):
            arrays = inputs(name, arity, n, wide, rng)
            seconds = seconds_per_element([k[name] for k in kernels], arrays, passes, args.runs)
            rates.append([1e-9 / s for s in seconds])
        line = f"{name:16}" + "".join(f"{r[0]:{w}.2f}" for r, w in zip(rates, (8, 8, 9)))
        if args.baseline:
            line += " " * 12 + "".join(f"{r[1]:{w}.2f}" for r, w in zip(rates, (8, 8, 9)))
            line += "   " + " ".join(f"{r[0] / r[1]:5.2f}" for r in rates)
        print(line, flush=True)


if __name__ == "__main__":
    main()
