"""`snipjit.compile`: model → Graph IR → graph passes → program, and the `CompiledModel` users hold."""
from __future__ import annotations

import os
import threading
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .ir.graph import Graph, TensorType, is_held_placeholder
from .passes.pipeline import GraphPass, default_pipeline
from .runtime.planning import compile_workers
from .runtime.caches import kernel_cache, model_cache, object_cache
from .runtime.caches.artifact import Artifact, ArtifactError, Machine
from .runtime.planning.program import Program, Step
from .runtime.execution.profile import Profile
from .runtime.execution import control_flow
from .runtime.execution.async_queue import AsyncQueue, Callback
from .runtime.execution.request import Request
from .runtime.execution.settings import ExecutionSettings
from .runtime.implementations.held_weights import HeldWeight, offering
from .runtime.parallel.native_threads import POOL_MODULE, pool_code, supported as native_pool_supported
from .runtime.parallel.workers import Workers
from .runtime.execution.runtime_constants import RuntimeConstants


Feeds = Mapping[str, np.ndarray]


@dataclass
class PassRecord:
    name: str
    seconds: float
    graph_text: str


def load_graph(model: Any) -> Graph:
    """Accept a snipjit Graph, an onnx.ModelProto, a path or the bytes of an ONNX model."""
    if isinstance(model, Graph):
        held = [v.name for v in model.constants if is_held_placeholder(v.data)]
        if held:
            raise ValueError(f"this graph comes from a compiled model whose kernels hold constants "
                             f"{held[:3]} in their own form (their values are gone from the graph): "
                             "compile the original model instead")
        return model.copy()
    from .frontend.onnx import load
    if isinstance(model, (str, bytes, os.PathLike)) or type(model).__name__ == "ModelProto":
        return load(model)
    raise TypeError(f"cannot compile a {type(model).__name__}: pass a path, bytes, onnx.ModelProto "
                    "or snipjit Graph")


class CompiledModel:
    """A model compiled once; `run` is thread-safe, `create_request` gives a per-thread stream,
    `start_async` runs inferences on `settings.streams` streams at once."""

    def __init__(self, graph: Graph, program: Program, history: list[PassRecord], options: dict,
                 settings: ExecutionSettings | None = None):
        self.graph = graph
        self.program = program
        self.history = history
        self.options = options
        self.settings = settings or ExecutionSettings.from_options()
        self._local = threading.local()
        self._queue: AsyncQueue | None = None
        self._queue_lock = threading.Lock()
        folding = graph.meta.get("runtime_folding")
        self.runtime_constants = RuntimeConstants(folding, options.get("refold", False)) if folding else None

    @property
    def input_names(self) -> list[str]:
        """The inputs users feed: the entry function's, with folded tensors replaced by the constant
        inputs they come from."""
        rc = self.runtime_constants
        if rc is None:
            return [v.name for v in self.graph.inputs]
        folded = set(rc.folding.folded)
        return [v.name for v in self.graph.inputs if v.name not in folded] + \
            [n for n in rc.names if n not in {v.name for v in self.graph.inputs}]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.graph.outputs]

    @property
    def plan(self) -> list[Step]:
        return list(self.program.steps)

    def create_request(self) -> Request:
        """A stream: its own arena, and its own `settings.threads_per_stream` threads when the model was
        compiled with `num_threads` or several streams (else the process's thread pools)."""
        s = self.settings
        return Request(self.program, self.runtime_constants, Workers(s.threads_per_stream) if s.own_threads else None)

    def infer_queue(self, jobs: int | None = None, callback: Callback | None = None) -> AsyncQueue:
        """A queue running up to `jobs` inferences at once (default: `settings.streams`), each on a request
        of its own; see `snipjit.runtime.execution.async_queue`."""
        return AsyncQueue(self.create_request, jobs or self.settings.streams, callback)

    def start_async(self, feeds: Mapping[str, np.ndarray], callback: Callback | None = None,
                    userdata: Any = None) -> Future:
        """Start an inference and return its future at once (its result: the outputs); up to
        `settings.streams` run at the same time, on the model's own queue. `callback(outputs, userdata)`
        runs on the job's thread when it is done (an error it raises is the future's, and `wait_all`'s).
        The feeds must stay unchanged until then."""
        with self._queue_lock:
            if self._queue is None:
                self._queue = self.infer_queue()
        return self._queue.start_async(feeds, userdata, callback)

    def wait_all(self) -> None:
        """Wait for every inference `start_async` started; raise the first error among them."""
        if self._queue is not None:
            self._queue.wait_all()

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        req = getattr(self._local, "request", None)
        if req is None:
            req = self._local.request = self.create_request()
        return req.run(feeds, outputs)

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int = 10, warmup: int = 2) -> Profile:
        """Run `runs` inferences, timing every step; see `snipjit.runtime.execution.profile`."""
        req = self.create_request()
        for _ in range(warmup):
            req.run(feeds)
        req.profile = prof = Profile()
        for _ in range(runs):
            start = time.perf_counter()
            req.run(feeds)
            prof.total_seconds += time.perf_counter() - start
            prof.runs += 1
        return prof

    def save(self, path: str | os.PathLike, feeds: Feeds | Sequence[Feeds] | None = None) -> None:
        """Write the model as one file `snipjit.load` opens in another process or on another machine:
        the graph and its weights, the options, and the machine code of every kernel it has used
        (`snipjit.runtime.caches.artifact`). Kernels chosen for input shapes (dynamic dimensions) are
        those of the shapes run so far: give `feeds` (one or several) to run them first."""
        for f in [feeds] if isinstance(feeds, Mapping) else feeds or ():
            self.run(f)
        self._artifact().save(path)

    def _artifact(self) -> Artifact:
        kernels = {key: entry for key, make in list(self.program.kernels.items()) if (entry := make()) is not None}
        if native_pool_supported():   # the thread pool's code: every process runs it
            pool_code()
            kernels.setdefault(*object_cache.loaded_entry(POOL_MODULE))
        return Artifact.of(self.graph, self.program.held_weights(), history=self.history, options=self.options,
                           execution=self.settings.requested, machine=Machine.here(), kernels=kernels)

    def __reduce__(self):
        """Pickled as its artifact's bytes (for Ray, multiprocessing, Spark): see `save`."""
        return _from_bytes, (self._artifact().to_bytes(),)

    def explain(self, show_passes: bool = True, kernels: bool = False) -> str:
        """The graph before and after each pass, the plan with each step's implementation, the memory
        plan of each input-shape signature resolved so far (static models: resolved at compile time),
        and with `kernels=True` the final Linear IR of every generated kernel."""
        lines = [f"== execution: {self.settings.describe()} ==", "== source graph ==", self.history[0].graph_text]
        if show_passes:
            for rec in self.history[1:]:
                lines += [f"== after {rec.name} ({rec.seconds * 1e3:.1f} ms) ==", rec.graph_text]
        folding = self.graph.meta.get("folding")
        if folding is not None:
            lines.append(f"== compile-time folding: {folding} ==")
        layout = self.graph.meta.get("channels_last")
        if layout is not None:
            lines.append(f"== layout: {layout} ==")
        if self.runtime_constants is not None:
            rc = self.runtime_constants.folding
            lines += [f"== runtime folding function (runs on the first run; inputs {list(rc.constant_inputs)}) ==",
                      str(rc.fold), "== entry function ==", str(self.graph)]
        kinds: dict[str, int] = {}
        for s in self.program.steps:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        lines.append(f"== plan: {len(self.program.steps)} steps (" +
                     ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())) + ") ==")
        for i, s in enumerate(self.program.steps):
            outs = ", ".join(f"{o.name}: {o.type}" for o in s.node.outputs)
            lines.append(f"{i:4d} {s.kind:<10} {'+'.join(s.ops):<40} -> {outs}")
        lines.append("== memory ==")
        for key, plan in self.program.plans().items():
            shapes = ", ".join(f"{n}{list(shape)}" for n, (_, shape) in zip(self.input_names, key))
            lines.append(f"inputs {shapes}: arena {plan.memory.arena_size / 2**20:.2f} MiB for "
                         f"{plan.activation_bytes / 2**20:.2f} MiB of activations "
                         f"({len(plan.arena_slots)} planned buffers, {len(plan.view_of)} views, "
                         f"{len(plan.resolution.skipped)} shape steps resolved, {len(plan.channel_slices)} "
                         "outputs written straight into their Concat)")
        if kernels:
            for i, s in enumerate(self.program.steps):
                compiled = getattr(s.kernel, "compiled", None)
                if compiled is not None:
                    lines += [f"== kernel of step {i} ({s.kernel.compiled.kernel.name}) ==", compiled.linear_ir]
        return "\n".join(lines)


def bind_constants(graph: Graph, values: Mapping[str, Any]) -> Graph:
    """Turn graph inputs into constants with the given values (checked against the inputs' types)."""
    from .runtime.execution.feeds import check_feeds
    targets = [v for v in graph.inputs if v.name in values]
    unknown = set(values) - {v.name for v in targets}
    if unknown:
        raise ValueError(f"constant_inputs names {sorted(unknown)} are not inputs of the model")
    arrays, _ = check_feeds(targets, values)
    graph = graph.copy()
    for v, data in zip([v for v in graph.inputs if v.name in values], arrays):
        v.data = np.array(data)
        v.type = TensorType.of(v.data.dtype, v.data.shape)
    graph.inputs = [v for v in graph.inputs if v.name not in values]
    return graph


def _run_passes(model: Any, passes: list[GraphPass] | None, options: dict):
    """Load the model and run the graph passes: (compiled graph, history, options). The source graph is
    dropped afterwards (its text stays in the history), so folded-away weights are freed."""
    source = load_graph(model)
    constant_inputs = options.get("constant_inputs")
    if isinstance(constant_inputs, Mapping):   # values given now: they are compile-time constants
        source = bind_constants(source, constant_inputs)
        options = {**options, "constant_inputs": ()}
    graph = source.copy()
    history = [PassRecord("source", 0.0, str(graph))]
    for p in (passes if passes is not None else default_pipeline(options)):
        t0 = time.perf_counter()
        graph = p.run(graph, options) or graph
        history.append(PassRecord(p.name, time.perf_counter() - t0, str(graph)))
    return graph, history, options


def compile(model: Any, *, passes: list[GraphPass] | None = None, num_threads: int | None = None,
            streams: int | None = None, hint: str | None = None, **options) -> CompiledModel:
    """Compile a model (path, bytes, onnx.ModelProto or snipjit Graph) for this CPU.

    Execution (`snipjit.runtime.execution.settings`): `num_threads` — threads in all (default: the
    smallest of the CPU affinity, the cgroup CPU quota, OMP_NUM_THREADS and SNIPJIT_NUM_THREADS);
    `streams` — inferences run at once by `start_async`, each request on `num_threads // streams`
    threads of its own; `hint` — "latency" (one stream) or "throughput" (a stream per thread).

    Options (keywords): `implementations` — a set of step kinds allowed (e.g. {"reference"});
    `constant_inputs` — inputs that are constant: a dict of values (folded at compile time) or names
    (folded on the first run, then cached; `refold=True` accepts new values); `fold=False`, `fuse=False`
    turn off constant folding and fusion; `target` — "llvm" (default, or SNIPJIT_JIT). Debugging:
    `dump_dir` (IR after every Snippets pass, kernel source and assembly), `checked=True` (every
    generated load/store verified against its buffer), `data_flow_passes` / `control_flow_passes`
    (lists of `snipjit.snippets.pass_manager.PositionedPass` inserted into the Snippets pipelines).
    `compile_workers` — at most this many processes compile kernels at once (default: the usable cores,
    else SNIPJIT_COMPILE_WORKERS; 0 or 1: serially, see `snipjit.runtime.planning.compile_workers`).
    """
    settings = ExecutionSettings.from_options(num_threads, streams, hint)
    key = model_cache.model_key(model, options) if passes is None else None
    cached = model_cache.load(key) if key else None
    if cached is not None:
        graph, history, options = cached["graph"], cached["history"], cached["options"]
    else:
        graph, history, options = _run_passes(model, passes, options)
        if key:
            model_cache.store(key, {"graph": graph, "history": history, "options": options})
    return _build(graph, history, options, settings)


def _build(graph: Graph, history: list[PassRecord], options: dict, settings: ExecutionSettings,
           packed: dict[str, HeldWeight] | None = None) -> CompiledModel:
    """The program of a graph the passes have run on; its kernels take the `packed` forms offered for
    their constants instead of packing them."""
    compile_workers.precompile(graph.nodes, options)   # kernels in parallel, into the cache the build reads
    with offering(packed or {}):
        program = Program.build(graph, options, choose=control_flow.choose)
    compile_workers.precompile_native([step.kernel for step in program.steps], options)   # (the first run's)
    if all(v.type.is_static for v in graph.inputs):
        program.plan_for([v.type for v in graph.inputs])   # static shapes: resolve and plan now
    return CompiledModel(graph, program, history, options, settings)


class ArtifactWarning(UserWarning):
    """A saved model's kernels were built for another CPU or snipjit: they are compiled again here."""


def load(source: str | os.PathLike | bytes, *, num_threads: int | None = None, streams: int | None = None,
         hint: str | None = None) -> CompiledModel:
    """A model `CompiledModel.save` wrote (a path) or `pickle` made (its bytes). On a CPU with the same
    name and features, under the same snipjit, its kernels' machine code is used as saved (no code is
    generated); otherwise they are compiled again from its graph, with an `ArtifactWarning`. The
    execution settings are the saved ones unless given here. Raises `ArtifactError` for a file that is
    not a saved model or is damaged; like any pickle, load only files you trust."""
    artifact = Artifact.load(source)
    given = {"num_threads": num_threads, "streams": streams, "hint": hint}
    settings = ExecutionSettings.from_options(**{k: artifact.execution.get(k) if v is None else v
                                                 for k, v in given.items()})
    differences = artifact.machine.differences(Machine.here())
    if not differences:
        kernel_cache.offer(artifact.kernels)
        graph = artifact.graph_to_build(packed=True)
        cm = _build(graph, artifact.history, artifact.options, settings, artifact.held)
        if _takes_packed(cm.program, artifact.held):
            return cm
        differences = ["its kernels did not all take the weights packed for them"]
    warnings.warn(f"{'; '.join(differences)}: compiling its kernels again from the saved graph",
                  ArtifactWarning, stacklevel=2)
    return _build(artifact.graph_to_build(packed=False), artifact.history, artifact.options, settings)


def _takes_packed(program: Program, offered: dict[str, HeldWeight]) -> bool:
    """Whether every constant offered packed is held in exactly that form by every step reading it (else a
    kernel would read a placeholder, or one packed from it: the program is not used)."""
    try:
        held = program.held_weights()
    except RuntimeError:   # a placeholder some step reads, or none holds
        return False
    return all(name in held and all(f.packed is form.packed for f in held[name]) for name, form in offered.items())


def _from_bytes(data: bytes) -> CompiledModel:
    return load(data)


__all__ = ["compile", "load", "CompiledModel", "ArtifactError", "ArtifactWarning", "load_graph"]
