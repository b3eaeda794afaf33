"""The `snipjit` command: demo | run MODEL | explain MODEL | bench MODEL."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .benchmark import DEFAULT_ENGINES, MODEL_ENGINES
from .compiler import CompiledModel, compile as compile_model
from .ir.graph import Graph, Value


def input_shape(v: Value, dims: dict[str, int], batch: int | None = None) -> list[int]:
    """An input's shape with its dynamic dims sized: the first by `batch` when given (an error if it is
    fixed to another size), named ones by `dims[name]`, the others 1."""
    shape = list(v.type.shape or ())
    if batch is not None and shape:
        first = shape[0]
        if isinstance(first, int) and first != batch:
            raise ValueError(f"--batch {batch}: input {v.name!r} has a fixed batch size of {first} ({v.type})")
        shape[0] = batch
    return [d if isinstance(d, int) else dims.get(d, 1) if isinstance(d, str) else 1 for d in shape]


def random_feed(v: Value, dims: dict[str, int], rng: np.random.Generator, int_high: int = 10,
                batch: int | None = None) -> np.ndarray:
    """A random array matching an input's type, shaped by `input_shape`; integers are in [0, int_high)."""
    shape = input_shape(v, dims, batch)
    dt = v.type.dtype
    if dt.is_float:
        return rng.standard_normal(shape).astype(dt.np)
    if dt.kind == "bool":
        return rng.random(shape) < 0.5
    return rng.integers(0, int_high, shape).astype(dt.np)


def _parse_dims(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, val = item.partition("=")
        out[name] = int(val)
    return out


def _feeds(cm: CompiledModel, args) -> dict[str, np.ndarray]:
    given = {}
    for item in args.input or []:
        name, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"--input takes name=file.npy, got {item!r}")
        given[name] = np.load(path)
    missing = [v for v in cm.graph.inputs if v.name not in given]
    if missing and not args.random_inputs:
        raise SystemExit("missing inputs " + ", ".join(f"{v.name}: {v.type}" for v in missing) +
                         "; give them with --input name=file.npy or use --random-inputs")
    rng = np.random.default_rng(0)
    dims = _parse_dims(args.dim or [])
    for v in missing:
        given[v.name] = random_feed(v, dims, rng)
    return given


def _stats(a: np.ndarray) -> str:
    if a.size == 0 or not np.issubdtype(a.dtype, np.number):
        return f"{a.dtype}{list(a.shape)}"
    f = a.astype(np.float64)
    return f"{a.dtype}{list(a.shape)} min {f.min():.6g} max {f.max():.6g} mean {f.mean():.6g}"


def cmd_run(args) -> int:
    t0 = time.perf_counter()
    cm = compile_model(args.model)
    t1 = time.perf_counter()
    feeds = _feeds(cm, args)
    times = []
    for _ in range(max(1, args.repeat)):
        s = time.perf_counter()
        outs = cm.run(feeds)
        times.append(time.perf_counter() - s)
    print(f"compiled in {(t1 - t0) * 1e3:.1f} ms; ran {len(times)}x, median {np.median(times) * 1e3:.3f} ms")
    for name, out in zip(cm.output_names, outs):
        print(f"  {name}: {_stats(out)}")
    return 0


def cmd_explain(args) -> int:
    cm = compile_model(args.model)
    if args.dot or args.svg:
        from .visualize import to_dot, write_svg
        text = to_dot(cm)
        if args.dot:
            Path(args.dot).write_text(text + "\n")
            print(f"wrote {args.dot}")
        if args.svg:
            write_svg(text, Path(args.svg))
            print(f"wrote {args.svg}")
        return 0
    print(cm.explain(show_passes=not args.plan_only, kernels=args.kernels))
    return 0


def cmd_bench(args) -> int:
    import dataclasses
    import json

    from .bench_modes import Settings, usable_cores
    from .benchmark import measure
    from .compiler import load_graph
    threads = usable_cores() if args.threads is None else args.threads
    streams = (threads if args.mode == "throughput" else 1) if args.streams is None else args.streams
    settings = Settings(args.mode, streams, threads, args.time, args.rounds, args.batch or 1)
    inputs = load_graph(args.model).inputs
    dims = _parse_dims(args.dim or [])
    if args.batch is not None:   # a named batch dim takes the size wherever else it appears
        named = {v.type.shape[0] for v in inputs if v.type.shape and isinstance(v.type.shape[0], str)}
        clash = sorted(name for name in named if dims.get(name, args.batch) != args.batch)
        if clash:
            raise ValueError(f"--batch {args.batch} contradicts --dim {clash[0]}={dims[clash[0]]}")
        dims |= dict.fromkeys(named, args.batch)
    unset = sorted({d for v in inputs for d in v.type.shape or () if isinstance(d, str) and d not in dims})
    report = sys.stderr if args.json == "-" else sys.stdout   # stdout is the JSON's
    if unset:
        print(f"dynamic dimensions set to 1: {', '.join(unset)} (choose with --dim NAME=SIZE)", file=report)
    rng = np.random.default_rng(0)
    # Integers are 0 or 1: valid indices into any table (token ids, token types) and valid masks.
    feeds = {v.name: random_feed(v, dims, rng, int_high=2, batch=args.batch) for v in inputs}
    if args.batch is None:   # samples per inference: the first dim the inputs share, if they do
        firsts = {a.shape[0] for a in feeds.values() if a.ndim}
        settings = dataclasses.replace(settings, batch=firsts.pop() if len(firsts) == 1 else 1)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    print(", ".join(f"{name} {a.dtype}[{'x'.join(map(str, a.shape))}]" for name, a in feeds.items()) +
          f"; {settings.mode} mode, streams {settings.streams}, threads {settings.threads}, batch {settings.batch}, "
          f"{settings.seconds:g} s per engine", file=report)
    result = measure(args.model, feeds, engines, settings, startup=not args.no_startup)
    print(result.table(), file=report)
    if args.json:
        text = json.dumps(result.as_json(), indent=2, allow_nan=False)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
            print(f"wrote {args.json}", file=report)
    return 0


def demo_graph() -> Graph:
    """The guide's example `(x*2 + y)^2` followed by an erf-GELU and a residual add."""
    from .builder import GraphBuilder
    b = GraphBuilder("demo")
    x = b.input("x", "f32", ["batch", 64, 1024])
    y = b.input("y", "f32", [1024])
    t = b.Pow(b.Add(b.Mul(x, b.const(np.float32(2.0))), y), b.const(np.float32(2.0)))
    gelu = b.Mul(b.Mul(t, b.const(np.float32(0.5))),
                 b.Add(b.Erf(b.Div(t, b.const(np.float32(np.sqrt(2.0))))), b.const(np.float32(1.0))))
    b.output(b.Add(gelu, x), "out")
    return b.build()


def cmd_demo(args) -> int:
    graph = demo_graph()
    print("demo model:\n" + str(graph))
    t0 = time.perf_counter()
    cm = compile_model(graph)
    t1 = time.perf_counter()
    ref = compile_model(graph, implementations={"reference"})
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((4, 64, 1024), dtype=np.float32),
             "y": rng.standard_normal(1024, dtype=np.float32)}
    out = cm.run(feeds)[0]
    expected = ref.run(feeds)[0]
    times = []
    for _ in range(20):
        s = time.perf_counter()
        cm.run(feeds)
        times.append(time.perf_counter() - s)
    err = float(np.max(np.abs(out - expected) / (1 + np.abs(expected))))
    print(f"\ncompiled in {(t1 - t0) * 1e3:.1f} ms")
    for step in cm.plan:
        print(f"  step {step.kind:<10} covers {'+'.join(step.ops)}")
    fused = [s for s in cm.plan if s.kind == "snippet"]
    print(f"{len(fused)} fused kernel(s) for {sum(len(s.ops) for s in fused)} ops; "
          f"{len(cm.plan)} steps in all")
    print(f"median run time over 20 runs: {np.median(times) * 1e3:.3f} ms")
    print(f"max relative difference vs the reference kernels: {err:.3g}")
    if not err < 1e-5:
        print("MISMATCH against the reference kernels")
        return 1
    print("output matches the reference kernels")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="snipjit", description="Compile and run ONNX models on the CPU.")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("demo", help="build a small model, compile, run and check it (the default)")
    run = sub.add_parser("run", help="compile and run a model, print output stats and timing")
    run.add_argument("model")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    run.add_argument("--random-inputs", action="store_true", help="random data for inputs not given")
    run.add_argument("--dim", action="append", metavar="NAME=SIZE", help="size of a named dynamic dim")
    run.add_argument("--repeat", type=int, default=10)
    ex = sub.add_parser("explain", help="print the graph before/after passes and the plan")
    ex.add_argument("model")
    ex.add_argument("--plan-only", action="store_true", help="only the plan and memory, not every pass")
    ex.add_argument("--kernels", action="store_true", help="also each generated kernel's Linear IR")
    ex.add_argument("--dot", metavar="FILE", help="write a Graphviz picture of the compiled model")
    ex.add_argument("--svg", metavar="FILE", help="render the picture to SVG (needs Graphviz)")
    bench = sub.add_parser("bench", help="measure a model's latency or throughput against ONNX Runtime and "
                           "OpenVINO, where installed, with random inputs (the repository's bench/ suite does more)")
    bench.add_argument("model")
    bench.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                       help=f"comma-separated, from {', '.join(MODEL_ENGINES)} (default: %(default)s)")
    bench.add_argument("--mode", default="latency", help="latency (one stream, default) or throughput "
                       "(concurrent streams, inferences per second)")
    bench.add_argument("--streams", type=int, help="concurrent streams in throughput mode (default: one per thread)")
    bench.add_argument("--threads", type=int, help="threads of each engine, shared by its streams "
                       "(default: the usable cores)")
    bench.add_argument("--time", type=float, default=2.0, metavar="SECONDS",
                       help="measured time of each engine, spread over the rounds (default: %(default)s)")
    bench.add_argument("--rounds", type=int, default=5, help="rounds of alternating engines (default: 5)")
    bench.add_argument("--batch", type=int, help="size of the first dimension of every input")
    bench.add_argument("--dim", action="append", metavar="NAME=SIZE", help="size of a named dynamic dim (default 1)")
    bench.add_argument("--json", metavar="PATH", help="also write every figure and setting as JSON (-: stdout)")
    bench.add_argument("--no-startup", action="store_true", help="skip timing snipjit's cold and warm compile "
                       "and first inference (each in a fresh process)")
    args = parser.parse_args(argv)
    commands = {"run": cmd_run, "explain": cmd_explain, "bench": cmd_bench, None: cmd_demo, "demo": cmd_demo}
    try:
        return commands[args.command](args)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as e:
        print(f"snipjit: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
