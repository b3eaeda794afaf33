"""ONNX frontend: read an ONNX model into a snipjit `Graph`.

    graph = snipjit.frontend.onnx.load("model.onnx")

Initializers and `Constant` nodes become constant Values; graph inputs that are also initializers (old
models list them as inputs) are constants too. Declared types (graph inputs, outputs, value_info) become
`TensorType`s: a `dim_param` is a named dynamic dim, a missing dim is None, a missing shape is None.
Nodes from older opsets are rewritten into the registry's (latest-opset) form by the rules in
`onnx_opsets`. Every value gets a type by shape inference, node by node, so that errors name the node.

An op that is not in the registry but whose ONNX schema defines it as a function (Swish, RMSNormalization,
NegativeLogLikelihoodLoss, Attention, ...) is replaced by the nodes of its function body, instantiated for
the node (see `onnx_functions`): composite ops need no kernel of their own. Body nodes are imported like
any other (opset rules, nested expansion); an error inside a body names the original node and the body
node's op. ONNX Runtime's `com.microsoft` ops that `onnx_contrib` knows (MultiHeadAttention) become
standard ops the same way.

Anything the frontend cannot take (an op not in the registry, an unknown domain, a subgraph attribute, a
malformed model) raises `FrontendError` naming the node: index, name, op type, domain and opset.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx
import onnx.inliner
from onnx import numpy_helper

from ..ir.dtypes import dtype as to_dtype
from ..ir.graph import Graph, GraphError, Node, TensorType, Value
from ..ir.shape import ShapeError, merge_shapes
from ..ops import OpError, get_op, has_op, infer_node
from ..ops.infer_shapes import infer_shapes
from . import onnx_contrib as contrib
from .onnx_control_flow import CONTROL_FLOW, import_control_flow
from .onnx_functions import ExpansionError, expand
from .onnx_opsets import OnnxNode, upgrade

__all__ = ["FrontendError", "load"]

DEFAULT_DOMAIN = ""
MAX_EXPANSION_DEPTH = 8  # function bodies using functions: SoftmaxCrossEntropyLoss -> NLLLoss is 2


class FrontendError(ValueError):
    """The model cannot be imported; the message says where and why."""


def load(model: str | os.PathLike | bytes | onnx.ModelProto, *, name: str | None = None,
         base_dir: str | None = None) -> Graph:
    """Import an ONNX model given as a path, serialized bytes or a ModelProto. External tensor data is
    read relative to the model's directory (or `base_dir`, which a ModelProto or bytes need for it)."""
    proto, base = _read_model(model, base_dir)
    if proto.functions:
        try:
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as e:  # the C++ inliner raises assorted types on a malformed model
            raise FrontendError(f"cannot inline the model's local functions: {e}") from None
    return _Importer(proto, base).graph(name)


def _read_model(model: Any, base_dir: str | None) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        return model, base_dir or ""
    if isinstance(model, (bytes, bytearray, memoryview)):
        what, data, base = "the given bytes", bytes(model), base_dir or ""
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        with open(path, "rb") as f:
            data = f.read()
        what, base = f"'{path}'", base_dir or os.path.dirname(os.path.abspath(path))
    else:
        raise TypeError(f"expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError, or a RuntimeWarning-ish ValueError
        raise FrontendError(f"{what} is not a valid ONNX model: {e}") from None
    if not proto.HasField("graph"):
        raise FrontendError(f"{what} is not a valid ONNX model: it has no graph")
    return proto, base


@dataclass(frozen=True)
class _Site:
    """Where an imported node came from, for error messages: a node of the model and, inside its
    function body, the ops of the (nested) body nodes leading to the one at hand."""
    index: int
    name: str
    op: str
    domain: str
    opset: int | None
    via: tuple[str, ...] = ()

    def __str__(self) -> str:
        named = f" '{self.name}'" if self.name else ""
        opset = "not imported" if self.opset is None else str(self.opset)
        inside = f", in its function body at {' > '.join(self.via)}" if self.via else ""
        return f"node #{self.index}{named} ({self.op}, domain '{self.domain or 'ai.onnx'}', opset {opset}){inside}"


def _canonical_domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


class _Importer:
    def __init__(self, proto: onnx.ModelProto, base_dir: str, parent: "_Importer | None" = None,
                 graph: onnx.GraphProto | None = None, input_types: list[TensorType | None] | None = None):
        self.proto = proto
        self.g = proto.graph if graph is None else graph
        self.base_dir = base_dir
        self.parent = parent                       # the importer of the graph around a body
        self.input_types = input_types or []       # a body's formal input types, from its node
        self.captured: list[str] = []              # names a body reads from around it, in order
        self.opsets = {_canonical_domain(o.domain): o.version for o in proto.opset_import}
        if not self.opsets:  # IR version < 3: no imports meant opset 1
            self.opsets = {DEFAULT_DOMAIN: 1}
        self.values: dict[str, Value] = {}
        self.declared: dict[str, TensorType] = {}
        self.nodes: list[Node] = []
        self.taken = {n for node in self.g.node for n in [*node.input, *node.output]}
        self.taken |= {v.name for v in [*self.g.input, *self.g.output, *self.g.value_info]}
        self.taken |= {t.name for t in self.g.initializer}

    # ---- the whole graph -----------------------------------------------------------------------------
    def graph(self, name: str | None) -> Graph:
        for t in self.g.initializer:
            self._define(Value.constant(t.name, self._tensor(t, f"initializer '{t.name}'")))
        for sp in self.g.sparse_initializer:
            nm = sp.values.name
            self._define(Value.constant(nm, self._sparse(sp, f"sparse initializer '{nm}'")))
        inputs = []
        for k, vi in enumerate(self.g.input):
            if vi.name in self.values:  # an initializer listed as an input: a constant
                continue
            given = self.input_types[k] if k < len(self.input_types) else None
            t = self._value_type(vi, f"graph input '{vi.name}'", required=given is None) or given
            inputs.append(self._define(Value(vi.name, t)))
        for vi in [*self.g.value_info, *self.g.output]:
            t = self._value_type(vi, f"value '{vi.name}'", required=False)
            if t is not None:
                self.declared[vi.name] = t
        for index, node in enumerate(self.g.node):
            self._import_node(index, node)
        outputs = []
        for vi in self.g.output:
            if vi.name not in self.values:
                raise FrontendError(f"graph output '{vi.name}' is not produced by any node, "
                                    "not a graph input and not an initializer")
            outputs.append(self.values[vi.name])
        inputs += [self.values[n] for n in self.captured]
        graph = Graph(inputs, outputs, self.nodes, name or self.g.name or "main")
        try:
            return infer_shapes(graph)
        except (OpError, GraphError, ShapeError) as e:
            raise FrontendError(f"the imported graph is inconsistent: {e}") from None

    def _define(self, v: Value) -> Value:
        if v.name in self.values:
            raise FrontendError(f"value name '{v.name}' is defined twice")
        self.values[v.name] = v
        return v

    # ---- one node --------------------------------------------------------------------------------------
    def _import_node(self, index: int, proto: onnx.NodeProto) -> None:
        site = _Site(index, proto.name, proto.op_type, proto.domain, self.opsets.get(_canonical_domain(proto.domain)))
        self._import(proto, site, self.opsets)

    def _import(self, proto: onnx.NodeProto, site: _Site, opsets: dict[str, int]) -> None:
        """Import a node of the model, or of a function body (`site` then names the model's node, and
        `opsets` are the function's)."""
        domain = _canonical_domain(proto.domain)
        opset = opsets.get(domain)
        if opset is None:
            importer = "the function body" if site.via else "the model"
            raise FrontendError(f"{site}: unknown domain '{proto.domain or 'ai.onnx'}' ({importer} imports no "
                                "opset for it)")
        if not has_op(proto.op_type, domain) and self._expand(proto, site, opset, opsets):
            return
        bodies = domain == DEFAULT_DOMAIN and proto.op_type in CONTROL_FLOW
        attrs = {a.name: self._attribute(a, site) for a in proto.attribute
                 if not (bodies and a.type == onnx.AttributeProto.GRAPH)}
        if domain == DEFAULT_DOMAIN and proto.op_type == "Constant":
            if len(proto.output) != 1 or proto.input:
                raise FrontendError(f"{site}: a Constant has no inputs and one output")
            self._check_new(proto.output[0], site)
            self._define(Value.constant(proto.output[0], self._constant_data(attrs, site)))
            return
        inputs = [self._lookup(n, i, site) if n else None for i, n in enumerate(proto.input)]
        if bodies:
            inputs, attrs = import_control_flow(self, proto, site, opset, inputs, attrs)
        node = OnnxNode(proto.op_type, inputs, list(proto.output), attrs, proto.name, domain)
        builder = _Builder(self, site, opset)
        if domain == DEFAULT_DOMAIN:
            node = upgrade(node, opset, builder)
        elif domain == contrib.DOMAIN:
            node = contrib.decompose(node, builder)
        if node is not None:
            builder.add(node)

    def _expand(self, proto: onnx.NodeProto, site: _Site, opset: int, opsets: dict[str, int]) -> bool:
        """Import the function body of an op the registry lacks; False when its schema has none."""
        types = [self._lookup(n, i, site).type if n else None for i, n in enumerate(proto.input)]
        try:
            expansion = expand(proto, opset, types, self.fresh_name)
        except ExpansionError as e:
            raise FrontendError(f"{site}: {e}") from None
        if expansion is None:
            return False
        if len(site.via) >= MAX_EXPANSION_DEPTH:
            raise FrontendError(f"{site}: function bodies nested more than {MAX_EXPANSION_DEPTH} deep")
        body_opsets = {**opsets, **expansion.opsets}
        for node in expansion.nodes:
            self._import(node, replace(site, via=site.via + (node.op_type,)), body_opsets)
        return True

    def child(self, graph: onnx.GraphProto, input_types: list[TensorType | None]) -> "_Importer":
        """The importer of a body of a node of this graph."""
        child = _Importer(self.proto, self.base_dir, self, graph, input_types)
        child.opsets = self.opsets
        return child

    def lookup_outer(self, name: str, site: _Site) -> Value:
        """The value `name` in this graph, captured from around it when this graph is a body."""
        found = self.values.get(name)
        if found is not None:
            return found
        if self.parent is None:
            raise FrontendError(f"{site}: a body reads '{name}', which no graph around it defines")
        outer = self.parent.lookup_outer(name, site)
        if outer.is_constant:   # a constant of the graph around: the body's own (its kernels may pack it)
            return self._define(Value.constant(name, outer.data))
        self.captured.append(name)
        # its dtype only: the node's inference gives the body the shapes (an If's branch may not fit the
        # shapes of a run that takes the other one, and is not inferred with them)
        return self._define(Value(name, TensorType(outer.type.dtype, None)))

    def error(self, site: _Site, msg: str) -> FrontendError:
        return FrontendError(f"{site}: {msg}")

    def _lookup(self, name: str, i: int, site: _Site) -> Value:
        if name not in self.values and self.parent is not None and not any(name in n.output for n in self.g.node):
            return self.lookup_outer(name, site)
        try:
            return self.values[name]
        except KeyError:
            later = any(name in n.output for n in self.g.node[site.index + 1:])
            why = ("is produced by a later node (the nodes are not in topological order)" if later else
                   "is not produced by any earlier node, not a graph input and not an initializer")
            raise FrontendError(f"{site}: input {i} '{name}' {why}") from None

    def _check_new(self, name: str, site: _Site) -> None:
        if name in self.values:
            raise FrontendError(f"{site}: output '{name}' is already defined")

    def _output(self, name: str, site: _Site) -> Value:
        self._check_new(name, site)
        return self._define(Value(name, self.declared.get(name)))

    def fresh_name(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.taken or name in self.values:
            k += 1
            name = f"{hint}_{k}"
        self.taken.add(name)
        return name

    def add_node(self, op: str, inputs: list[Value | None], output_names: list[str],
                 attrs: dict[str, Any], name: str, domain: str, site: _Site) -> list[Value]:
        """Check, create, type and append one node in registry form."""
        if not has_op(op, domain):
            origin = site.via[-1] if site.via else site.op
            raise FrontendError(f"{site}: unsupported op {op}" + (f" (imported as {origin})" if op != origin else ""))
        min_outputs = get_op(op, domain).outputs[0]
        while len(output_names) > min_outputs and not output_names[-1]:  # trailing omitted optional outputs
            output_names = output_names[:-1]
        outputs = [self._output(n, site) if n else
                   self._define(Value(self.fresh_name(f"{name or op}_unused{i}"))) for i, n in enumerate(output_names)]
        node = Node(op, list(inputs), outputs, attrs, name, domain)
        self.nodes.append(node)
        try:
            types = infer_node(node)
        except (OpError, ShapeError, GraphError) as e:
            msg = str(e).removeprefix(node.label() + ": ")  # the site names the node better
            raise FrontendError(f"{site}: {msg}") from None
        for out, t in zip(outputs, types):
            out.type = _merge(out, t, site)
        return outputs

    # ---- attributes and tensors -----------------------------------------------------------------------
    def _attribute(self, a: onnx.AttributeProto, site: _Site) -> Any:
        A = onnx.AttributeProto
        if a.ref_attr_name:
            raise FrontendError(f"{site}: attribute '{a.name}' refers to a function attribute")
        where = f"attribute '{a.name}' of {site}"
        try:
            if a.type == A.FLOAT:
                return float(a.f)
            if a.type == A.INT:
                return int(a.i)
            if a.type == A.STRING:
                return a.s.decode("utf-8")
            if a.type == A.TENSOR:
                return self._tensor(a.t, where)
            if a.type == A.SPARSE_TENSOR:
                return self._sparse(a.sparse_tensor, where)
            if a.type == A.FLOATS:
                return [float(x) for x in a.floats]
            if a.type == A.INTS:
                return [int(x) for x in a.ints]
            if a.type == A.STRINGS:
                return [s.decode("utf-8") for s in a.strings]
            if a.type == A.TENSORS:
                return [self._tensor(t, where) for t in a.tensors]
            if a.type == A.SPARSE_TENSORS:
                return [self._sparse(t, where) for t in a.sparse_tensors]
        except UnicodeDecodeError:
            raise FrontendError(f"{site}: attribute '{a.name}' is not valid UTF-8 text") from None
        if a.type in (A.GRAPH, A.GRAPHS):
            raise FrontendError(f"{site}: attribute '{a.name}' is a subgraph; only If, Loop and Scan take one")
        kind = A.AttributeType.Name(a.type) if a.type in A.AttributeType.values() else str(a.type)
        raise FrontendError(f"{site}: attribute '{a.name}' has unsupported type {kind}")

    def _tensor(self, t: onnx.TensorProto, where: str) -> np.ndarray:
        try:
            arr = numpy_helper.to_array(t, base_dir=self.base_dir)
        except Exception as e:  # bad sizes, missing external file, unknown data type, ...
            raise FrontendError(f"{where}: cannot read tensor '{t.name}': {e}") from None
        self._check_dtype(arr, where)
        return arr

    def _sparse(self, sp: onnx.SparseTensorProto, where: str) -> np.ndarray:
        values = self._tensor(sp.values, where)
        indices = self._tensor(sp.indices, where).astype(np.int64)
        dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
        try:
            if indices.ndim == 1:  # linear indices into the flattened tensor
                dense.reshape(-1)[indices] = values
            else:
                dense[tuple(indices.T)] = values
        except (IndexError, ValueError) as e:
            raise FrontendError(f"{where}: malformed sparse tensor: {e}") from None
        return dense

    @staticmethod
    def _check_dtype(arr: np.ndarray, where: str) -> None:
        try:
            to_dtype(arr.dtype)
        except TypeError:
            raise FrontendError(f"{where}: element type {arr.dtype} is not supported") from None

    def _constant_data(self, attrs: dict[str, Any], site: _Site) -> np.ndarray:
        if len(attrs) != 1:
            raise FrontendError(f"{site}: a Constant needs exactly one value attribute, got {sorted(attrs)}")
        (key, v), = attrs.items()
        forms = {"value": lambda: v, "sparse_value": lambda: v,
                 "value_float": lambda: np.array(v, np.float32), "value_floats": lambda: np.array(v, np.float32),
                 "value_int": lambda: np.array(v, np.int64), "value_ints": lambda: np.array(v, np.int64),
                 "value_string": lambda: np.array(v, object), "value_strings": lambda: np.array(v, object)}
        if key not in forms:
            raise FrontendError(f"{site}: unknown Constant attribute '{key}'")
        return forms[key]()

    def _value_type(self, vi: onnx.ValueInfoProto, where: str, required: bool) -> TensorType | None:
        """The declared tensor type; None (or an error if `required`) when absent or not a tensor."""
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type" or vi.type.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            if not required:
                return None
            what = "has no type" if kind in (None, "tensor_type") else \
                f"has type {kind}; only tensors are supported (no sequences, maps, optionals or sparse tensors)"
            raise FrontendError(f"{where} {what}")
        tt = vi.type.tensor_type
        try:
            dt = to_dtype(int(tt.elem_type))
        except TypeError:
            name = onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type in \
                onnx.TensorProto.DataType.values() else str(tt.elem_type)
            if not required:
                return None
            raise FrontendError(f"{where} has element type {name}, which is not supported") from None
        if not tt.HasField("shape"):
            return TensorType(dt, None)
        return TensorType(dt, tuple(_dim(d) for d in tt.shape.dim))


def _dim(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    """A declared dim: its size, its dim_param name, or None (unset, or a negative size some exporters
    write for "dynamic")."""
    which = d.WhichOneof("value")
    if which == "dim_value":
        return d.dim_value if d.dim_value >= 0 else None
    return (d.dim_param or None) if which == "dim_param" else None


def _merge(out: Value, inferred: TensorType, site: _Site) -> TensorType:
    """The inferred type of an output, refined by its declared type (named dims, known sizes)."""
    declared = out.type
    if declared is None:
        return inferred
    if declared.dtype != inferred.dtype:
        raise FrontendError(f"{site}: output '{out.name}' is declared {declared.dtype} but the op gives "
                            f"{inferred.dtype}")
    try:
        return TensorType(inferred.dtype, merge_shapes(declared.shape, inferred.shape))
    except ShapeError as e:
        raise FrontendError(f"{site}: output '{out.name}' is declared {declared} but the op gives "
                            f"{inferred}: {e}") from None


class _Builder:
    """What opset rules may do while one ONNX node is imported (see `onnx_opsets.Builder`)."""

    def __init__(self, importer: _Importer, site: _Site, opset: int):
        self.importer = importer
        self.site = site
        self.opset = opset
        self.count = 0

    def const(self, hint: str, array: np.ndarray) -> Value:
        return self.importer._define(Value.constant(self.importer.fresh_name(hint), array))

    def emit(self, op: str, inputs: list[Value | None], attrs: dict[str, Any] | None = None,
             outputs: list[str] | None = None, n_outputs: int = 1) -> list[Value]:
        base = self.site.name or self.site.op
        self.count += 1
        names = outputs if outputs is not None else \
            [self.importer.fresh_name(f"{base}/{op.lower()}{self.count}") for _ in range(n_outputs)]
        name = f"{self.site.name}/{op.lower()}{self.count}" if self.site.name else ""
        return self.importer.add_node(op, inputs, names, dict(attrs or {}), name, DEFAULT_DOMAIN, self.site)

    def add(self, node: OnnxNode) -> list[Value]:
        return self.importer.add_node(node.op, node.inputs, node.outputs, node.attrs, node.name, node.domain,
                                      self.site)

    def fail(self, msg: str) -> FrontendError:
        return FrontendError(f"{self.site}: {msg}")
