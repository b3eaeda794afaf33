"""`snipjit bench MODEL`: snipjit against ONNX Runtime and OpenVINO, where installed, on one model.

This is the part of benchmarking that ships with the package, so that a user of `pip install snipjit`
can compare on their own model and machine. All engines share one process: each opens the model and
runs it once (its outputs checked against ONNX Runtime's), then they take turns, a batch of runs each
per round in a rotating order, with a short pause between engines so that spinning threads go idle;
the table shows each engine's median latency.

The repository's bench/ suite opens the engines with the same `MODEL_ENGINES`, but runs each in its own
process, over many workloads, and keeps records and charts.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

Feeds = dict[str, np.ndarray]
Runner = Callable[[Feeds], Sequence[np.ndarray]]


class EngineUnavailable(Exception):
    """The engine cannot run here (not installed, or lacks what the model needs): skip it."""


@dataclass
class Opened:
    """An engine with the model loaded: the function timed per run, and a line about it for the table."""

    run: Runner
    info: str = ""


def open_snipjit(model: str, threads: int, feeds: Feeds, request: bool = False) -> Opened:
    """snipjit.compile; with `request`, runs write into caller-owned output buffers allocated once.
    snipjit's thread count is SNIPJIT_NUM_THREADS (read when its pools start), not `threads`."""
    import snipjit

    try:
        compiled = snipjit.compile(model)
    except NotImplementedError as error:
        raise EngineUnavailable(f"snipjit cannot compile this model yet: {error}") from error
    kinds = [step.kind for step in compiled.plan]
    info = "plan: " + ", ".join(f"{kinds.count(kind)} {kind}" for kind in sorted(set(kinds)))
    if not request:
        return Opened(compiled.run, info)
    buffers = {name: np.empty_like(out) for name, out in zip(compiled.output_names, compiled.run(feeds))}
    outputs, caller_request = list(buffers.values()), compiled.create_request()

    def run_into_buffers(feeds: Feeds) -> list[np.ndarray]:
        caller_request.run(feeds, outputs=buffers)
        return outputs

    return Opened(run_into_buffers, info)


def open_onnxruntime(model: str, threads: int, feeds: Feeds) -> Opened:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise here
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return Opened(lambda feeds: session.run(names, feeds))


def open_openvino(model: str, threads: int, feeds: Feeds, precision: str = "f32") -> Opened:
    """Inputs are read in place (as ONNX Runtime does); outputs are copied out, as users get them."""
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision,
              "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    compiled = ov.Core().compile_model(model, "CPU", config)
    request, outputs = compiled.create_infer_request(), compiled.outputs
    return Opened(lambda feeds: [request.infer(feeds, share_inputs=True)[o] for o in outputs],
                  f"precision {precision}")


@dataclass(frozen=True)
class ModelEngine:
    """An engine that runs ONNX files: the package it needs, and open(model path, threads, feeds)."""

    package: str
    open: Callable[[str, int, Feeds], Opened]


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
    """One engine's runs: `note` says what it is, or why it did not run."""

    engine: str
    note: str = ""
    samples_s: list[float] = field(default_factory=list)
    max_abs_err: float | None = None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.samples_s) if self.samples_s else None


def compare(model: str, feeds: Feeds, engines: Sequence[str] = DEFAULT_ENGINES, rounds: int = 5,
            threads: int = 2, round_s: float = 0.3, settle_s: float = 0.05) -> list[Timing]:
    """Open each engine, check its outputs against ONNX Runtime's, then time them in alternating rounds."""
    unknown = [e for e in engines if e not in MODEL_ENGINES]
    if unknown:
        raise ValueError(f"unknown engines {unknown}; choose from {', '.join(MODEL_ENGINES)}")
    timings = {name: Timing(name) for name in engines}
    runners: dict[str, tuple[Runner, int]] = {}
    outputs: dict[str, Sequence[np.ndarray]] = {}
    for name in engines:
        engine = MODEL_ENGINES[name]
        if importlib.util.find_spec(engine.package) is None:
            timings[name].note = f"skipped: {engine.package} is not installed"
            continue
        try:
            opened = engine.open(model, threads, feeds)
            outputs[name] = [np.array(o) for o in opened.run(feeds)]  # copies: a request reuses its buffers
            start = time.perf_counter()
            opened.run(feeds)
            runs = min(max(1, math.ceil(round_s / max(time.perf_counter() - start, 1e-9))), 1000)
        except EngineUnavailable as error:
            timings[name].note = f"skipped: {error}"
            continue
        except Exception as error:  # reported in the table; the other engines go on
            timings[name].note = f"failed: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"
            continue
        runners[name], timings[name].note = (opened.run, runs), opened.info
    reference = outputs.get(REFERENCE_ENGINE)
    reference_engine = MODEL_ENGINES[REFERENCE_ENGINE]
    if REFERENCE_ENGINE not in engines and importlib.util.find_spec(reference_engine.package) is not None:
        try:
            reference = list(reference_engine.open(model, threads, feeds).run(feeds))
        except Exception:  # no reference: the errors column stays empty
            reference = None
    for name, produced in outputs.items():
        timings[name].max_abs_err = None if reference is None else max_abs_error(produced, reference)
    for round_index in range(rounds):
        order = list(runners)
        shift = round_index % max(len(order), 1)
        for name in order[shift:] + order[:shift]:
            run, runs = runners[name]
            for _ in range(runs):
                start = time.perf_counter()
                run(feeds)
                timings[name].samples_s.append(time.perf_counter() - start)
            time.sleep(settle_s)
    return list(timings.values())


def text_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Fixed-width lines: the first column aligned left, the middle ones right, the last (a note) free."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:-1], widths[1:])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def format_table(timings: Sequence[Timing], baseline: str = "snipjit") -> str:
    """Median latency, ratio to the baseline engine, max |error| against ONNX Runtime, note."""
    base = next((t.median_s for t in timings if t.engine == baseline), None)
    rows = [["engine", "median ms", f"x {baseline}", "max|err|", "note"]]
    for t in timings:
        ratio = t.median_s / base if base and t.median_s else None
        err = t.max_abs_err
        rows.append([t.engine, "-" if t.median_s is None else f"{t.median_s * 1e3:.4g}",
                     "-" if ratio is None else f"{ratio:.2f}", "-" if err is None else f"{err:.1e}", t.note])
    legend = f"(x {baseline}: latency / {baseline}'s latency; max|err|: against {REFERENCE_ENGINE}'s outputs)"
    return "\n".join([legend, *text_table(rows)])
