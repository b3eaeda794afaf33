"""The suite's engines: the model engines that `snipjit bench` also uses (snipjit, ONNX Runtime, OpenVINO,
opened by `snipjit.benchmark.MODEL_ENGINES`), plus the hand-written NumPy, numexpr, PyTorch and C
versions of a workload and the stream limit. The loaders run in the worker processes of `bench.worker`,
which find the model engine or the workload by the name in the engine's options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from bench import models, native, stream, workloads
from bench.worker import Engine, Job
from bench.workloads import Workload
from snipjit import benchmark
from snipjit.benchmark import EngineUnavailable, Feeds, Opened


def load_model_engine(job: Job, feeds: Feeds) -> Opened:
    return benchmark.MODEL_ENGINES[job.engine.options["engine"]].open(job.model, job.threads, feeds)


MODEL_ENGINES = {
    name: Engine(name, f"{__name__}:{load_model_engine.__name__}", (opener.package,), {"engine": name})
    for name, opener in benchmark.MODEL_ENGINES.items()
}
ALL = (*MODEL_ENGINES, "numpy", "numexpr", "torch", "hand-c", "stream-limit")


def _workload(job: Job) -> Workload:
    return workloads.WORKLOADS[job.engine.options["workload"]]


def load_numpy(job: Job, feeds: Feeds) -> Opened:
    function = _workload(job).numpy_fn
    return Opened(lambda feeds: function(**feeds))


def load_numpy64(job: Job, feeds: Feeds) -> Opened:
    """The NumPy version on float64 copies of the inputs: the reference, never timed."""
    function = _workload(job).numpy_fn
    return Opened(lambda feeds: function(**{k: v.astype(np.float64) for k, v in feeds.items()}))


def load_numexpr(job: Job, feeds: Feeds) -> Opened:
    import numexpr

    numexpr.set_num_threads(job.threads)
    expression = _workload(job).numexpr_expr
    return Opened(lambda feeds: [numexpr.evaluate(expression, local_dict=feeds)])


def load_torch(job: Job, feeds: Feeds) -> Opened:
    import torch

    torch.set_num_threads(job.threads)
    torch.set_num_interop_threads(1)
    workload = _workload(job)
    if workload.torch_model is not None:
        module = workload.torch_model()

        def call(tensors):
            return module(*(tensors[name] for name in job.input_names))
    else:

        def call(tensors):
            return workload.torch_fn(**tensors)

    def run(feeds: Feeds) -> list[np.ndarray]:
        with torch.inference_mode():
            return [out.numpy() for out in call({k: torch.from_numpy(v) for k, v in feeds.items()})]

    return Opened(run, f"torch {torch.__version__}")


def load_handwritten(job: Job, feeds: Feeds) -> Opened:
    """The hand-written C kernel, bound to the feed arrays (bound again if other arrays come)."""
    make = _workload(job).handwritten_fn
    bound: dict = {}

    def run(feeds: Feeds) -> list[np.ndarray]:
        arrays, previous = list(feeds.values()), bound.get("arrays")
        if previous is None or len(arrays) != len(previous) or any(a is not b for a, b in zip(arrays, previous)):
            bound.update(arrays=arrays, call=make(job.threads, **feeds))
        call, outputs = bound["call"]
        call()
        return outputs

    try:
        run(feeds)
    except (ValueError, native.CompilerMissing) as error:
        raise EngineUnavailable(str(error)) from error
    return Opened(run, "gcc -O3 -march=native, OpenMP")


def load_stream_limit(job: Job, feeds: Feeds) -> Opened:
    """Reads the inputs of the outputs' size (weights are negligible) and writes the outputs."""
    outputs = [np.empty(shape, np.float32) for shape in models.output_shapes(job.model)]
    inputs = [a for a in feeds.values() if a.size == outputs[0].size]
    try:
        call = stream.bind(inputs, outputs, job.threads)
    except (ValueError, native.CompilerMissing) as error:
        raise EngineUnavailable(str(error)) from error
    moved = sum(a.nbytes for a in [*inputs, *outputs])
    return Opened(lambda feeds: (call(), outputs)[1], f"reads+writes {moved / 2**20:.0f} MiB per run")


@dataclass
class _SuiteEngine:
    load: Callable[[Job, Feeds], Opened]
    requires: tuple[str, ...]
    applies: Callable[[Workload], bool]


SUITE_ENGINES = {
    "numpy": _SuiteEngine(load_numpy, (), lambda w: w.numpy_fn is not None),
    "numexpr": _SuiteEngine(load_numexpr, ("numexpr",), lambda w: w.numexpr_expr is not None),
    "torch": _SuiteEngine(load_torch, ("torch",), lambda w: bool(w.torch_fn or w.torch_model)),
    "hand-c": _SuiteEngine(load_handwritten, (), lambda w: w.handwritten_fn is not None),
    "stream-limit": _SuiteEngine(load_stream_limit, (), lambda w: w.memory_bound),
}


def _engine(name: str, load: Callable, requires: tuple[str, ...], workload: Workload) -> Engine:
    return Engine(
        name,
        f"{__name__}:{load.__name__}",
        requires,
        {"workload": workload.name},
        compare=name != "stream-limit",
    )


def engines_for(workload: Workload, names: list[str]) -> tuple[list[Engine], dict[str, str]]:
    """The engines of `names` that apply to the workload, and those that cannot express it, with
    the reason. Engines that do not apply at all (NumPy for a zoo model) are left out."""
    engines, unsupported = [], {}
    for name in names:
        if name in MODEL_ENGINES:
            engines.append(MODEL_ENGINES[name])
        elif name in workload.unsupported:
            unsupported[name] = workload.unsupported[name]
        elif SUITE_ENGINES[name].applies(workload):
            suite = SUITE_ENGINES[name]
            engines.append(_engine(name, suite.load, suite.requires, workload))
    return engines, unsupported


def references_for(workload: Workload) -> list[Engine]:
    """Float64 NumPy where the workload has a NumPy version, then onnxruntime."""
    first = [_engine("numpy-f64", load_numpy64, (), workload)] if workload.numpy_fn else []
    return [*first, MODEL_ENGINES["onnxruntime"]]
