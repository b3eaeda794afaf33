"""Depthwise convolutions and a max pool: snipjit's NHWC window kernel against ONNX Runtime.

    python -m bench.window [--threads 2] [--rounds 7] [--budget 0.2] [--kernels 3,5,7]

The shapes are the depthwise convolutions (N=1, bias, Relu6 clamp) of MobileNet-V2 (3×3), EfficientNet-B0
(5×5) and ConvNeXt (7×7), and ResNet's 3×3 stride-2 MaxPool. snipjit runs a prepared launch
(`window_launch`, repeats=True) on an NHWC input into an NHWC output, both 64-byte aligned as the runtime's
arena places them; ONNX Runtime runs a one-node ONNX model (Conv with group=C followed by Clip, or MaxPool)
in NCHW with its input and output bound once (IOBinding), so its time includes whatever layout handling
it does inside. The engines run in this one process, alternated round by round, each timed for a fixed
time per round; the figure is the median over rounds, in microseconds per call.

The streaming limit is bench/stream.c (`bench.stream`, the elementwise suite's stream-limit engine) moving
the bytes the layer must move at least, on the same threads: reading the input and the weights once and
writing the output once. It streams an output-sized array out of each output-sized piece of one buffer
as large as input and weights, and reads what is left over in a second call; "limit" is the kernel's
share of it (limit time / kernel time), 100% at the bandwidth of a plain streaming loop; the limit's time is
its fastest round (a busy core stalls its static split), the engines' the median; the limits are measured
first, before ONNX Runtime's threads exist. "FMA bound" is the time of the layer's multiply-adds at the FMA
peak (`bench.gemm`'s register-only loop, measured again before each round of the layer, as `bench.conv` does:
this machine's clock moves between phases of seconds, and a peak taken once skews every ratio of the run), at
the median of the layer's rounds: a layer whose FMA bound exceeds its streaming limit cannot reach the limit;
"of bound" is the median over rounds of the larger of the two (at that round's peak) over the kernel's time.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from bench.gemm import SETTLE_SECONDS, cpu_model, fma_peak, layer_parser, seconds_per_call, use_threads

# (H, W, C, kernel, stride); pads kernel // 2 on every side
DEPTHWISE = ((112, 112, 32, 3, 1), (112, 112, 96, 3, 2), (56, 56, 144, 3, 1), (28, 28, 192, 3, 1),   # MobileNet-V2
             (14, 14, 384, 3, 1), (14, 14, 576, 3, 1), (7, 7, 960, 3, 1),
             (56, 56, 144, 5, 2), (28, 28, 240, 5, 1), (14, 14, 480, 5, 1), (14, 14, 672, 5, 1),   # EfficientNet-B0
             (14, 14, 672, 5, 2), (7, 7, 1152, 5, 1),
             (56, 56, 96, 7, 1), (28, 28, 192, 7, 1), (14, 14, 384, 7, 1), (7, 7, 768, 7, 1))   # ConvNeXt-T
MAXPOOL = (112, 112, 64, 3, 2)


def onnx_model(kind: str, h: int, w: int, c: int, k: int, s: int, weights=None, bias=None) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    pad = k // 2
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
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


def stream_limit(read: int, written: np.ndarray, threads: int):
    """A call of the stream kernel reading `read` floats and writing `written` (float32) once."""
    from bench import stream
    n = written.size
    source = np.empty(read, np.float32)
    source[...] = 1
    pieces, left = divmod(read, n)
    calls = [stream.bind([source[i * n:(i + 1) * n] for i in range(pieces)], [written.reshape(-1)], threads)]
    if left:
        calls.append(stream.bind([source[pieces * n:]], [], threads))
    return lambda: [call() for call in calls]


def _arrays(kind: str, shape: tuple):
    """The layer's input, weights, bias, window and output (NHWC, 64-byte aligned as the arena places them)."""
    from snipjit.memory.solver import aligned_array
    from snipjit.runtime.implementations import window_launch as wl
    h, w, c, k, s = shape
    rng = np.random.default_rng(0)
    x = aligned_array((1, h, w, c))
    x[...] = rng.standard_normal((1, h, w, c), dtype=np.float32)
    weights = rng.standard_normal((c, 1, k, k), dtype=np.float32)
    bias = rng.standard_normal(c, dtype=np.float32)
    window = wl.Window((k, k), (s, s), (k // 2,) * 4)
    oh, ow = window.output_size(h, w)
    out = aligned_array((1, oh, ow, c))
    return x, weights, bias, window, out


def limit(kind: str, shape: tuple, threads: int, rounds: int, budget: float) -> float:
    """The streaming limit of a layer, µs: the stream kernel's fastest round (its OpenMP loop splits
    statically, so a core taken by another process stalls a whole round of it)."""
    x, weights, bias, _, out = _arrays(kind, shape)
    call = stream_limit(x.size + (weights.size + bias.size if kind == "conv" else 0), np.empty_like(out), threads)
    call()
    return min(seconds_per_call(call, budget) for _ in range(rounds)) * 1e6


def measure(kind: str, shape: tuple, threads: int, rounds: int, budget: float
            ) -> tuple[dict[str, list[float]], list[float]]:
    """snipjit's and ONNX Runtime's µs per call of a layer in each round, alternated round by round, and the FMA
    peak (GFLOP/s) measured before each round."""
    from snipjit.runtime.implementations import window_launch as wl
    h, w, c, k, s = shape
    x, weights, bias, window, out = _arrays(kind, shape)
    if kind == "conv":
        launch = wl.prepare_depthwise(x, wl.pack_depthwise(weights), bias, (0.0, 6.0), out, window, repeats=True)
    else:
        launch = wl.prepare_pool("max", x, out, window, repeats=True)
    x_nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    y_nchw = np.empty((1, c, *out.shape[1:3]), np.float32)
    engines = {"snipjit": launch.run,
               "onnxruntime": ort_engine(onnx_model(kind, h, w, c, k, s, weights, bias), x_nchw, y_nchw, threads)}
    for fn in engines.values():
        fn()
    error = np.abs(out - y_nchw.transpose(0, 2, 3, 1)).max()
    if error > 1e-4 * max(1.0, np.abs(y_nchw).max()):
        raise AssertionError(f"snipjit's {kind} {shape} differs from ONNX Runtime's by {error:.2e}")
    times: dict[str, list[float]] = {name: [] for name in engines}
    peaks = []
    for _ in range(rounds):
        time.sleep(SETTLE_SECONDS)
        peaks.append(fma_peak(threads, 1))
        for name, fn in engines.items():
            times[name].append(seconds_per_call(fn, budget) * 1e6)
    return times, peaks


def main(argv: list[str] | None = None) -> None:
    parser = layer_parser(__doc__, rounds=7)
    parser.add_argument("--kernels", default="3,5,7", help="depthwise kernel sizes to time (comma-separated)")
    args = parser.parse_args(argv)
    kernels = {int(k) for k in args.kernels.split(",") if k}
    use_threads(args.threads)
    from snipjit.targets.llvm import jit
    rows = [("dwconv", shape) for shape in DEPTHWISE if shape[3] in kernels] + [("maxpool", MAXPOOL)]
    # the streaming limits first, before any ONNX Runtime session exists: its threads spin between runs, and
    # the stream kernel's OpenMP threads stall behind them (15 ms calls instead of 50 µs)
    limits = [limit("conv" if name == "dwconv" else "max", shape, args.threads, args.rounds, args.budget)
              for name, shape in rows]
    print(f"{cpu_model()}, LLVM CPU {jit.host().cpu}, ISA level {jit.host().level.name}, {args.threads} threads; "
          f"microseconds per call (median of {args.rounds} rounds)")
    print(f"{'op':>8} {'H×W×C k s':>18} {'snipjit':>9} {'ORT':>9} {'ORT/snipjit':>12} {'stream':>9} {'limit':>6} "
          f"{'FMA bound':>10} {'of bound':>9}")
    all_peaks: list[float] = []
    for (name, shape), stream_time in zip(rows, limits):
        times, peaks = measure("conv" if name == "dwconv" else "max", shape, args.threads, args.rounds, args.budget)
        all_peaks += peaks
        r = {engine: statistics.median(t) for engine, t in times.items()}
        h, w, c, k, s = shape
        o = (h + 2 * (k // 2) - k) // s + 1
        flops = 2 * o * o * c * k * k if name == "dwconv" else 0
        fma_bound = flops / statistics.median(peaks) / 1e3
        of_bound = statistics.median(max(stream_time, flops / p / 1e3) / t for t, p in zip(times["snipjit"], peaks))
        print(f"{name:>8} {f'{h}×{w}×{c} {k} {s}':>18} {r['snipjit']:9.1f} {r['onnxruntime']:9.1f} "
              f"{r['onnxruntime'] / r['snipjit']:12.2f} {stream_time:9.1f} {stream_time / r['snipjit']:6.0%} "
              f"{fma_bound:10.1f} {of_bound:9.0%}")
    print(f"the FMA peak of the rounds: {min(all_peaks):.0f}-{max(all_peaks):.0f} GFLOP/s")


if __name__ == "__main__":
    main()
