"""ResNet-50's convolutions one by one: snipjit's channels-last kernel against ONNX Runtime and the FMA peak.

    python -m bench.conv [--threads 2] [--rounds 5] [--budget 0.2] [--int8] [--grouped]

Each distinct convolution of ResNet-50 (batch 1, 224×224; bias and Relu as the network has them after
BatchNorm folding) runs as snipjit's prepared launch (`conv_launch`, repeats=True: NHWC input and output
as the runtime's arena places them; the first layer reads its NCHW image in place, as in the network)
and as a one-node ONNX model (Conv + Relu, NCHW) in ONNX Runtime with its input and output bound once.
The engines alternate in this one process, round by round, each timed for a fixed time per round; the
FMA peak (a register-only FMA loop, `bench.gemm`) is measured before each round too: "of peak" is the median
of the rounds' rate over that round's peak (the peak alone moved 148-193 GFLOP/s between runs on Zen 3, two
threads; a peak taken once at the start skewed every ratio of the run). The 3×3 convolutions of
stride 1 that the network runs as Winograd's (`winograd_launch.choose_tile`) are timed that way too, in
GFLOP/s of the direct convolution's work ("as run": the ratio to ORT of the way the network runs it).
`--int8` also times the int8 convolution of the same shapes (`conv_int8_launch`), in GOP/s. `--grouped` times
RegNetY-400MF's grouped 3×3 convolutions (8 channels per group) instead of ResNet-50's, on the implicit GEMM
("snipjit") and on the window kernel's grouped variant the network runs them on ("grouped", where the ISA
level's vectors hold a group: `window_launch.grouped_width`).
"""
from __future__ import annotations

import statistics
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from bench.gemm import SETTLE_SECONDS, cpu_model, fma_peak, layer_parser, seconds_per_call, use_threads
from bench.window import ort_engine

# (H, W, C, O, kernel, stride, pad, count in the network)
RESNET50 = (
    (224, 224, 3, 64, 7, 2, 3, 1),
    (56, 56, 64, 64, 1, 1, 0, 1), (56, 56, 64, 64, 3, 1, 1, 3), (56, 56, 64, 256, 1, 1, 0, 4),
    (56, 56, 256, 64, 1, 1, 0, 2), (56, 56, 256, 128, 1, 1, 0, 1), (56, 56, 128, 128, 3, 2, 1, 1),
    (56, 56, 256, 512, 1, 2, 0, 1), (28, 28, 128, 512, 1, 1, 0, 4), (28, 28, 512, 128, 1, 1, 0, 3),
    (28, 28, 128, 128, 3, 1, 1, 3), (28, 28, 512, 256, 1, 1, 0, 1), (28, 28, 256, 256, 3, 2, 1, 1),
    (28, 28, 512, 1024, 1, 2, 0, 1), (14, 14, 256, 1024, 1, 1, 0, 6), (14, 14, 1024, 256, 1, 1, 0, 5),
    (14, 14, 256, 256, 3, 1, 1, 5), (14, 14, 1024, 512, 1, 1, 0, 1), (14, 14, 512, 512, 3, 2, 1, 1),
    (14, 14, 1024, 2048, 1, 2, 0, 1), (7, 7, 512, 2048, 1, 1, 0, 3), (7, 7, 2048, 512, 1, 1, 0, 2),
    (7, 7, 512, 512, 3, 1, 1, 2),
)


# RegNetY-400MF's grouped 3×3 convolutions (8 channels per group), `--grouped`: as RESNET50, then the groups
REGNET_GROUPED = (
    (112, 112, 48, 48, 3, 2, 1, 1, 6), (56, 56, 104, 104, 3, 2, 1, 1, 13), (28, 28, 104, 104, 3, 1, 1, 2, 13),
    (28, 28, 208, 208, 3, 2, 1, 1, 26), (14, 14, 208, 208, 3, 1, 1, 5, 26), (14, 14, 440, 440, 3, 2, 1, 1, 55),
    (7, 7, 440, 440, 3, 1, 1, 5, 55),
)


def conv_model(c: int, o: int, k: int, s: int, p: int, h: int, w: int, weights, bias, groups: int = 1) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                          group=groups),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def engines(shape: tuple, threads: int, int8: bool) -> tuple[dict, float, float, tuple]:
    """The engines of one shape (callables), its multiply-adds ×2, the largest error against ORT (relative
    to the largest output), and the arrays the engines read (keep them alive while they run)."""
    from snipjit.memory.solver import aligned_array
    from snipjit.runtime.implementations import conv_launch, window_launch, winograd_launch
    h, w, c, o, k, s, p, _, groups = (*shape, 1)[:9]
    rng = np.random.default_rng(0)
    planar = c <= 4
    x = aligned_array((1, c, h, w) if planar else (1, h, w, c))
    x[...] = rng.standard_normal(x.shape, dtype=np.float32)
    weights = (rng.standard_normal((o, c // groups, k, k)) / np.sqrt(c // groups * k * k)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    geometry = conv_launch.ConvGeometry((k, k), (s, s), (p,) * 4)
    oh, ow = geometry.output_size(h, w)
    out = aligned_array((1, oh, ow, o))
    launch = conv_launch.prepare_conv(x, conv_launch.pack_conv(weights, groups), out, geometry, bias, (0.0, np.inf),
                                      repeats=True, planar=planar)
    x_nchw = x if planar else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    y_nchw = np.empty((1, o, oh, ow), np.float32)
    found = {"snipjit": launch.run, "onnxruntime": ort_engine(conv_model(c, o, k, s, p, h, w, weights, bias, groups),
                                                                  x_nchw, y_nchw, threads)}
    for fn in found.values():
        fn()
    error = float(np.abs(out - y_nchw.transpose(0, 2, 3, 1)).max() / max(1.0, np.abs(y_nchw).max()))
    held = (x, out, x_nchw, y_nchw)
    tile = winograd_launch.choose_tile(weights.shape, groups, geometry, planar, (oh, ow))
    if tile:   # the network runs this one as Winograd's
        transformed = aligned_array(out.shape)
        fast = winograd_launch.prepare_winograd(x, winograd_launch.pack_winograd(weights, tile), transformed,
                                                geometry, bias, (0.0, np.inf), repeats=True)
        fast.run()
        error = max(error, float(np.abs(transformed - out).max() / max(1.0, np.abs(out).max())))
        found["snipjit winograd"], held = fast.run, held + (transformed, fast)
    window = window_launch.Window((k, k), (s, s), (p,) * 4)
    group = 0 if planar or groups == 1 else window_launch.grouped_width(weights.shape, groups, window)
    if group:   # the network runs this one on the window kernel's grouped variant
        grouped = aligned_array(out.shape)
        fast = window_launch.prepare_grouped(x, window_launch.pack_grouped(weights), bias, (0.0, np.inf), grouped,
                                             window, repeats=True)
        fast.run()
        error = max(error, float(np.abs(grouped - out).max() / max(1.0, np.abs(out).max())))
        found["snipjit grouped"], held = fast.run, held + (grouped, fast)
    if int8 and not planar and groups == 1:
        found["snipjit int8"] = int8_engine(x, weights, bias, out, geometry)
    return found, 2.0 * oh * ow * o * c // groups * k * k, error, held


def int8_engine(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, out: np.ndarray, geometry):
    from snipjit.ops.int8 import StaticQuantization
    from snipjit.runtime.implementations.conv_int8_launch import pack_int8_conv, prepare_int8_conv
    scales = (np.abs(weights).reshape(len(weights), -1).max(1) / 127).astype(np.float32)
    q = np.round(weights / scales.reshape(-1, 1, 1, 1)).astype(np.int8)
    quantization = StaticQuantization(float(np.abs(x).max() / 127), 128, 0, 255, tuple(map(float, scales)))
    launch = prepare_int8_conv(x, pack_int8_conv(q, scales), out, geometry, quantization, bias, (0.0, np.inf))
    return launch.run


def main(argv: list[str] | None = None) -> None:
    parser = layer_parser(__doc__, rounds=5)
    parser.add_argument("--int8", action="store_true", help="also the int8 convolution of each shape (GOP/s)")
    parser.add_argument("--grouped", action="store_true", help="RegNetY-400MF's grouped convolutions instead")
    args = parser.parse_args(argv)
    shapes, network = (REGNET_GROUPED, "RegNetY-400MF's grouped") if args.grouped else (RESNET50, "ResNet-50's")
    use_threads(args.threads)
    from snipjit.targets.llvm import jit
    peak = fma_peak(args.threads, args.rounds)
    print(f"{cpu_model()}, LLVM CPU {jit.host().cpu}, ISA level {jit.host().level.name}, {args.threads} threads; "
          f"FMA peak {peak:.1f} GFLOP/s; GFLOP/s per convolution (median of {args.rounds} rounds)")
    alternative = "grouped" if args.grouped else "winograd"   # the other kernel the network runs some on
    print(f"{'H×W×C→O k s':>22} {'n':>2} {'snipjit':>8} {'of peak':>8} {alternative:>9} {'ORT':>8} {'as run':>7}"
          + (f" {'int8 GOP/s':>11}" if args.int8 else ""))
    total = {"snipjit": 0.0, "as run": 0.0, "onnxruntime": 0.0}
    all_peaks: list[float] = []
    for shape in shapes:
        found, flops, error, _arrays = engines(shape, args.threads, args.int8)   # (held while the engines run)
        if error > 1e-4:
            raise AssertionError(f"snipjit's convolution {shape} differs from ONNX Runtime's by {error:.2e}")
        times: dict[str, list[float]] = {name: [] for name in found}
        peaks = []   # the FMA peak again each round: this machine's clock moves between phases of seconds
        for _ in range(args.rounds):
            time.sleep(SETTLE_SECONDS)
            peaks.append(fma_peak(args.threads, 1))
            for name, fn in found.items():
                times[name].append(seconds_per_call(fn, args.budget))
        seconds = {name: statistics.median(t) for name, t in times.items()}
        of_peak = statistics.median(flops / t / 1e9 / p for t, p in zip(times["snipjit"], peaks))
        all_peaks += peaks
        seconds["as run"] = seconds.get(f"snipjit {alternative}", seconds["snipjit"])
        rate = {name: flops / t / 1e9 for name, t in seconds.items()}
        for name in total:
            total[name] += shape[7] * seconds[name]
        h, w, c, o, k, s, _, count = shape[:8]
        other = f"{rate[f'snipjit {alternative}']:9.1f}" if f"snipjit {alternative}" in rate else f"{'-':>9}"
        print(f"{f'{h}×{w}×{c}→{o} {k} {s}':>22} {count:>2} {rate['snipjit']:8.1f} {of_peak:8.0%} "
              f"{other} {rate['onnxruntime']:8.1f} {rate['as run'] / rate['onnxruntime']:7.2f}"
              + (f" {rate.get('snipjit int8', float('nan')):11.1f}" if args.int8 else ""))
    print(f"all of {network} convolutions: snipjit {total['snipjit'] * 1e3:.2f} ms (direct), "
          f"{total['as run'] * 1e3:.2f} ms (as the network runs them), "
          f"ONNX Runtime {total['onnxruntime'] * 1e3:.2f} ms; the FMA peak of the rounds "
          f"{min(all_peaks):.1f}-{max(all_peaks):.1f} GFLOP/s")


if __name__ == "__main__":
    main()
