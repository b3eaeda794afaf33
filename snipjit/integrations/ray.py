"""Scale-out on Ray: batch inference over a Ray Dataset (`predict_dataset`, `SnipjitPredictor`) and a Ray Serve
deployment (`snipjit_deployment`), every Ray worker holding a snipjit model loaded from a saved artifact.

Why this shape: Ray schedules work by CPUs, so each actor or replica loads the model with `num_threads` equal to
the CPUs Ray reserved for it and never oversubscribes the node; and a saved artifact (`CompiledModel.save`)
loads without generating code on a matching CPU, so actors start in milliseconds (for a model with dynamic
dimensions, save it with `feeds` of the batch shapes it will run). The artifact is a path every worker can read
(shared storage on a multi-node cluster) or the file's bytes.

    cm.save("model.snipjit", feeds=example_batch)
    ds = predict_dataset(ray.data.from_items(rows), "model.snipjit", num_threads=1, concurrency=2)
    handle = serve.run(snipjit_deployment("model.snipjit", num_threads=2))

Ray itself is imported only inside the functions that need it: install it with `pip install "snipjit[ray]"`.
"""
from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..compiler import CompiledModel, load
from ..ir.graph import TensorType
from ..runtime.execution.feeds import FeedError

if TYPE_CHECKING:
    import ray.data
    from ray.serve import Application

ArtifactSource = str | os.PathLike | bytes
Concurrency = int | tuple[int, int] | tuple[int, int, int]
DEFAULT_BATCH_SIZE = 64


def model_input_types(model: CompiledModel) -> dict[str, TensorType]:
    """The type of every input users feed, by name: the entry function's inputs, and the constant inputs
    folded on the first run (typed by the folding function that reads them)."""
    types = {v.name: v.type for v in model.graph.inputs}
    if model.runtime_constants is not None:
        types |= {v.name: v.type for v in model.runtime_constants.folding.fold.inputs}
    return {name: types[name] for name in model.input_names if name in types}


def actor_cpus() -> int:
    """The CPUs Ray assigned to the calling actor or task (whole ones, at least 1); 1 outside Ray."""
    try:
        import ray
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 0) if ray.is_initialized() else 0
    except ImportError:
        cpus = 0
    return max(1, int(cpus))


def as_input(values: Any, t: TensorType | None, what: str) -> np.ndarray:
    """`values` (an array, a column of array cells, nested lists) as an array of `t`'s dtype. Converts within
    a kind (float64 → float32, int32 → int64) and to a wider kind (ints → floats); anything else is an error
    naming `what` and the expected type."""
    try:
        array = values if isinstance(values, np.ndarray) else np.asarray(values)
    except ValueError as e:   # nested lists of uneven lengths
        raise FeedError(f"{what} is ragged ({e}); every sample must have the same shape") from None
    if array.dtype == object:
        array = _stack_cells(array, what)
    if t is None:
        return array
    want = t.dtype.np
    if array.dtype != want:
        if not np.can_cast(array.dtype, want, casting="same_kind"):
            raise FeedError(f"{what} has dtype {array.dtype}, but the model input is {t} (numpy {want}); "
                            f"{array.dtype} does not convert to {want} without changing kind")
        array = array.astype(want)
    if t.shape is not None and array.ndim != len(t.shape):
        raise FeedError(f"{what} has shape {list(array.shape)} (rank {array.ndim}), but the model input is {t} "
                        f"(rank {len(t.shape)}); in a batch, axis 0 is the rows and each cell is one sample")
    return array


def _stack_cells(column: np.ndarray, what: str) -> np.ndarray:
    """A column of array cells (numpy dtype object, as Ray Data gives cells of varying shapes) stacked into one
    array, or a clear error when the cells differ in shape."""
    cells = [np.asarray(c) for c in column]
    shapes = sorted({c.shape for c in cells})
    if len(shapes) > 1:
        raise FeedError(f"{what} holds cells of different shapes {shapes[:4]}; pad them to one shape "
                        "(e.g. a fixed sequence length) before inference")
    if not cells:
        return np.asarray(column)
    stacked = np.stack(cells)
    if stacked.dtype == object:
        raise FeedError(f"{what} holds cells that are not numbers (e.g. {cells[0]!r:.60})")
    return stacked


def _check_threads(num_threads: int | None) -> int:
    if num_threads is None:
        return actor_cpus()
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a whole number of at least 1, got {num_threads!r}")
    return num_threads


def _output_map(output_names: Sequence[str], output_columns: Mapping[str, str] | Sequence[str] | None) -> dict:
    """{output name: column} for the outputs kept, in the model's output order."""
    if output_columns is None:
        return {name: name for name in output_names}
    chosen = dict(output_columns) if isinstance(output_columns, Mapping) else {n: n for n in output_columns}
    unknown = sorted(set(chosen) - set(output_names))
    if unknown:
        raise ValueError(f"output_columns names {unknown}, which are not outputs of the model; "
                         f"its outputs are {list(output_names)}")
    return {name: chosen[name] for name in output_names if name in chosen}


class SnipjitPredictor:
    """A callable class for `Dataset.map_batches(..., batch_format="numpy")`: each actor loads the model once,
    then every batch's columns named like the model's inputs are fed to it, and the batch comes back with the
    model's outputs added as columns (one row per input row).

    `input_columns` maps a model input to the column that feeds it (default: the column of the same name);
    `output_columns` maps outputs to the columns they become, or lists the outputs to keep (default: every
    output, under its own name). `num_threads` defaults to the CPUs Ray reserved for the actor."""

    def __init__(self, artifact: ArtifactSource, num_threads: int | None = None, streams: int | None = None,
                 input_columns: Mapping[str, str] | None = None,
                 output_columns: Mapping[str, str] | Sequence[str] | None = None):
        self.model = load(artifact, num_threads=_check_threads(num_threads), streams=streams)
        self.input_types = model_input_types(self.model)
        renamed = dict(input_columns or {})
        unknown = sorted(set(renamed) - set(self.model.input_names))
        if unknown:
            raise ValueError(f"input_columns names {unknown}, which are not inputs of the model; "
                             f"its inputs are {self.model.input_names}")
        self.input_columns = {name: renamed.get(name, name) for name in self.model.input_names}
        self.output_columns = _output_map(self.model.output_names, output_columns)

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = {name: col for name, col in self.input_columns.items() if col not in batch}
        if missing:
            needs = ", ".join(f"model input '{n}' needs column '{c}'" for n, c in missing.items())
            raise FeedError(f"{needs}, which the batch does not have; its columns are {sorted(batch)} "
                            "(feed another column with input_columns={input: column})")
        feeds = {name: as_input(batch[col], self.input_types.get(name), f"column '{col}' (model input '{name}')")
                 for name, col in self.input_columns.items()}
        rows = len(next(iter(feeds.values()))) if feeds else len(next(iter(batch.values())))
        outputs = dict(zip(self.model.output_names, self.model.run(feeds)))
        result = dict(batch)
        for name, col in self.output_columns.items():
            value = outputs[name]
            if value.ndim == 0 or value.shape[0] != rows:
                raise FeedError(f"model output '{name}' has shape {list(value.shape)}, not one row per input row "
                                f"({rows}); leave it out with output_columns")
            if col in result:
                raise FeedError(f"model output '{name}' would replace the batch's column '{col}'; "
                                "name its column with output_columns={output: column}")
            result[col] = value
        return result


def _compute(concurrency: Concurrency):
    from ray.data import ActorPoolStrategy
    if isinstance(concurrency, int):
        return ActorPoolStrategy(size=concurrency)
    sizes = dict(zip(("min_size", "max_size", "initial_size"), concurrency))
    return ActorPoolStrategy(**sizes)


def predict_dataset(ds: ray.data.Dataset, artifact: ArtifactSource, *, num_threads: int = 1,
                    concurrency: Concurrency | None = None, batch_size: int | None = DEFAULT_BATCH_SIZE,
                    streams: int | None = None, input_columns: Mapping[str, str] | None = None,
                    output_columns: Mapping[str, str] | Sequence[str] | None = None,
                    **map_batches_options) -> ray.data.Dataset:
    """`ds` with the model's outputs added as columns, by a pool of `SnipjitPredictor` actors, each reserving
    `num_threads` CPUs and running the model on as many threads. `concurrency`: a fixed number of actors, or
    (min, max[, initial]) for an autoscaling pool (default: Ray's, 1 to as many as fit). Batches have
    `batch_size` rows (None: whole blocks). Other keywords go to `Dataset.map_batches`."""
    options: dict[str, Any] = {"num_cpus": _check_threads(num_threads), "batch_format": "numpy",
                               "batch_size": batch_size, **map_batches_options}
    if concurrency is not None:
        options.setdefault("compute", _compute(concurrency))
    constructor = {"artifact": artifact, "num_threads": num_threads, "streams": streams,
                   "input_columns": input_columns, "output_columns": output_columns}
    return ds.map_batches(SnipjitPredictor, fn_constructor_kwargs=constructor, **options)


class SnipjitDeployment:
    """A Ray Serve replica holding one snipjit model. HTTP: POST a JSON body `{"inputs": {name: nested list}}`,
    get `{"outputs": {name: nested list}}` (400 and `{"error": ...}` for a body or feed the model cannot take).
    Python: `handle.predict.remote({name: array})` gives `{output name: array}`. Inferences run on the model's
    own streams (`streams`, default 1), off the replica's event loop."""

    def __init__(self, artifact: ArtifactSource, num_threads: int | None = None, streams: int | None = None):
        self.model = load(artifact, num_threads=_check_threads(num_threads), streams=streams)
        self.input_types = model_input_types(self.model)

    async def predict(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        arrays = {name: as_input(value, self.input_types.get(name), f"input '{name}'") if name in self.input_types
                  else value for name, value in feeds.items()}
        outputs = await asyncio.wrap_future(self.model.start_async(arrays))
        return dict(zip(self.model.output_names, outputs))

    async def __call__(self, request) -> Any:
        from starlette.responses import JSONResponse
        usage = 'the body must be JSON {"inputs": {input name: nested list}}'
        try:
            body = await request.json()
        except ValueError as e:
            return JSONResponse({"error": f"{usage}: {e}"}, status_code=400)
        inputs = body.get("inputs") if isinstance(body, dict) else None
        if not isinstance(inputs, dict):
            return JSONResponse({"error": f"{usage}; the model's inputs are {self.model.input_names}"},
                                status_code=400)
        try:
            outputs = await self.predict(inputs)
        except FeedError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        return {"outputs": {name: value.tolist() for name, value in outputs.items()}}


def snipjit_deployment(artifact: ArtifactSource, *, num_threads: int = 1, streams: int | None = None,
                       name: str = "snipjit", **deployment_options) -> Application:
    """A Ray Serve application of `SnipjitDeployment` replicas, each reserving `num_threads` CPUs and running the
    model on as many threads; run it with `serve.run(app, route_prefix=...)`. Other keywords go to
    `serve.deployment` (e.g. `num_replicas`, `max_ongoing_requests`, `ray_actor_options`)."""
    from ray import serve
    actor_options = {"num_cpus": _check_threads(num_threads), **deployment_options.pop("ray_actor_options", {})}
    deployment = serve.deployment(SnipjitDeployment, name=name, ray_actor_options=actor_options,
                                  **deployment_options)
    return deployment.bind(artifact, num_threads=num_threads, streams=streams)


__all__ = ["SnipjitPredictor", "SnipjitDeployment", "predict_dataset", "snipjit_deployment", "model_input_types",
           "actor_cpus", "as_input"]
