"""`torch.compile(model, backend="snipjit")`: a TorchDynamo backend that runs the graphs dynamo captures on snipjit.

Dynamo hands a backend each FX graph it captures from the user's Python, with example inputs. This backend
turns the graph into an ONNX model and compiles that with `snipjit.compile`: the model's parameters and
buffers become constants of the model (snipjit folds and packs them), and the sizes dynamo made symbolic
become named dynamic axes, so a new batch size or sequence length runs on the same compiled model. The
callable returned converts torch tensors to NumPy arrays and back (no copy for contiguous CPU tensors).
Compiled graphs are cached by a hash of the graph, its symbolic input shapes and the content of its
constants: a graph dynamo captures again (a recompilation, a second instance with the same weights) costs
no new export or compilation.

What snipjit cannot take runs eagerly (the graph's own `forward`), the reason logged once on the
"snipjit.torch" logger: graphs autograd must see (grad mode on and tensors requiring grad), training-mode
batch norm or dropout, in-place writes to graph inputs or model tensors, dtypes NumPy or snipjit lack
(complex, bfloat16), tensors off the CPU, integer arguments dynamo made symbolic, Python reads of tensor
values, and any failure of the export or of `snipjit.compile`.

The export uses torch's TorchScript-based ONNX exporter (`dynamo=False`): on torch 2.13 it traces a tiny
BERT's dynamo graph in about 0.1 s from inside the backend call, whereas the torch.export-based exporter
takes seconds, fails when called while dynamo's compilation is still running, and derives shape guards that
conflict with the ranges dynamo recorded. Baked-in tensors are checked on every call (the same tensor at
the same version counter; for 0-d tensors, which dynamo makes afresh from module float attributes, the same
value): a graph whose weights changed is exported again, and runs eagerly after `MAX_REBUILDS` changes.

Pass `dynamic=True` (or `torch._dynamo.mark_dynamic(x, 0)`) so that dynamo's first graph already has
symbolic sizes; by default dynamo traces static shapes first and a dynamic graph on the first new shape
(two compilations). Dynamo specializes sizes 0 and 1, so a batch of 1 is a graph of its own.

    compiled = torch.compile(model, backend="snipjit", dynamic=True)
    with torch.inference_mode():
        y = compiled(x)
    torch_dynamo.compile_counts()   # compilations, reuses, fallbacks and their reasons
"""
from __future__ import annotations

import hashlib
import inspect
import io
import logging
import operator
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .. import compiler
from ..compiler import CompiledModel

if TYPE_CHECKING:
    import torch
    from torch import fx

__all__ = ["snipjit_backend", "CompileCounts", "compile_counts", "compiled_models", "reset", "Unsupported",
           "SnipjitGraph"]

log = logging.getLogger("snipjit.torch")

OPSET = 17
MAX_REBUILDS = 3      # weight changes a graph is exported again for before it runs eagerly for good
MAX_CACHED = 64       # compiled graphs kept, oldest dropped first

# Sources dynamo gives the model's own tensors; a graph input reached through one is baked in.
_STATE_SOURCES = ("._parameters[", "._buffers[", "._modules[")
_VIEW_OPS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "transpose", "t", "permute", "expand", "expand_as", "narrow",
    "select", "squeeze", "unsqueeze", "flatten", "unflatten", "getitem", "split", "chunk", "unbind", "movedim",
    "swapaxes", "diagonal", "as_strided", "detach", "contiguous", "real", "imag",
})
_VALUE_READS = frozenset({"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__"})
_NUMPY_DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


@dataclass
class CompileCounts:
    """What the backend did since the last `reset()`."""
    compilations: int = 0         # graphs exported to ONNX and compiled by snipjit
    reuses: int = 0               # graphs handed over again (same code, symbolic shapes, weights): cache hits
    rebuilds: int = 0             # compiled graphs exported again because their baked-in tensors changed
    fallbacks: dict[str, int] = field(default_factory=dict)   # reason -> graphs running eagerly for it
    export_seconds: float = 0.0   # in torch.onnx.export, summed
    compile_seconds: float = 0.0  # in snipjit.compile, summed


class Unsupported(Exception):
    """A graph snipjit does not take; the message is the reason logged."""


_lock = threading.RLock()
_counts = CompileCounts()
_cache: dict[str, CompiledModel] = {}
_logged: set[str] = set()


def compile_counts() -> CompileCounts:
    """A snapshot of the counts: e.g. `compilations` stays 1 while a graph runs new batch sizes."""
    with _lock:
        return replace(_counts, fallbacks=dict(_counts.fallbacks))


def compiled_models() -> list[CompiledModel]:
    """The snipjit models in the cache, oldest first (`cm.explain()` shows what snipjit made of a graph)."""
    with _lock:
        return list(_cache.values())


def reset() -> None:
    """Forget compiled graphs, counts and the reasons already logged. Dynamo keeps its own compiled frames
    (with the callables this backend returned) until `torch._dynamo.reset()`."""
    global _counts
    with _lock:
        _counts = CompileCounts()
        _cache.clear()
        _logged.clear()


def snipjit_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *, options: dict | None = None,
                    **ignored: Any) -> Callable[..., Any]:
    """The dynamo backend: a callable running `gm` on snipjit, or `gm.forward` when snipjit cannot take it.
    `options` (torch.compile's `options=`) are passed to `snipjit.compile`; `mode` and the like are ignored."""
    options = dict(options or {})
    try:
        export = _prepare(gm, example_inputs, options)
        binding = Binding.of(export, _compiled(export, options))
    except Exception as e:  # noqa: BLE001 - anything snipjit cannot take runs eagerly
        return _eager(gm, _reason(e))
    return SnipjitGraph(gm, binding, options)


@dataclass(frozen=True)
class Guard:
    """A baked-in tensor must be the same on every call: the same tensor at the same version, or for a
    0-d tensor the same value."""
    position: int                           # in dynamo's arguments
    ref: Callable[[], Any] | None           # weak reference to the tensor; None: compare `value`
    version: int = 0
    value: Any = None

    @classmethod
    def of(cls, position: int, tensor: torch.Tensor) -> Guard:
        if tensor.dim() == 0:
            return cls(position, None, value=tensor.item())
        return cls(position, weakref.ref(tensor), _version(tensor))

    def holds(self, arg: Any) -> bool:
        if self.ref is None:
            return arg.item() == self.value
        return self.ref() is arg and _version(arg) == self.version


@dataclass
class Export:
    """A dynamo graph made ready for the ONNX exporter, and how to call the model it becomes."""
    module: fx.GraphModule                  # inputs: the fed tensors; constants: buffers; sizes read from inputs
    examples: tuple                         # the fed tensors' example values
    positions: list[int]                    # the dynamo argument of each fed tensor
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    results: list[tuple[str, int]]          # per graph result: ("model", k), ("arg", i) or ("none", 0)
    container: str                          # "tuple", "list" or "single": how the graph returns results
    dtypes: list[Any]                       # torch dtype of each model output
    guards: list[Guard]
    key: str


@dataclass(frozen=True)
class Binding:
    """How a call maps onto a compiled model: what it feeds, what it checks, how it builds the results."""
    model: CompiledModel
    feeds: list[tuple[str, int]]            # ONNX input name, dynamo argument
    guards: list[Guard]
    casts: list[Any]                        # per model output: the torch dtype to cast to, or None
    results: list[tuple[str, int]]
    container: str

    @classmethod
    def of(cls, export: Export, model: CompiledModel) -> Binding:
        names = set(model.input_names)   # the exporter drops inputs the graph does not read
        feeds = [(name, i) for name, i in zip(export.input_names, export.positions) if name in names]
        casts = [want if want is not None and v.type.dtype.np != _numpy_dtype(want) else None
                 for v, want in zip(model.graph.outputs, export.dtypes)]
        return cls(model, feeds, export.guards, casts, export.results, export.container)


class SnipjitGraph:
    """What dynamo calls in place of the graph: torch tensors in, snipjit's run, torch tensors out."""

    def __init__(self, gm: fx.GraphModule, binding: Binding, options: dict):
        self.gm, self.binding, self.options, self.rebuilds = gm, binding, options, 0
        self.eager: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if self.eager is not None:
            return self.eager(*args)
        b = self.binding
        if not all(g.holds(args[g.position]) for g in b.guards):
            self._rebuild(args)
            if self.eager is not None:
                return self.eager(*args)
            b = self.binding
        from_numpy = _torch().from_numpy
        outs = b.model.run({name: _numpy(args[i]) for name, i in b.feeds})
        tensors = [from_numpy(a) if c is None else from_numpy(a).to(c) for a, c in zip(outs, b.casts)]
        results = [tensors[k] if kind == "model" else args[k] if kind == "arg" else None for kind, k in b.results]
        return results[0] if b.container == "single" else results if b.container == "list" else tuple(results)

    def _rebuild(self, args: Sequence[Any]) -> None:
        with self._lock:
            if all(g.holds(args[g.position]) for g in self.binding.guards):
                return   # another thread rebuilt it
            self.rebuilds += 1
            if self.rebuilds > MAX_REBUILDS:
                self.eager = _eager(self.gm, f"baked-in tensors changed more than {MAX_REBUILDS} times")
                return
            try:
                export = _prepare(self.gm, args, self.options)
                self.binding = Binding.of(export, _compiled(export, self.options, rebuild=True))
            except Exception as e:  # noqa: BLE001
                self.eager = _eager(self.gm, _reason(e))


def _compiled(export: Export, options: dict, rebuild: bool = False) -> CompiledModel:
    """The snipjit model of an export: from the cache, else exported and compiled now."""
    with _lock:
        model = _cache.get(export.key)
        if model is not None:
            _counts.reuses += 1
            return model
    start = time.perf_counter()
    onnx_bytes = _onnx(export)
    exported = time.perf_counter()
    try:
        model = compiler.compile(onnx_bytes, **options)
    except Exception as e:
        raise Unsupported(f"snipjit cannot compile the graph ({_short(e)})") from e
    if model.output_names != export.output_names:
        raise Unsupported(f"the exported model has outputs {model.output_names}, not {export.output_names}")
    with _lock:
        _counts.export_seconds += exported - start
        _counts.compile_seconds += time.perf_counter() - exported
        _counts.compilations += 1
        _counts.rebuilds += rebuild
        _cache[export.key] = model
        while len(_cache) > MAX_CACHED:
            del _cache[next(iter(_cache))]
    return model


def _onnx(export: Export) -> bytes:
    """The ONNX model of the graph, by the TorchScript-based exporter (see the module docstring)."""
    import torch
    kwargs = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            torch.onnx.export(export.module, export.examples, buffer, input_names=export.input_names,
                              output_names=export.output_names, dynamic_axes=export.dynamic_axes,
                              opset_version=OPSET, **kwargs)
    except Exception as e:
        raise Unsupported(f"ONNX export failed ({_short(e)})") from e
    traced = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    if traced:   # a Python value taken from a tensor in the trace: the model would not follow it
        raise Unsupported(f"the ONNX trace fixed a value that can change ({_short(traced[0].message)})")
    return buffer.getvalue()


def _prepare(gm: fx.GraphModule, args: Sequence[Any], options: dict) -> Export:
    """Check that snipjit can take the graph and build the module to export: tensors fed at run time stay
    inputs, the model's own tensors become buffers, symbolic sizes are read from the inputs they describe."""
    import torch
    from torch import fx

    fed, state, sizes = _sort_inputs(gm, args)
    graph, root, env = fx.Graph(), torch.nn.Module(), {}
    names, dims, spec, sources = [], {}, [], {}   # dims: dynamo's symbol -> ONNX dim name
    dynamic_axes: dict[str, dict[int, str]] = {}
    for node, _, arg in fed:
        name = _input_name(node.name, names)
        names.append(name)
        env[node] = graph.placeholder(name)
        shape = _symbolic_shape(node, arg)
        axes = {axis: dims.setdefault(d, f"{name}_{axis}") for axis, d in enumerate(shape) if not isinstance(d, int)}
        dynamic_axes |= {name: axes} if axes else {}
        for axis in axes:
            sources.setdefault(shape[axis], (env[node], axis))
        spec.append((name, str(arg.dtype), tuple(axes.get(a, d) for a, d in enumerate(shape))))
    for node, arg in sizes:
        expr = _expr(node.meta.get("example_value", node.meta.get("val", arg)))
        if expr is None:
            env[node] = int(arg)
        elif expr in sources:
            env[node] = graph.call_method("size", sources[expr])
        else:
            raise Unsupported("a symbolic integer that is not an input's size (an int argument dynamo made dynamic)")
    constants, guards = {}, []
    for node, position, arg in state:
        constants[node] = arg.detach()
        root.register_buffer(f"const_{len(guards)}", constants[node])
        env[node] = graph.get_attr(f"const_{len(guards)}")
        guards.append(Guard.of(position, arg))

    exported, positions = [], {node: p for node, p, _ in fed + state}
    container, results = "single", []
    for node in gm.graph.nodes:
        if node.op == "output":
            container, results = _results(node.args[0], positions, exported)
        elif node.op == "call_method" and node.target == "item" and node.args[0] in constants:
            env[node] = constants[node.args[0]].item()
        elif node.op == "call_method" and node.target in _VALUE_READS:
            raise Unsupported(f"reads a tensor value in Python (.{node.target}())")
        elif node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda n: env[n])
            if node.op in ("get_attr", "call_module"):
                env[node].target = _copy_attribute(gm, root, node.target)
    graph.output(tuple(env[n] for n in exported))

    outputs, dtypes = [f"output_{k}" for k in range(len(exported))], []
    for name, node in zip(outputs, exported):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.Tensor):
            _check_tensor(value, fake=True)
            shape = _symbolic_shape(node, value)
            axes = {axis: dims.get(d, f"{name}_{axis}") for axis, d in enumerate(shape) if not isinstance(d, int)}
            dynamic_axes |= {name: axes} if axes else {}
        dtypes.append(getattr(value, "dtype", None))
    module = fx.GraphModule(root, graph).eval()
    return Export(module, tuple(arg for _, _, arg in fed), [p for _, p, _ in fed], names, outputs, dynamic_axes,
                  results, container, dtypes, guards, _key(module, spec, results, container, options))


def _sort_inputs(gm: fx.GraphModule, args: Sequence[Any]) -> tuple[list, list, list]:
    """Dynamo's graph inputs as (node, position, tensor) fed at run time and baked in, and (node, value) sizes;
    raises Unsupported for graphs snipjit does not take."""
    import torch
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        raise Unsupported(f"the graph has {len(placeholders)} inputs but is called with {len(args)}")
    _check_nodes(gm.graph)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise Unsupported("autograd: grad mode is on and tensors require grad "
                          "(run under torch.inference_mode() or torch.no_grad())")
    for t in tensors:
        _check_tensor(t)
    fed, state, sizes = [], [], []
    for position, (node, arg) in enumerate(zip(placeholders, args)):
        if isinstance(arg, torch.SymInt) or (isinstance(arg, int) and not isinstance(arg, bool)):
            sizes.append((node, arg))
        elif not isinstance(arg, torch.Tensor):
            raise Unsupported(f"a graph input of type {type(arg).__name__}")
        else:
            (state if _is_state(node, arg) else fed).append((node, position, arg))
    return fed, state, sizes


def _results(value: Any, positions: dict, exported: list) -> tuple[str, list[tuple[str, int]]]:
    """How the graph returns its results; tensors it computes are appended to `exported` (once each)."""
    import torch
    from torch import fx
    container = "list" if isinstance(value, list) else "tuple" if isinstance(value, tuple) else "single"
    results = []
    for item in value if container != "single" else [value]:
        meta = item.meta.get("example_value") if isinstance(item, fx.Node) else item
        if item is None:
            results.append(("none", 0))
        elif isinstance(item, fx.Node) and item in positions:
            results.append(("arg", positions[item]))
        elif isinstance(item, fx.Node) and (meta is None or isinstance(meta, torch.Tensor)):
            if item not in exported:
                exported.append(item)
            results.append(("model", exported.index(item)))
        else:
            raise Unsupported(f"the graph returns a {type(meta).__name__}")
    if not exported:
        raise Unsupported("the graph returns no tensor it computes")
    return container, results


def _check_nodes(graph: fx.Graph) -> None:
    """Training-mode ops and in-place writes to graph inputs (also through views) are not for snipjit."""
    from torch.fx.operator_schemas import normalize_function
    calls = []
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        kwargs = dict(node.kwargs)
        if node.op == "call_function":
            try:
                normalized = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
            except Exception:  # noqa: BLE001 - builtins without a signature
                normalized = None
            kwargs = normalized.kwargs if normalized is not None else kwargs
        calls.append((node, _op_name(node), kwargs))
    for node, name, kwargs in calls:
        if kwargs.get("training") is True or kwargs.get("train") is True:
            raise Unsupported(f"training mode ({name})")
    for node, name, kwargs in calls:
        written = _written(node, name, kwargs)
        while written is not None and written.op != "placeholder":
            viewed = written.op in ("call_function", "call_method") and _op_name(written) in _VIEW_OPS
            written = written.args[0] if viewed and written.args else None
        if written is not None:
            raise Unsupported(f"writes in place to a graph input or model tensor ({name})")


def _written(node: fx.Node, name: str, kwargs: dict) -> Any:
    """The node an op writes in place, if any."""
    first = node.args[0] if node.args else kwargs.get("input", kwargs.get("self"))
    if node.target is operator.setitem or kwargs.get("inplace") is True:
        return first
    if name.endswith("_") and not name.startswith("_"):
        return first
    return node.kwargs.get("out")


def _op_name(node: fx.Node) -> str:
    target = node.target
    return (target if isinstance(target, str) else getattr(target, "__name__", str(target))).split(".")[0]


def _is_state(node: fx.Node, arg: Any) -> bool:
    """Whether a tensor input is the model's own (a parameter, buffer, module attribute or global): those
    are baked in, the others fed on every call."""
    import torch
    if isinstance(arg, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "name", "")
    name = name() if callable(name) else str(name)
    return name.startswith(("G[", "L['self']")) or any(part in name for part in _STATE_SOURCES)


def _check_tensor(t: Any, fake: bool = False) -> None:
    import torch
    if not fake and type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise Unsupported(f"tensor subclass {type(t).__name__}")
    if t.device.type != "cpu":
        raise Unsupported(f"tensors on {t.device.type}")
    if t.layout != torch.strided:
        raise Unsupported(f"{str(t.layout).removeprefix('torch.')} tensors")
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in _NUMPY_DTYPES:
        raise Unsupported(f"dtype {dtype}")


def _symbolic_shape(node: fx.Node, tensor: Any) -> tuple:
    """The shape dynamo recorded for the node: ints, and sympy symbols for the dims it made dynamic."""
    value = node.meta.get("example_value", node.meta.get("val", tensor))
    shape = getattr(value, "shape", None)
    if shape is None:
        shape = tensor.shape
    return tuple(int(d) if _expr(d) is None else _expr(d) for d in shape)


def _expr(d: Any) -> Any:
    """The sympy expression of a symbolic int, None for a number."""
    expr = getattr(getattr(d, "node", None), "expr", None)
    return None if expr is None or expr.is_number else expr


def _input_name(node_name: str, taken: list[str]) -> str:
    """A readable ONNX input name from dynamo's placeholder name (`l_kwargs_input_ids_` -> `input_ids`)."""
    name = node_name
    for prefix in ("l_", "L_", "kwargs_", "args_"):
        name = name.removeprefix(prefix)
    name = name.strip("_")
    prefix, _, number = name.rpartition("_")
    if not name.isidentifier() or name in taken or (prefix in ("const", "input", "output") and number.isdigit()) \
            or name.startswith("attr_"):
        name = f"input_{len(taken)}"
    return name


def _copy_attribute(gm: fx.GraphModule, root: Any, target: str) -> str:
    """Copy a tensor or submodule the graph reads by name onto the exported module's root."""
    import torch
    owner, _, attr = target.rpartition(".")
    value = getattr(gm.get_submodule(owner) if owner else gm, attr)
    name = "attr_" + target.replace(".", "_")
    if isinstance(value, torch.nn.Module):
        root.add_module(name, value)
    elif isinstance(value, torch.Tensor):
        root.register_buffer(name, value.detach())
    else:
        setattr(root, name, value)
    return name


def _key(module: fx.GraphModule, spec: list, results: list, container: str, options: dict) -> str:
    """The cache key: the exported module's code, the fed inputs' dtypes and symbolic shapes, the results'
    layout, the options, and the content of every tensor the module holds."""
    h = hashlib.sha256()
    for part in (module.code, repr(spec), repr(results), container, repr(sorted(options.items())), str(OPSET)):
        h.update(part.encode())
    for name, tensor in module.state_dict(keep_vars=True).items():
        array = _numpy(tensor)
        h.update(f"{name}:{array.dtype}:{array.shape}".encode())
        h.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def _numpy(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a NumPy array (a copy only when the tensor is not contiguous)."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(str(dtype).removeprefix("torch."))


def _torch() -> Any:
    import torch
    return torch


def _version(t: Any) -> int:
    try:
        return t._version
    except (RuntimeError, AttributeError):   # inference tensors have no version counter
        return -1


def _short(e: Any) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    name = type(e).__name__ if isinstance(e, BaseException) else ""
    return (f"{name}: {first}" if name else first)[:200]


def _reason(e: Exception) -> str:
    return str(e) if isinstance(e, Unsupported) else f"unexpected {_short(e)}"


def _eager(gm: fx.GraphModule, reason: str) -> Callable[..., Any]:
    """Run the graph eagerly, counting the fallback and logging its reason the first time it is seen."""
    with _lock:
        _counts.fallbacks[reason] = _counts.fallbacks.get(reason, 0) + 1
        first = reason not in _logged
        _logged.add(reason)
    if first:
        log.warning("snipjit runs a graph eagerly: %s", reason)
    return gm.forward
