"""Depthwise convolutions and a max pool: snipjit's NHWC window kernel against ONNX Runtime.

    python -m bench.window [--threads 2] [--rounds 7] [--budget 0.2]

The shapes are MobileNet-V2's depthwise 3×3 convolutions (N=1, bias, Relu6 clamp) and ResNet's 3×3
stride-2 MaxPool. snipjit runs a prepared launch (`window_launch`, repeats=True) on an NHWC input into
an NHWC output, both 64-byte aligned as the runtime's arena places them; ONNX Runtime runs a one-node
ONNX model (Conv with group=C followed by Clip, or MaxPool)
in NCHW with its input and output bound once (IOBinding), so its time includes whatever layout handling
it does inside. The engines run in this one process, alternated round by round, each timed for a fixed
time per round; the figure is the median over rounds, in microseconds per call.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from bench.gemm import cpu_model, seconds_per_call

# (H, W, C, kernel, stride); pads 1 on every side
DEPTHWISE = ((112, 112, 32, 3, 1), (112, 112, 96, 3, 2), (56, 56, 144, 3, 1), (28, 28, 192, 3, 1),
             (14, 14, 384, 3, 1), (14, 14, 576, 3, 1), (7, 7, 960, 3, 1))
MAXPOOL = (112, 112, 64, 3, 2)


def onnx_model(kind: str, h: int, w: int, c: int, k: int, s: int, weights=None, bias=None) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[1, 1, 1, 1])
    oh, ow = (h + 2 - k) // s + 1, (w + 2 - k) // s + 1
    init = []
    if kind == "conv":
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], group=c, **attrs),
                 helper.make_node("Clip", ["t", "lo", "hi"], ["y"])]
        init = [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b"),
                numpy_helper.from_array(np.array(0, np.float32), "lo"),
                numpy_helper.from_array(np.array(6, np.float32), "hi")]
    else:
        nodes = [helper.make_node("MaxPool", ["x"], ["y"], **attrs)]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, oh, ow])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def ort_engine(model: bytes, x_nchw: np.ndarray, y_nchw: np.ndarray, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    binding.bind_cpu_input("x", x_nchw)
    binding.bind_output("y", "cpu", 0, np.float32, list(y_nchw.shape), y_nchw.ctypes.data)
    return lambda: session.run_with_iobinding(binding)


def measure(kind: str, shape: tuple, threads: int, rounds: int, budget: float) -> dict[str, float]:
    from snipjit.runtime.implementations import window_launch as wl
    h, w, c, k, s = shape
    from snipjit.memory.solver import aligned_empty
    rng = np.random.default_rng(0)
    x = aligned_empty(h * w * c * 4).view(np.float32).reshape(1, h, w, c)   # as the runtime's arena gives
    x[...] = rng.standard_normal((1, h, w, c), dtype=np.float32)
    weights = rng.standard_normal((c, 1, k, k), dtype=np.float32)
    bias = rng.standard_normal(c, dtype=np.float32)
    window = wl.Window((k, k), (s, s), (1, 1, 1, 1))
    oh, ow = window.output_size(h, w)
    out = aligned_empty(oh * ow * c * 4).view(np.float32).reshape(1, oh, ow, c)
    if kind == "conv":
        launch = wl.prepare_depthwise(x, wl.pack_depthwise(weights), bias, (0.0, 6.0), out, window, repeats=True)
    else:
        launch = wl.prepare_pool("max", x, out, window, repeats=True)
    x_nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    y_nchw = np.empty((1, c, oh, ow), np.float32)
    engines = {"snipjit": launch.run,
               "onnxruntime": ort_engine(onnx_model(kind, h, w, c, k, s, weights, bias), x_nchw, y_nchw, threads)}
    for fn in engines.values():
        fn()
    error = np.abs(out - y_nchw.transpose(0, 2, 3, 1)).max()
    if error > 1e-4 * max(1.0, np.abs(y_nchw).max()):
        raise AssertionError(f"snipjit's {kind} {shape} differs from ONNX Runtime's by {error:.2e}")
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, fn in engines.items():
            times[name].append(seconds_per_call(fn, budget))
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=0.2, help="seconds per engine per round")
    args = parser.parse_args(argv)
    import os
    os.environ.setdefault("SNIPJIT_NUM_THREADS", str(args.threads))
    from snipjit.targets.llvm import jit
    print(f"{cpu_model()}, LLVM CPU {jit.host().cpu}, ISA level {jit.host().level.name}, "
          f"{args.threads} threads; microseconds per call (median of {args.rounds} rounds)")
    print(f"{'op':>8} {'H×W×C k s':>18} {'snipjit':>9} {'ORT':>9} {'ORT/snipjit':>12}")
    rows = [("dwconv", shape) for shape in DEPTHWISE] + [("maxpool", MAXPOOL)]
    for name, shape in rows:
        r = measure("conv" if name == "dwconv" else "max", shape, args.threads, args.rounds, args.budget)
        h, w, c, k, s = shape
        print(f"{name:>8} {f'{h}×{w}×{c} {k} {s}':>18} {r['snipjit']:9.1f} {r['onnxruntime']:9.1f} "
              f"{r['onnxruntime'] / r['snipjit']:12.2f}")


if __name__ == "__main__":
    main()
