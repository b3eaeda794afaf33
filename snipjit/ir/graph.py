"""The Graph IR: a DAG of `Node`s over `Value`s (logical tensors).

A `Graph` has explicit inputs and outputs; constants are `Value`s that carry `data`. Nodes are kept in a
topological order (`Graph.toposort` restores it after edits). A node that holds another graph (the body of
a fused `Subgraph`) keeps it in its attributes.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

from .dtypes import DType, dtype as to_dtype
from .shape import Shape, is_static, make_shape, shape_str


class GraphError(ValueError):
    """The graph is malformed; the message names the node and value at fault."""


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: Shape

    @staticmethod
    def of(dt, shape) -> "TensorType":
        return TensorType(to_dtype(dt), make_shape(shape))

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return is_static(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}{shape_str(self.shape)}"


def held_placeholder(data: np.ndarray) -> np.ndarray:
    """A read-only stand-in for a constant whose bytes were released because every kernel reading it
    keeps its own form (packed weights): same dtype and shape, no memory, NaN (or the dtype's largest
    value) everywhere, so a reader that should not exist gets loud results, not plausible ones."""
    fill = np.nan if np.issubdtype(data.dtype, np.floating) else np.iinfo(data.dtype).max
    return np.broadcast_to(np.array(fill, dtype=data.dtype), data.shape)


def is_held_placeholder(data: np.ndarray) -> bool:
    return data.size > 1 and not data.flags.writeable and not any(data.strides)


class Value:
    """A logical tensor: produced by one node (or a graph input, or a constant with `data`)."""

    __slots__ = ("name", "type", "producer", "data")

    def __init__(self, name: str, type: TensorType | None = None, producer: "Node | None" = None,
                 data: np.ndarray | None = None):
        self.name = name
        self.type = type
        self.producer = producer
        self.data = data

    def __getstate__(self):
        # the producer link is restored by Graph.__setstate__: following it while pickling would recurse
        # once per node of a long chain
        return (self.name, self.type, self.data)

    def __setstate__(self, state) -> None:
        self.name, self.type, self.data = state
        self.producer = None

    @staticmethod
    def constant(name: str, data) -> "Value":
        arr = np.asarray(data)
        return Value(name, TensorType(to_dtype(arr.dtype), tuple(arr.shape)), None, arr)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> Shape:
        return self.type.shape

    def __repr__(self) -> str:
        return f"Value({self.name}: {self.type})"


@dataclass(eq=False)
class Node:
    op: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    domain: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # pass annotations, e.g. "skipped_by_plugin"

    def __post_init__(self):
        for out in self.outputs:
            out.producer = self

    def label(self) -> str:
        """How errors name this node: op type and node name."""
        return f"{self.op} node '{self.name}'" if self.name else f"{self.op} node producing " + \
            ", ".join(f"'{o.name}'" for o in self.outputs)

    def __repr__(self) -> str:
        ins = ", ".join("_" if v is None else v.name for v in self.inputs)
        outs = ", ".join(v.name for v in self.outputs)
        return f"Node([{outs}] = {self.op}({ins}))"


class Graph:
    def __init__(self, inputs: Iterable[Value] = (), outputs: Iterable[Value] = (),
                 nodes: Iterable[Node] = (), name: str = "main"):
        self.inputs: list[Value] = list(inputs)
        self.outputs: list[Value] = list(outputs)
        self.nodes: list[Node] = list(nodes)
        self.name = name
        self.meta: dict[str, Any] = {}  # pass annotations, e.g. the input layouts canonicalization recorded

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for n in self.nodes:
            for o in n.outputs:
                o.producer = n

    # ---- queries ---------------------------------------------------------------------------------
    def values(self) -> Iterator[Value]:
        """Every value once: inputs, constants and node outputs."""
        seen: set[int] = set()
        for v in itertools.chain(self.inputs, (i for n in self.nodes for i in n.inputs if i is not None),
                                 (o for n in self.nodes for o in n.outputs), self.outputs):
            if id(v) not in seen:
                seen.add(id(v))
                yield v

    @property
    def constants(self) -> list[Value]:
        return [v for v in self.values() if v.is_constant]

    def consumers(self) -> dict[Value, list[tuple[Node, int]]]:
        uses: dict[Value, list[tuple[Node, int]]] = {}
        for n in self.nodes:
            for i, v in enumerate(n.inputs):
                if v is not None:
                    uses.setdefault(v, []).append((n, i))
        return uses

    def fresh_name(self, prefix: str) -> str:
        taken = {v.name for v in self.values()}
        for k in itertools.count():
            name = f"{prefix}{k}" if k or prefix[-1:].isdigit() or not prefix else prefix
            if name not in taken:
                return name
        raise AssertionError  # pragma: no cover

    # ---- edits -----------------------------------------------------------------------------------
    def replace_uses(self, old: Value, new: Value) -> None:
        """Make every consumer (and graph output) of `old` read `new` instead."""
        for n in self.nodes:
            n.inputs = [new if v is old else v for v in n.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def remove_dead_nodes(self) -> int:
        """Drop nodes none of whose outputs is used; returns how many were dropped."""
        live = {id(v) for v in self.outputs}
        kept = []
        for n in reversed(self.nodes):
            if any(id(o) in live for o in n.outputs):
                kept.append(n)
                live.update(id(v) for v in n.inputs if v is not None)
        removed = len(self.nodes) - len(kept)
        self.nodes = kept[::-1]
        return removed

    def toposort(self) -> None:
        """Order nodes so that each comes after the producers of its inputs (stable otherwise)."""
        produced_by = {id(o): n for n in self.nodes for o in n.outputs}
        state: dict[int, int] = {}  # 1 = on the stack, 2 = done
        order: list[Node] = []
        for root in self.nodes:
            if state.get(id(root)) == 2:
                continue
            stack = [(root, iter(root.inputs))]
            state[id(root)] = 1
            while stack:
                node, it = stack[-1]
                for v in it:
                    dep = produced_by.get(id(v)) if v is not None else None
                    if dep is None or state.get(id(dep)) == 2:
                        continue
                    if state.get(id(dep)) == 1:
                        cycle = [s[0] for s in stack[[s[0] for s in stack].index(dep):]]
                        raise GraphError("the graph has a cycle through " +
                                         " -> ".join(c.label() for c in cycle + [dep]))
                    state[id(dep)] = 1
                    stack.append((dep, iter(dep.inputs)))
                    break
                else:
                    stack.pop()
                    state[id(node)] = 2
                    order.append(node)
        self.nodes = order

    def copy(self) -> "Graph":
        """A structural copy: new Values and Nodes, constant arrays and attributes shared."""
        vmap: dict[int, Value] = {}

        def cp(v: Value | None) -> Value | None:
            if v is None:
                return None
            if id(v) not in vmap:
                vmap[id(v)] = Value(v.name, v.type, None, v.data)
            return vmap[id(v)]

        inputs = [cp(v) for v in self.inputs]
        nodes = [Node(n.op, [cp(v) for v in n.inputs], [cp(v) for v in n.outputs],
                      {k: (a.copy() if isinstance(a, Graph) else a) for k, a in n.attrs.items()},
                      n.name, n.domain, dict(n.meta)) for n in self.nodes]
        g = Graph(inputs, [cp(v) for v in self.outputs], nodes, self.name)
        g.meta = dict(self.meta)
        return g

    # ---- checks ----------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise GraphError for dangling values, duplicate names, cycles, misordered nodes or missing
        types. Type/shape agreement with the ops is checked by `snipjit.ops.infer_shapes`."""
        names: dict[str, Value] = {}

        def define(v: Value, where: str) -> None:
            other = names.get(v.name)
            if other is not None and other is not v:
                raise GraphError(f"value name '{v.name}' is defined twice ({where})")
            names[v.name] = v

        for v in self.inputs:
            if v.producer is not None or v.is_constant:
                raise GraphError(f"graph input '{v.name}' must not have a producer or data")
            define(v, "graph input")
        produced = {id(o) for n in self.nodes for o in n.outputs}
        defined = {id(v) for v in self.inputs}
        self._check_acyclic()
        for n in self.nodes:
            for i, v in enumerate(n.inputs):
                if v is None:
                    continue
                if v.is_constant:
                    define(v, "constant")
                    defined.add(id(v))
                if id(v) not in defined:
                    why = ("is produced by a later node" if id(v) in produced else
                           "is not produced by any node, not a graph input and not a constant")
                    raise GraphError(f"{n.label()}: input {i} '{v.name}' {why}")
            for o in n.outputs:
                if o.producer is not n:
                    raise GraphError(f"{n.label()}: output '{o.name}' records another producer")
                if id(o) in defined:
                    raise GraphError(f"{n.label()}: output '{o.name}' is already defined")
                define(o, n.label())
                defined.add(id(o))
        for v in self.outputs:
            if v.is_constant:
                define(v, "constant")
                defined.add(id(v))
            if id(v) not in defined:
                raise GraphError(f"graph output '{v.name}' is not produced by the graph")
        for v in self.values():
            if v.type is None:
                raise GraphError(f"value '{v.name}' has no type (run shape inference)")

    def _check_acyclic(self) -> None:
        """Raise on a cycle (naming its nodes); leaves the node order as it is."""
        saved = self.nodes
        try:
            self.toposort()
        finally:
            self.nodes = saved

    def __str__(self) -> str:
        return print_graph(self)

    def __repr__(self) -> str:
        return f"Graph({self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs)"


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
# ---- the text form's printer (its parser is ir/text.py) -----------------------------------------
def _name(name: str) -> str:
    return name if _IDENT.match(name) and name != "_" else '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _scalar(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        f = float(x)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        r = repr(f)
        return r if ("." in r or "e" in r) else r + ".0"
    if isinstance(x, (str, bytes)):
        s = x.decode("utf-8", "replace") if isinstance(x, bytes) else x
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    raise TypeError(f"cannot print {type(x).__name__} {x!r}")


def _array(arr: np.ndarray, max_elems: int | None) -> str:
    if is_held_placeholder(arr):
        return "<held by its kernels>"
    if max_elems is not None and arr.size > max_elems:
        return "<elided>"
    if arr.ndim == 0:
        return _scalar(arr.item())
    return "[" + ", ".join(_scalar(x) for x in arr.reshape(-1).tolist()) + "]"


def _attr(a: Any, indent: str, max_elems: int | None) -> str:
    if isinstance(a, Graph):
        return print_graph(a, indent, max_elems).lstrip()
    if isinstance(a, np.ndarray):
        ty = TensorType.of(a.dtype, a.shape)
        return f"tensor<{ty}>{_array(a, max_elems)}"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_attr(x, indent, max_elems) for x in a) + "]"
    return _scalar(a)


def _typed(v: Value) -> str:
    return f"{_name(v.name)}: {v.type}" if v.type is not None else _name(v.name)


def print_graph(g: Graph, indent: str = "", max_elems: int | None = 16) -> str:
    inner = indent + "  "
    lines = [f"{indent}graph {_name(g.name)}(" + ", ".join(_typed(v) for v in g.inputs) + ") -> [" +
             ", ".join(_typed(v) for v in g.outputs) + "] {"]
    printed: set[int] = {id(v) for v in g.inputs}
    for c in g.constants:
        lines.append(f"{inner}const {_typed(c)} = {_array(c.data, max_elems)}")
        printed.add(id(c))
    for n in g.nodes:
        outs = ", ".join(_typed(o) for o in n.outputs)
        ins = ", ".join("_" if v is None else _name(v.name) for v in n.inputs)
        op = n.op if not n.domain else f"{_name(n.domain)}::{n.op}"
        line = f"{inner}[{outs}] = {op}({ins})"
        if n.attrs:
            line += " {" + ", ".join(f"{_name(k)}={_attr(a, inner, max_elems)}" for k, a in n.attrs.items()) + "}"
        if n.name:
            line += f" @{_name(n.name)}"
        lines.append(line)
    lines.append(indent + "}")
    return "\n".join(lines)


# ---- parser --------------------------------------------------------------------------------------
