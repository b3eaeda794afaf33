"""ConstantAnalysis: which values of a graph are constant during inference, and which nodes form the
constant subgraph (the analysis step of the constant tensors folding seed).

Constantness starts at

* constants (values with `data`): *compile-time* constants;
* graph inputs the user declares constant (option `constant_inputs`, e.g. weights fed at run time):
  *runtime* constants, known on the first run;
* `Shape` and `Size` of a value whose type fixes the result (static dims): compile-time constants,
  whatever the value itself is;

and flows through every deterministic node whose inputs are all constant: such a node is in the constant
subgraph, runtime if any input is a runtime constant, compile-time otherwise. Two kinds of nodes are
kept out although their inputs are constant:

* nondeterministic ops (random generators, Dropout in training mode): folding would freeze one draw;
* broadcasting ops (`Expand`, `Tile`) whose output is larger than their input and than
  `max_folded_broadcast_bytes`: folding them would store a large tensor that holds no more information
  than the small one. `PostponeBroadcast` moves them after their elementwise consumers instead, so the
  consumers fold on the small tensor. (`ConstantOfShape` always folds: models build their weights with
  it, and a Conv or MatMul needs them whole.)

`FoldConstants` folds the compile-time part; `split_runtime_constants` moves the rest into a folding
function run on the first inference.
"""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from ..ir.graph import Graph, Node, TensorType, Value
from ..ir.shape import numel
from ..ops import get_op, has_op
from ..ops.registry import OpContext
from ..ops.shape_ops import VALUE_FROM_TYPES

DEFAULT_MAX_FOLDED_BROADCAST_BYTES = 64 * 1024
NONDETERMINISTIC_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                  "Multinomial", "Bernoulli"})
BROADCAST_OPS = frozenset({"Expand", "Tile"})


class Kind(enum.Enum):
    COMPILE_TIME = "compile_time"
    RUNTIME = "runtime"


def constant_input_names(graph: Graph, options: dict | None) -> frozenset[str]:
    """The graph inputs option `constant_inputs` declares constant; unknown names raise ValueError."""
    names = frozenset((options or {}).get("constant_inputs") or ())
    unknown = names - {v.name for v in graph.inputs}
    if unknown:
        raise ValueError(f"constant_inputs names {sorted(unknown)} that are not inputs of graph "
                         f"'{graph.name}'; its inputs are {[v.name for v in graph.inputs]}")
    return names


def max_folded_broadcast_bytes(options: dict | None) -> int:
    return int((options or {}).get("max_folded_broadcast_bytes", DEFAULT_MAX_FOLDED_BROADCAST_BYTES))


def value_from_type(node: Node) -> np.ndarray | None:
    """The output of a `Shape` or `Size` node when its input's type fixes it, else None."""
    from_types = VALUE_FROM_TYPES.get(node.op) if not node.domain else None
    if from_types is None or node.inputs[0] is None or node.inputs[0].type is None:
        return None
    return from_types(get_op(node.op).context(node, with_values=False))


def shape_positions(node: Node) -> list[int] | None:
    """For a `Shape` node whose input has a known rank: the input axes it reports, in order."""
    t = node.inputs[0].type if node.op == "Shape" and not node.domain else None
    if t is None or t.shape is None:
        return None
    opdef = get_op("Shape")
    # Shape of a tensor whose dims are 0, 1, 2, ... reports the axes themselves.
    ctx = OpContext(node, opdef.resolve_attrs(node), [TensorType(t.dtype, tuple(range(len(t.shape))))])
    return [int(a) for a in VALUE_FROM_TYPES["Shape"](ctx)]


def is_deterministic(node: Node) -> bool:
    if node.domain == "" and node.op in NONDETERMINISTIC_OPS:
        return False
    if node.domain == "" and node.op == "Dropout" and len(node.inputs) > 2 and node.inputs[2] is not None:
        mode = node.inputs[2].data
        return mode is not None and not np.any(mode)
    return True


def nbytes(t: TensorType | None) -> int | None:
    n = numel(t.shape) if t is not None else None
    return None if n is None else n * t.dtype.itemsize


def is_large_broadcast(node: Node, limit: int) -> bool:
    """An Expand/Tile whose (static) output is bigger than its input and than `limit` bytes."""
    if node.domain or node.op not in BROADCAST_OPS:
        return False
    out, data = nbytes(node.outputs[0].type), nbytes(node.inputs[0].type)
    return out is not None and out > limit and (data is None or out > data)


def classify(node: Node, kind_of: Callable[[Value], Kind | None], broadcast_limit: int) -> Kind | None:
    """The constant kind of `node`'s outputs given the kinds of values (`kind_of`), or None."""
    if not has_op(node.op, node.domain) or not is_deterministic(node):
        return None
    if value_from_type(node) is not None:
        return Kind.COMPILE_TIME
    kinds = [kind_of(v) for v in node.inputs if v is not None]
    if any(k is None for k in kinds) or is_large_broadcast(node, broadcast_limit):
        return None
    return Kind.RUNTIME if Kind.RUNTIME in kinds else Kind.COMPILE_TIME


@dataclass
class ConstantAnalysis:
    """The constant values and the constant subgraph of `graph` (see the module docstring)."""
    graph: Graph
    constant_inputs: Iterable[str] = ()
    broadcast_limit: int = DEFAULT_MAX_FOLDED_BROADCAST_BYTES
    kinds: dict[Value, Kind] = field(init=False, default_factory=dict)
    nodes: list[Node] = field(init=False, default_factory=list)   # the constant subgraph, in order

    @staticmethod
    def of(graph: Graph, options: dict | None) -> "ConstantAnalysis":
        """The analysis with `constant_inputs` and `max_folded_broadcast_bytes` taken from options."""
        return ConstantAnalysis(graph, constant_input_names(graph, options), max_folded_broadcast_bytes(options))

    def __post_init__(self) -> None:
        self.constant_inputs = frozenset(self.constant_inputs)
        self.graph.toposort()
        for v in self.graph.inputs:
            if v.name in self.constant_inputs:
                self.kinds[v] = Kind.RUNTIME
        for node in self.graph.nodes:
            kind = classify(node, self.kind, self.broadcast_limit)
            if kind is not None:
                self.nodes.append(node)
                self.kinds.update((o, kind) for o in node.outputs)

    def kind(self, v: Value | None) -> Kind | None:
        if v is None:
            return None
        return Kind.COMPILE_TIME if v.is_constant else self.kinds.get(v)

    def is_constant(self, v: Value | None) -> bool:
        return self.kind(v) is not None

    def nodes_of(self, kind: Kind) -> list[Node]:
        return [n for n in self.nodes if self.kinds[n.outputs[0]] is kind]

    def boundary(self) -> list[Value]:
        """Outputs of the constant subgraph read by the rest of the graph or returned by it: the tensors
        folding must produce, in the order they are first needed."""
        inside = {id(n) for n in self.nodes}
        produced = {o for n in self.nodes for o in n.outputs}
        out: dict[Value, None] = {}
        for n in self.graph.nodes:
            if id(n) not in inside:
                out.update((v, None) for v in n.inputs if v in produced)
        out.update((v, None) for v in self.graph.outputs if v in produced)
        return list(out)


class FreshNames:
    """Unused value names for a graph, handed out without rescanning it each time."""

    def __init__(self, graph: Graph):
        self.taken = {v.name for v in graph.values()}

    def __call__(self, prefix: str) -> str:
        for k in itertools.count():
            name = f"{prefix}_{k}" if k else prefix
            if name not in self.taken:
                self.taken.add(name)
                return name
        raise AssertionError  # pragma: no cover


__all__ = ["ConstantAnalysis", "Kind", "classify", "value_from_type", "shape_positions", "is_deterministic",
           "is_large_broadcast", "constant_input_names", "max_folded_broadcast_bytes", "FreshNames",
           "DEFAULT_MAX_FOLDED_BROADCAST_BYTES"]
