"""Split out runtime constants: the transform step of the constant tensors folding seed.

Inputs the user declares constant (option `constant_inputs`: weights fed at run time, the same on every
run) are only known on the first run. The part of the graph that depends only on constants
(ConstantAnalysis' constant subgraph: typically weight transposes, casts, scalings, folded BatchNorm
weights) then moves into a *folding function*; the rest becomes the *entry function*:

    fold(constant inputs it reads) -> [folded tensors]
    entry(the other inputs, constant inputs it reads directly, folded tensors) -> the graph's outputs

Declared constant inputs that the entry function does not read are not among its inputs (the runtime
feeds them to `fold` only, or ignores them when nothing reads them any more).

The runtime runs `fold` once on the first run, caches its outputs and passes them to `entry` on every
run. Values keep their names across the cut: each output of `fold` is the entry input of the same name.
The seed's "simplified version" is used: any compile-time constant node still in the graph (when
`fold_constants` did not run first) goes into the folding function too. `Shape`/`Size` nodes fixed by a
static input type become constants of the folding function, since their inputs are not available there.
Large broadcasts stay in the entry function (see ConstantAnalysis).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.graph import Graph, Node, Value
from ..ir.shape import numel
from .constant_analysis import (DEFAULT_MAX_FOLDED_BROADCAST_BYTES, ConstantAnalysis, constant_input_names,
                                max_folded_broadcast_bytes, value_from_type)
from .fold_constants import make_constant

RUNTIME_FOLDING_META = "runtime_folding"


@dataclass
class RuntimeFolding:
    """What `split_runtime_constants_pass` leaves in `entry.meta["runtime_folding"]`."""
    fold: Graph                    # inputs: constant inputs it reads; outputs: the folded tensors
    constant_inputs: tuple[str, ...]   # every input declared constant, in graph order

    @property
    def folded(self) -> list[str]:
        return [v.name for v in self.fold.outputs]

    @property
    def folded_bytes(self) -> int | None:
        """Bytes of the cached folded tensors, when their types are static."""
        sizes = [numel(v.shape) for v in self.fold.outputs]
        if any(n is None for n in sizes):
            return None
        return sum(n * v.dtype.itemsize for n, v in zip(sizes, self.fold.outputs))


def split_runtime_constants(graph: Graph, constant_inputs: set[str], *,
                            broadcast_limit: int = DEFAULT_MAX_FOLDED_BROADCAST_BYTES) -> tuple[Graph | None, Graph]:
    """Split `graph` (consumed: the entry function reuses its nodes) into (fold, entry); fold is None when
    the graph has no constant subgraph left."""
    names = constant_input_names(graph, {"constant_inputs": constant_inputs})
    graph.remove_dead_nodes()
    analysis = ConstantAnalysis(graph, names, broadcast_limit)
    fold_nodes: list[Node] = []
    for node in analysis.nodes:
        fixed = value_from_type(node)
        if fixed is not None:
            make_constant(node.outputs[0], fixed, node)
        else:
            fold_nodes.append(node)
    inside = {id(n) for n in analysis.nodes}
    entry_nodes = [n for n in graph.nodes if id(n) not in inside]
    boundary = [v for v in analysis.boundary() if v.producer is not None]
    if not boundary:
        graph.nodes = entry_nodes
        graph.inputs = _entry_inputs(graph.inputs, names, entry_nodes, graph.outputs)
        return None, graph

    read_by_fold = {v for n in fold_nodes for v in n.inputs if v is not None}
    fold_inputs = [v for v in graph.inputs if v in read_by_fold]
    fold = Graph(fold_inputs, boundary, fold_nodes, name=f"{graph.name}_fold")

    # The entry function gets its own Values for the tensors it receives from the folding function.
    received = {v: Value(v.name, v.type) for v in boundary}
    for node in entry_nodes:
        node.inputs = [received.get(v, v) for v in node.inputs]
    outputs = [received.get(v, v) for v in graph.outputs]
    inputs = _entry_inputs(graph.inputs, names, entry_nodes, outputs) + [received[v] for v in boundary]
    entry = Graph(inputs, outputs, entry_nodes, graph.name)
    entry.meta = dict(graph.meta)
    return fold, entry


def _entry_inputs(inputs: list[Value], constant: frozenset[str], nodes: list[Node],
                  outputs: list[Value]) -> list[Value]:
    """The graph inputs the entry function keeps: every non-constant one (the caller's signature), and the
    constant ones it reads itself."""
    read = {v for n in nodes for v in n.inputs if v is not None} | set(outputs)
    return [v for v in inputs if v.name not in constant or v in read]


def split_runtime_constants_pass(graph: Graph, options: dict | None = None) -> Graph:
    """The pipeline form: returns the entry function, with a `RuntimeFolding` (holding the folding
    function) in `entry.meta["runtime_folding"]` when there is something to fold at run time."""
    names = constant_input_names(graph, options)
    if not names:
        return graph
    fold, entry = split_runtime_constants(graph, set(names), broadcast_limit=max_folded_broadcast_bytes(options))
    if fold is not None:
        entry.meta[RUNTIME_FOLDING_META] = RuntimeFolding(fold, tuple(v.name for v in graph.inputs if v.name in names))
    return entry


__all__ = ["split_runtime_constants", "split_runtime_constants_pass", "RuntimeFolding", "RUNTIME_FOLDING_META"]
