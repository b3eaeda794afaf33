"""`snipjit bench MODEL`: snipjit against ONNX Runtime and OpenVINO, where installed, on one model.

This is the part of benchmarking that ships with the package, so that a user of `pip install snipjit`
can compare on their own model and machine. All engines share one process: each opens the model for the
mode and streams asked for and runs it once (its outputs checked against ONNX Runtime's), then they take
turns, in rounds of a rotating order, each turn a burst of inferences of the same length (see
`snipjit.bench_modes`), with a short pause between engines so that spinning threads go idle. The report
has each engine's latency percentiles and throughput, the first inference, snipjit's cold and warm
compile times, the machine and the versions, as a table or as JSON.

The repository's bench/ suite opens the engines with the same `MODEL_ENGINES`, but runs each in its own
process, over many workloads, and keeps records and charts.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .bench_modes import (Burst, BurstRunner, Feeds, LatencySummary, Runner, Settings, StartupTimes, async_queue,
                          back_to_back, machine_description, package_version, snipjit_startup, threaded, versions)

__all__ = ["EngineUnavailable", "Feeds", "Opened", "Runner", "ModelEngine", "MODEL_ENGINES", "DEFAULT_ENGINES",
           "REFERENCE_ENGINE", "Settings", "Timing", "Report", "compare", "measure", "max_abs_error", "text_table"]


class EngineUnavailable(Exception):
    """The engine cannot run here (not installed, or lacks what the model needs): skip it."""


@dataclass
class Opened:
    """An engine with the model loaded: the function timed per run, a line about it for the table, and
    how it runs the concurrent streams it was opened for (None: `run` back to back, one stream)."""

    run: Runner
    info: str = ""
    burst: BurstRunner | None = None

    def run_for(self, feeds: Feeds, seconds: float) -> Burst:
        """Inferences back to back, from every stream, for `seconds` (at least one per stream)."""
        return self.burst(feeds, seconds) if self.burst else back_to_back(self.run, feeds, seconds)


def in_threads(make_runner: Callable[[], Runner], streams: int, info: str = "") -> Opened:
    """Streams as threads, each with a runner of its own from `make_runner`."""
    runners = [make_runner() for _ in range(streams)]
    return Opened(runners[0], info, None if streams == 1 else functools.partial(threaded, runners))


def open_snipjit(model: str, threads: int, feeds: Feeds, request: bool = False, *, streams: int = 1,
                 mode: str = "latency") -> Opened:
    """snipjit.compile for `threads` threads shared by `streams` concurrent requests, one per stream; with
    `request`, runs write into caller-owned output buffers allocated once."""
    import snipjit

    try:
        compiled = snipjit.compile(model, num_threads=threads, streams=streams, hint=mode)
    except NotImplementedError as error:
        raise EngineUnavailable(f"snipjit cannot compile this model yet: {error}") from error
    kinds = [step.kind for step in compiled.plan]
    info = "plan: " + ", ".join(f"{kinds.count(kind)} {kind}" for kind in sorted(set(kinds)))

    def stream() -> Runner:
        own = compiled.create_request()
        if not request:
            return own.run
        buffers = {name: np.empty_like(out) for name, out in zip(compiled.output_names, own.run(feeds))}
        outputs = list(buffers.values())

        def run_into_buffers(feeds: Feeds) -> list[np.ndarray]:
            own.run(feeds, outputs=buffers)
            return outputs

        return run_into_buffers

    return in_threads(stream, streams, info)


def open_onnxruntime(model: str, threads: int, feeds: Feeds, *, streams: int = 1, mode: str = "latency") -> Opened:
    """One session with the threads divided among the streams, which call it concurrently (ONNX Runtime
    sessions are thread-safe for run)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads // streams)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise here
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    info = f"{options.intra_op_num_threads} threads per run" if streams > 1 else ""
    return in_threads(lambda: lambda feeds: session.run(names, feeds), streams, info)


def open_openvino(model: str, threads: int, feeds: Feeds, precision: str = "f32", *, streams: int = 1,
                  mode: str = "latency") -> Opened:
    """OpenVINO's performance hint for the mode; throughput mode runs an asynchronous queue of one job per
    stream. Inputs are read in place (as ONNX Runtime does); outputs are copied out, as users get them."""
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision,
              "PERFORMANCE_HINT": mode.upper(), "NUM_STREAMS": streams}
    compiled = ov.Core().compile_model(model, "CPU", config)
    request, outputs = compiled.create_infer_request(), compiled.outputs
    burst = None
    if mode == "throughput":
        burst = functools.partial(async_queue, ov.AsyncInferQueue(compiled, streams), streams)
    return Opened(lambda feeds: [request.infer(feeds, share_inputs=True)[o] for o in outputs],
                  f"precision {precision}", burst)


@dataclass(frozen=True)
class ModelEngine:
    """An engine that runs ONNX files: the package it needs, and
    open(model path, threads, feeds, streams=1, mode="latency")."""

    package: str
    open: Callable[..., Opened]


MODEL_ENGINES = {
    "snipjit": ModelEngine("snipjit", open_snipjit),
    "snipjit-req": ModelEngine("snipjit", functools.partial(open_snipjit, request=True)),
    "onnxruntime": ModelEngine("onnxruntime", open_onnxruntime),
    "openvino": ModelEngine("openvino", open_openvino),
    "openvino-bf16": ModelEngine("openvino", functools.partial(open_openvino, precision="bf16")),
}
DEFAULT_ENGINES = ("snipjit", "onnxruntime", "openvino")
REFERENCE_ENGINE = "onnxruntime"


def max_abs_error(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """The largest |output - reference| over all outputs; inf when their count or shapes differ, or on NaN."""
    if len(outputs) != len(reference):
        return math.inf
    worst = 0.0
    for out, ref in zip(outputs, reference):
        if np.shape(out) != np.shape(ref):
            return math.inf
        if np.size(ref):
            diff = float(np.max(np.abs(np.asarray(out, np.float64) - np.asarray(ref, np.float64))))
            worst = math.inf if math.isnan(diff) else max(worst, diff)
    return worst


@dataclass
class Timing:
    """One engine's inferences: `status` is ok, skipped or failed, and `note` says what ran, or why not."""

    engine: str
    note: str = ""
    status: str = "ok"
    version: str | None = None
    latencies_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0                # the measured bursts' wall time, all rounds
    load_s: float | None = None        # opening the model in this process (snipjit: compiling, caches as found)
    first_run_s: float | None = None   # the first inference after opening
    max_abs_err: float | None = None

    @property
    def summary(self) -> LatencySummary | None:
        return LatencySummary.of(self.latencies_s) if self.latencies_s else None

    @property
    def median_s(self) -> float | None:
        return self.summary.p50 if self.latencies_s else None

    @property
    def inferences_per_s(self) -> float | None:
        return len(self.latencies_s) / self.wall_s if self.latencies_s and self.wall_s > 0 else None

    def seconds_per_inference(self, mode: str) -> float | None:
        """What the engines are ranked by: p50 latency, or in throughput mode the inverse throughput."""
        if mode == "latency":
            return self.median_s
        ips = self.inferences_per_s
        return 1 / ips if ips else None

    def skip(self, status: str, why: str) -> None:
        self.status, self.note = status, f"{status}: {why}"


def _open(name: str, model: str, feeds: Feeds, settings: Settings,
          timing: Timing) -> tuple[Opened, list[np.ndarray]] | None:
    """The engine opened, its first outputs (copies: a request reuses its buffers), warmed up; or None,
    with why in `timing`."""
    engine = MODEL_ENGINES[name]
    if importlib.util.find_spec(engine.package) is None:
        timing.skip("skipped", f"{engine.package} is not installed")
        return None
    timing.version = package_version(engine.package)
    try:
        start = time.perf_counter()
        opened = engine.open(model, settings.threads, feeds, streams=settings.streams, mode=settings.mode)
        timing.load_s = time.perf_counter() - start
        start = time.perf_counter()
        produced = opened.run(feeds)
        timing.first_run_s = time.perf_counter() - start
        outputs = [np.array(o) for o in produced]
        opened.run_for(feeds, 0.0)   # warm-up: one inference per stream
    except EngineUnavailable as error:
        timing.skip("skipped", str(error))
        return None
    except Exception as error:  # reported in the table; the other engines go on
        timing.skip("failed", f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}")
        return None
    timing.note = opened.info
    return opened, outputs


def _check_outputs(model: str, feeds: Feeds, threads: int, outputs: dict[str, list[np.ndarray]],
                   timings: dict[str, Timing]) -> None:
    """Each engine's max |error| against the reference engine's outputs (opened for this if not timed)."""
    reference = outputs.get(REFERENCE_ENGINE)
    reference_engine = MODEL_ENGINES[REFERENCE_ENGINE]
    if REFERENCE_ENGINE not in timings and importlib.util.find_spec(reference_engine.package) is not None:
        try:
            reference = list(reference_engine.open(model, threads, feeds).run(feeds))
        except Exception:  # no reference: the errors column stays empty
            reference = None
    for name, produced in outputs.items():
        timings[name].max_abs_err = None if reference is None else max_abs_error(produced, reference)


def compare(model: str, feeds: Feeds, engines: Sequence[str] = DEFAULT_ENGINES,
            settings: Settings = Settings()) -> list[Timing]:
    """Open each engine, check its outputs against ONNX Runtime's, then measure them in alternating rounds,
    each engine's turn `settings.seconds / settings.rounds` long."""
    unknown = [e for e in engines if e not in MODEL_ENGINES]
    if unknown:
        raise ValueError(f"unknown engines {unknown}; choose from {', '.join(MODEL_ENGINES)}")
    timings = {name: Timing(name) for name in engines}
    opened, outputs = {}, {}
    for name in engines:
        if (result := _open(name, model, feeds, settings, timings[name])) is not None:
            opened[name], outputs[name] = result
    _check_outputs(model, feeds, settings.threads, outputs, timings)
    turn_s = settings.seconds / settings.rounds
    for round_index in range(settings.rounds):
        order = list(opened)
        shift = round_index % max(len(order), 1)
        for name in order[shift:] + order[:shift]:
            burst = opened[name].run_for(feeds, turn_s)
            timings[name].latencies_s += burst.latencies_s
            timings[name].wall_s += burst.wall_s
            time.sleep(settings.settle_s)
    return list(timings.values())


@dataclass
class Report:
    """A comparison with everything needed to read it later: settings, inputs, machine, versions."""

    model: str
    inputs: dict[str, dict[str, Any]]   # name: dtype and shape fed
    engines: list[str]
    settings: Settings
    timings: list[Timing]
    startup: StartupTimes | None        # snipjit's, in fresh processes
    machine: dict[str, Any]
    versions: dict[str, str | None]
    baseline: str = "snipjit"

    def ratio(self, t: Timing) -> float | None:
        """Time per inference relative to the baseline's (above 1: slower than the baseline)."""
        base = next((b.seconds_per_inference(self.settings.mode) for b in self.timings if b.engine == self.baseline),
                    None)
        own = t.seconds_per_inference(self.settings.mode)
        return own / base if base and own else None

    def table(self) -> str:
        """The engines' figures, then snipjit's startup and each engine's opening and first inference."""
        s, baseline = self.settings, self.baseline
        ranked_by = (f"p50 / {baseline}'s p50" if s.mode == "latency" else f"{baseline}'s inf/s / the engine's")
        rows = [["engine", "mode", "streams", "threads", "p50 ms", "p90 ms", "p99 ms", "min ms", "max ms",
                 "inf/s", "samples/s", f"x {baseline}", "max|err|", "note"]]
        for t in self.timings:
            summary, ips, ratio, err = t.summary, t.inferences_per_s, self.ratio(t), t.max_abs_err
            figures = ([_number(v * 1e3) for v in (summary.p50, summary.p90, summary.p99, summary.min, summary.max)]
                       if summary else ["-"] * 5)
            rows.append([t.engine, s.mode, str(s.streams), str(s.threads), *figures,
                         "-" if ips is None else f"{ips:.1f}", "-" if ips is None else f"{ips * s.batch:.1f}",
                         "-" if ratio is None else f"{ratio:.2f}", "-" if err is None else f"{err:.1e}", t.note])
        lines = [f"(x {baseline}: {ranked_by}, above 1: slower than {baseline}; samples/s: inf/s x batch {s.batch}; "
                 f"max|err|: against {REFERENCE_ENGINE}'s outputs)", *text_table(rows), ""]
        c = self.startup
        if c is not None:
            figures = ", ".join(f"{kind} compile {_number(st.compile_s)} s + first inference "
                                f"{_number(st.first_inference_s * 1e3)} ms"
                                for kind, st in (("cold", c.cold), ("warm", c.warm)) if st is not None)
            lines.append(f"snipjit startup: {figures or '-'} ({c.HOW}){'; ' + c.note if c.note else ''}")
        opened = [t for t in self.timings if t.first_run_s is not None]
        if opened:
            width = max(len(t.engine) for t in opened)
            lines.append("in this process (caches as found):")
            lines += [f"  {t.engine:<{width}}  opened in {_number(t.load_s * 1e3)} ms, first inference "
                      f"{_number(t.first_run_s * 1e3)} ms" for t in opened]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        """Every figure and setting, JSON-able (an infinite error, from mismatched outputs, is "inf")."""
        s = self.settings
        results = []
        for t in self.timings:
            summary, ips = t.summary, t.inferences_per_s
            results.append({
                "engine": t.engine, "version": t.version, "status": t.status, "note": t.note,
                "inferences": len(t.latencies_s), "measured_s": t.wall_s,
                "latency_ms": summary.milliseconds() if summary else None,
                "inferences_per_s": ips, "samples_per_s": None if ips is None else ips * s.batch,
                f"vs_{self.baseline}": self.ratio(t),
                "max_abs_err": "inf" if t.max_abs_err == math.inf else t.max_abs_err,
                "load_s": t.load_s, "first_inference_ms": None if t.first_run_s is None else t.first_run_s * 1e3,
            })
        startup = None if self.startup is None else {**asdict(self.startup), "how": self.startup.HOW}
        return {
            "model": self.model,
            "settings": {**asdict(s), "engines": self.engines, "inputs": self.inputs, "reference": REFERENCE_ENGINE,
                         f"vs_{self.baseline}": "p50 latency / the baseline's" if s.mode == "latency"
                         else "the baseline's inferences per s / the engine's"},
            "machine": self.machine,
            "versions": self.versions,
            "results": results,
            "snipjit_startup": startup,
        }


def measure(model: str, feeds: Feeds, engines: Sequence[str] = DEFAULT_ENGINES, settings: Settings = Settings(),
            startup: bool = True) -> Report:
    """`compare`, plus snipjit's cold and warm startup (compile and first inference, in child processes) and
    the machine."""
    timings = compare(model, feeds, engines, settings)
    startup_times = None
    if startup and any(MODEL_ENGINES[e].package == "snipjit" for e in engines):
        options = {"num_threads": settings.threads, "streams": settings.streams, "hint": settings.mode}
        startup_times = snipjit_startup(model, options, feeds)
    inputs = {name: {"dtype": str(a.dtype), "shape": list(a.shape)} for name, a in feeds.items()}
    packages = sorted({"snipjit", "numpy", "onnx"} | {MODEL_ENGINES[e].package for e in engines})
    return Report(model, inputs, list(engines), settings, timings, startup_times, machine_description(),
                  versions(packages))


def _number(x: float) -> str:
    """Four significant digits, without an exponent."""
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


def text_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Fixed-width lines: the first column aligned left, the middle ones right, the last (a note) free."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:-1], widths[1:])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines
