"""Time snipjit against the other ONNX engines installed on this machine.

`snipjit bench MODEL` and the repository's `bench/` suite share this module: the engine adapters,
the worker process each engine runs in, the alternating timing loop and the result table.

Every engine runs in its own spawned process, so that the thread pools of different engines do
not disturb each other, and the processes take turns: each round times every engine once, in a
rotating order. Loading (session creation, compilation) and the first run are timed apart from the
steady-state latency. Peers are imported only inside their worker; one that is not installed is
reported as skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.metadata
import importlib.util
import math
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

Feeds = dict[str, np.ndarray]
Runner = Callable[[Feeds], Sequence[np.ndarray]]

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
DEFAULT_ENGINES = ("snipjit", "onnxruntime", "openvino")


class EngineUnavailable(Exception):
    """The engine cannot run here (not installed, or lacks what the model needs): skip it."""


@dataclass
class Engine:
    """How a worker process loads one engine.

    `loader` names a function "module:function" called as loader(job, feeds) -> Loaded; the
    modules in `requires` are imported first, outside the load timing.
    """

    name: str
    loader: str
    requires: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    compare: bool = True  # whether its outputs are checked against the reference


@dataclass
class Loaded:
    """A loaded engine: the function timed per iteration, and a line about it for the table."""

    run: Runner
    info: str = ""


@dataclass
class Job:
    """What a worker process is told: the engine, the model file and where the arrays go."""

    engine: Engine
    model: str | None
    input_names: list[str]
    feeds_path: str
    outputs_path: str
    threads: int


@dataclass
class LoadReport:
    """A worker's answer to "load": the times of loading and of the first run, one warm iteration's."""

    load_s: float
    first_run_s: float
    iteration_s: float
    info: str


@dataclass
class EngineResult:
    """One engine's measurements on one model."""

    engine: str
    status: str = "ok"  # ok | skipped | failed
    note: str = ""
    load_s: float | None = None
    first_run_s: float | None = None
    round_medians_s: list[float] = field(default_factory=list)
    samples_s: list[float] = field(default_factory=list)
    max_abs_err: float | None = None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.samples_s) if self.samples_s else None

    def quartiles_s(self) -> tuple[float, float] | None:
        if len(self.samples_s) < 2:
            return None
        q = statistics.quantiles(self.samples_s, n=4)
        return q[0], q[2]

    def summary(self) -> dict[str, Any]:
        quartiles = self.quartiles_s()
        return {
            "engine": self.engine,
            "status": self.status,
            "note": self.note,
            "load_s": self.load_s,
            "first_run_s": self.first_run_s,
            "median_ms": _ms(self.median_s),
            "p25_ms": _ms(quartiles[0]) if quartiles else None,
            "p75_ms": _ms(quartiles[1]) if quartiles else None,
            "min_ms": _ms(min(self.samples_s)) if self.samples_s else None,
            "iterations": len(self.samples_s),
            "round_medians_ms": [_ms(s) for s in self.round_medians_s],
            "max_abs_err": _finite(self.max_abs_err),
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _finite(value: float | None) -> float | None:
    """JSON has no inf or NaN."""
    return value if value is not None and math.isfinite(value) else None


@dataclass
class Measurement:
    """All engines on one model: what the table and the JSON show."""

    name: str
    description: str
    results: list[EngineResult]
    baseline: str | None
    reference: str | None
    bytes_moved: int | None = None

    def result(self, engine: str) -> EngineResult | None:
        return next((r for r in self.results if r.engine == engine), None)

    def ratio(self, result: EngineResult) -> float | None:
        base = self.result(self.baseline) if self.baseline else None
        if base is None or base.median_s is None or result.median_s is None:
            return None
        return result.median_s / base.median_s

    def gb_per_s(self, result: EngineResult) -> float | None:
        if self.bytes_moved is None or not result.median_s:
            return None
        return self.bytes_moved / result.median_s / 1e9

    def summary(self) -> dict[str, Any]:
        rows = []
        for r in self.results:
            row = r.summary()
            row["ratio"] = self.ratio(r)
            row["gb_per_s"] = self.gb_per_s(r)
            rows.append(row)
        return {
            "name": self.name,
            "description": self.description,
            "baseline": self.baseline,
            "reference": self.reference,
            "bytes_moved": self.bytes_moved,
            "engines": rows,
        }


# --- engine adapters (run inside the worker processes) ---------------------------------------


def _output_names(model_path: str) -> list[str]:
    import onnx

    return [o.name for o in onnx.load(model_path, load_external_data=False).graph.output]


def _compile_snipjit(job: Job):
    import snipjit

    if not hasattr(snipjit, "compile"):
        raise EngineUnavailable("this snipjit has no compile() yet")
    try:
        return snipjit.compile(job.model, **job.engine.options)
    except NotImplementedError as error:
        raise EngineUnavailable(f"snipjit cannot compile this model yet: {error}") from error


def _plan_info(compiled) -> str:
    plan = getattr(compiled, "plan", None)
    if plan is None:
        return ""
    kinds: dict[str, int] = {}
    for step in plan:
        kind = getattr(step, "kind", "?")
        kinds[kind] = kinds.get(kind, 0) + 1
    return "plan: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))


def load_snipjit(job: Job, feeds: Feeds) -> Loaded:
    compiled = _compile_snipjit(job)
    return Loaded(compiled.run, _plan_info(compiled))


def load_snipjit_request(job: Job, feeds: Feeds) -> Loaded:
    """A request writing into caller-owned output buffers, allocated once from a first run."""
    compiled = _compile_snipjit(job)
    request = compiled.create_request()
    first = compiled.run(feeds)
    buffers = {name: np.empty_like(out) for name, out in zip(_output_names(job.model), first)}
    outputs = list(buffers.values())

    def run(feeds: Feeds) -> list[np.ndarray]:
        request.run(feeds, outputs=buffers)
        return outputs

    return Loaded(run, _plan_info(compiled))


def load_onnxruntime(job: Job, feeds: Feeds) -> Loaded:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = job.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise here
    session = ort.InferenceSession(job.model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return Loaded(lambda feeds: session.run(names, feeds))


def load_openvino(job: Job, feeds: Feeds) -> Loaded:
    import openvino as ov

    precision = job.engine.options.get("precision", "f32")
    config = {
        "INFERENCE_NUM_THREADS": job.threads,
        "INFERENCE_PRECISION_HINT": precision,
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": 1,
    }
    compiled = ov.Core().compile_model(job.model, "CPU", config)
    request = compiled.create_infer_request()
    outputs = compiled.outputs

    # Inputs are read in place (as onnxruntime does); outputs are copied out, as users get them.
    def run(feeds: Feeds) -> list[np.ndarray]:
        result = request.infer(feeds, share_inputs=True)
        return [result[o] for o in outputs]

    return Loaded(run, f"precision {precision}")


_HERE = "snipjit.benchmark"  # not __name__, which is "__main__" under python -m
MODEL_ENGINES: dict[str, Engine] = {
    "snipjit": Engine("snipjit", f"{_HERE}:load_snipjit", ("snipjit",)),
    "snipjit-req": Engine("snipjit-req", f"{_HERE}:load_snipjit_request", ("snipjit",)),
    "onnxruntime": Engine("onnxruntime", f"{_HERE}:load_onnxruntime", ("onnxruntime",)),
    "openvino": Engine("openvino", f"{_HERE}:load_openvino", ("openvino",)),
    "openvino-bf16": Engine("openvino-bf16", f"{_HERE}:load_openvino", ("openvino",), {"precision": "bf16"}),
}


# --- the worker process ----------------------------------------------------------------------


def _resolve(reference: str) -> Callable[..., Loaded]:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _read_arrays(path: str) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


@dataclass
class _WorkerState:
    run: Runner
    feeds: Feeds


def _load(job: Job, warmup_s: float) -> tuple[_WorkerState, LoadReport]:
    for module in job.engine.requires:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise EngineUnavailable(f"{module} is not installed ({error})") from error
    feeds = dict(zip(job.input_names, _read_arrays(job.feeds_path)))
    loader = _resolve(job.engine.loader)
    start = time.perf_counter()
    loaded = loader(job, feeds)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    outputs = loaded.run(feeds)
    first_run_s = time.perf_counter() - start
    np.savez(job.outputs_path, *[np.asarray(o) for o in outputs])
    warm = _time_iterations(loaded.run, feeds, 1)
    while sum(warm) < warmup_s and len(warm) < 50:
        warm += _time_iterations(loaded.run, feeds, 1)
    report = LoadReport(load_s, first_run_s, statistics.median(warm), loaded.info)
    return _WorkerState(loaded.run, feeds), report


def _time_iterations(run: Runner, feeds: Feeds, n: int) -> list[float]:
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(n):
            start = time.perf_counter()
            run(feeds)
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return times


def _serve(conn, job: Job, warmup_s: float) -> None:
    state: _WorkerState | None = None
    while True:
        command, *args = conn.recv()
        if command == "stop":
            return
        try:
            if command == "load":
                state, reply = _load(job, warmup_s)
            else:
                reply = _time_iterations(state.run, state.feeds, args[0])
            conn.send(("ok", reply))
        except EngineUnavailable as error:
            conn.send(("skipped", str(error)))
        except Exception as error:  # reported in the table; the other engines go on
            conn.send(("failed", _describe_error(error)))


def _describe_error(error: Exception) -> str:
    where = traceback.extract_tb(error.__traceback__)[-1]
    message = (str(error).splitlines() or [""])[0][:300]
    return f"{type(error).__name__}: {message} (at {Path(where.filename).name}:{where.lineno})"


@contextlib.contextmanager
def _thread_env(threads: int) -> Iterator[None]:
    """Children inherit the environment at start: thread pools read it when their library loads."""
    saved = {name: os.environ.get(name) for name in THREAD_ENV}
    os.environ.update({name: str(threads) for name in THREAD_ENV})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _WorkerFailed(Exception):
    def __init__(self, status: str, note: str):
        super().__init__(note)
        self.status, self.note = status, note


class _Worker:
    """One engine's process and the parent's end of its pipe."""

    def __init__(self, job: Job, warmup_s: float):
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        with _thread_env(job.threads):
            self.process = context.Process(target=_serve, args=(child, job, warmup_s), daemon=True)
            self.process.start()
        child.close()

    def call(self, message: tuple, timeout_s: float) -> Any:
        try:
            self.conn.send(message)
            if not self.conn.poll(timeout_s):
                self.close()
                raise _WorkerFailed("failed", f"no answer within {timeout_s:.0f} s")
            status, payload = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self.process.join(5)
            raise _WorkerFailed("failed", f"worker died (exit code {self.process.exitcode})")
        if status != "ok":
            raise _WorkerFailed(status, payload)
        return payload

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


# --- the timing loop -------------------------------------------------------------------------


@dataclass
class Settings:
    """How long and on how many threads to measure."""

    rounds: int = 5
    threads: int = 2
    round_s: float = 0.3  # time per engine per round
    warmup_s: float = 0.2
    min_iterations: int = 1
    max_iterations: int = 5000
    load_timeout_s: float = 900.0
    settle_s: float = 0.05  # pause between engines, so spinning threads of the last one go idle


def engine_available(engine: Engine) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in engine.requires)


def max_abs_error(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    if len(outputs) != len(reference):
        return math.inf
    worst = 0.0
    for out, ref in zip(outputs, reference):
        if out.shape != ref.shape:
            return math.inf
        if out.size:
            diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
            worst = max(worst, float(np.max(diff)))
    return worst


def measure(
    name: str,
    model: str | None,
    engines: Sequence[Engine],
    feeds: Feeds,
    settings: Settings | None = None,
    *,
    description: str = "",
    references: Sequence[Engine] = (),
    baseline: str = "snipjit",
    bytes_moved: int | None = None,
    skipped: dict[str, str] | None = None,
) -> Measurement:
    """Load each engine in its own process, then time them in alternating rounds.

    The outputs are compared with those of the first of `references` that runs (reused if it is
    also timed); `skipped` lists engines that cannot express this model, with the reason, for the table.
    """
    settings = settings or Settings()
    results = {e.name: EngineResult(e.name) for e in engines}
    for engine_name, note in (skipped or {}).items():
        results[engine_name] = EngineResult(engine_name, "skipped", note)
    workers: dict[str, _Worker] = {}
    iterations: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="snipjit-bench-") as tmp:
        feeds_path = os.path.join(tmp, "feeds.npz")
        np.savez(feeds_path, *feeds.values())

        def job(engine: Engine) -> Job:
            outputs = os.path.join(tmp, f"out-{engine.name}.npz")
            return Job(engine, model, list(feeds), feeds_path, outputs, settings.threads)

        try:
            for engine in engines:
                result = results[engine.name]
                if not engine_available(engine):
                    result.status, result.note = "skipped", f"{', '.join(engine.requires)} not installed"
                    continue
                worker = _Worker(job(engine), settings.warmup_s)
                try:
                    report: LoadReport = worker.call(("load",), settings.load_timeout_s)
                except _WorkerFailed as failure:
                    result.status, result.note = failure.status, failure.note
                    worker.close()
                    continue
                workers[engine.name] = worker
                result.load_s, result.first_run_s, result.note = report.load_s, report.first_run_s, report.info
                wanted = math.ceil(settings.round_s / max(report.iteration_s, 1e-9))
                iterations[engine.name] = min(max(wanted, settings.min_iterations), settings.max_iterations)

            reference_name = _compare_outputs(results, engines, references, job, settings)

            for round_index in range(settings.rounds):
                names = list(workers)
                shift = round_index % max(len(names), 1)
                for engine_name in names[shift:] + names[:shift]:
                    _time_round(workers, engine_name, iterations[engine_name], results[engine_name], settings)
        finally:
            for worker in workers.values():
                worker.close()

    return Measurement(
        name,
        description,
        list(results.values()),
        baseline=_choose_baseline(results, baseline),
        reference=reference_name,
        bytes_moved=bytes_moved,
    )


def _time_round(
    workers: dict[str, _Worker], name: str, n: int, result: EngineResult, settings: Settings
) -> None:
    worker = workers[name]
    timeout = max(120.0, 50 * settings.round_s)
    try:
        times = worker.call(("time", n), timeout)
    except _WorkerFailed as failure:
        result.status, result.note = failure.status, failure.note
        worker.close()
        del workers[name]
        return
    result.samples_s.extend(times)
    result.round_medians_s.append(statistics.median(times))
    time.sleep(settings.settle_s)


def _compare_outputs(
    results: dict[str, EngineResult],
    engines: Sequence[Engine],
    references: Sequence[Engine],
    job: Callable[[Engine], Job],
    settings: Settings,
) -> str | None:
    """Fill in max_abs_err of every loaded engine; returns the name of the reference used."""
    for reference in references:
        timed = results.get(reference.name)
        if timed is not None:
            if timed.load_s is not None:
                break
        elif engine_available(reference):
            worker = _Worker(job(reference), 0.0)
            try:
                worker.call(("load",), settings.load_timeout_s)
                break
            except _WorkerFailed:
                pass
            finally:
                worker.close()
    else:
        return None
    expected = _read_arrays(job(reference).outputs_path)
    for engine in engines:
        result = results[engine.name]
        if engine.compare and result.load_s is not None:
            result.max_abs_err = max_abs_error(_read_arrays(job(engine).outputs_path), expected)
            if not math.isfinite(result.max_abs_err):
                result.note = f"outputs differ in shape, count or NaNs from {reference.name}'s; {result.note}"
    return reference.name


def _choose_baseline(results: dict[str, EngineResult], preferred: str) -> str | None:
    """The preferred engine if it ran, else the first one that did."""
    for name in [preferred, *results]:
        result = results.get(name)
        if result is not None and result.median_s is not None:
            return name
    return None


# --- inputs, machine, table ------------------------------------------------------------------


def model_inputs(model) -> list[tuple[str, np.dtype, list[int | str | None]]]:
    """(name, dtype, dims) of the inputs a caller feeds; dims are ints or dynamic names (or None)."""
    import onnx

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(model, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
        inputs.append((value.name, dtype, dims))
    return inputs


def random_feeds(model, dims: dict[str, int] | None = None, seed: int = 0) -> Feeds:
    """Random inputs of the model's types; a dynamic dim takes dims[name], else 1.

    Floats are standard normal; integers are 0 or 1, valid as indices into any table (token
    ids, token types, masks); booleans are random.
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dtype, shape in model_inputs(model):
        shape = [d if isinstance(d, int) else (dims or {}).get(d, 1) for d in shape]
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise ValueError(f"input {name!r}: cannot make random {dtype} values; pass feeds")
    return feeds


def machine_info() -> dict[str, Any]:
    """CPU, cores, date and the versions of the engines, for the record of a run."""
    cpu, flags = platform.processor(), []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and cpu in ("", platform.machine()):
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")
                flags = [f for f in wanted if f in value.split()]
    versions = {}
    for package in ("snipjit", "numpy", "onnx", "onnxruntime", "openvino", "torch", "transformers", "numexpr"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cpu_flags": flags,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(measurement: Measurement) -> str:
    """The measurement as a fixed-width text table, slowest columns last."""
    m = measurement
    base = m.baseline or "-"
    header = ["engine", "median ms", "p25-p75 ms", f"x {base}", "GB/s", "load s", "1st run s", "max|err|", "note"]
    rows = [header]
    for r in m.results:
        quartiles = r.quartiles_s()
        spread = f"{quartiles[0] * 1e3:.3g}-{quartiles[1] * 1e3:.3g}" if quartiles else "-"
        note = r.note if r.status == "ok" else f"{r.status}: {r.note}"
        note = note if len(note) <= 100 else note[:97] + "..."
        rows.append([
            r.engine,
            _fmt(r.median_s and r.median_s * 1e3, ".4g"),
            spread,
            _fmt(m.ratio(r), ".2f"),
            _fmt(m.gb_per_s(r), ".1f"),
            _fmt(r.load_s, ".2f"),
            _fmt(r.first_run_s, ".3f"),
            _fmt(r.max_abs_err, ".1e"),
            note,
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:-1], widths[1:])]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    title = f"{m.name}: {m.description}" if m.description else m.name
    reference = f"errors vs {m.reference}" if m.reference else "no reference outputs"
    return "\n".join([title, f"({reference}; x {base} = latency / {base}'s latency)", *lines])


# --- `snipjit bench MODEL` -------------------------------------------------------------------


def benchmark_model(
    path,
    engines: Sequence[str] = DEFAULT_ENGINES,
    feeds: Feeds | None = None,
    rounds: int = 5,
    threads: int = 2,
    dims: dict[str, int] | None = None,
) -> Measurement:
    """Time snipjit and the installed peers on an ONNX model (a path or an onnx.ModelProto)."""
    unknown = [e for e in engines if e not in MODEL_ENGINES]
    if unknown:
        raise ValueError(f"unknown engines {unknown}; choose from {sorted(MODEL_ENGINES)}")
    with tempfile.TemporaryDirectory(prefix="snipjit-model-") as tmp:
        if not isinstance(path, (str, os.PathLike)):
            import onnx

            saved = os.path.join(tmp, "model.onnx")
            onnx.save(path, saved)
            path = saved
        path = os.fspath(path)
        feeds = feeds if feeds is not None else random_feeds(path, dims)
        return measure(
            Path(path).name,
            path,
            [MODEL_ENGINES[e] for e in engines],
            feeds,
            Settings(rounds=rounds, threads=threads),
            description=_describe_feeds(feeds),
            references=[MODEL_ENGINES["onnxruntime"]],
        )


def _describe_feeds(feeds: Feeds) -> str:
    return ", ".join(f"{name} {a.dtype}[{'x'.join(map(str, a.shape))}]" for name, a in feeds.items())


def _parse_dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=INT, got {text!r}")
    return name, int(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="snipjit bench",
        description="Time snipjit against onnxruntime and OpenVINO on an ONNX model with random inputs.",
    )
    parser.add_argument("model", help="path of the .onnx file")
    parser.add_argument(
        "--engines",
        default=",".join(DEFAULT_ENGINES),
        help=f"comma-separated, from {', '.join(MODEL_ENGINES)} (default: %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of alternating engines (default: 5)")
    parser.add_argument("--threads", type=int, default=2, help="threads for every engine (default: 2)")
    parser.add_argument(
        "--dim",
        type=_parse_dim,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a dynamic input dimension (default 1), e.g. --dim batch=8",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results and the machine as JSON")
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    dims = dict(args.dim)
    try:
        unset = {d for _, _, shape in model_inputs(args.model) for d in shape if not isinstance(d, int)}
    except OSError as error:
        parser.error(str(error))
    if unset - set(dims):
        names = ", ".join(sorted(str(d) for d in unset - set(dims)))
        print(f"dynamic dimensions set to 1: {names} (choose with --dim NAME=VALUE)")
    try:
        measurement = benchmark_model(
            args.model, engines, rounds=args.rounds, threads=args.threads, dims=dims
        )
    except (ValueError, OSError) as error:
        parser.error(str(error))
    print(format_table(measurement))
    if args.json:
        import json

        record = {"machine": machine_info(), "threads": args.threads, "results": [measurement.summary()]}
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
