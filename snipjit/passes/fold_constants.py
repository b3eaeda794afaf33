"""FoldConstants: evaluate the compile-time constant subgraph once, at compile time.

Every node `ConstantAnalysis` classifies as compile-time constant (all inputs constant, or a `Shape`/
`Size` whose input type fixes the result) is run with its registry reference kernel, and its outputs
become constant Values (same Value, same name: consumers and graph outputs need no rewiring). Nodes and
constants nothing reads any more are dropped. Large broadcasts are left alone (see ConstantAnalysis).

Folding one node can make the types of the nodes after it more precise (a Reshape whose target shape
became a constant gets a static output shape), which in turn lets later `Shape` nodes fold. So the pass
sweeps the graph once in topological order and re-infers the output types of each node it keeps; a
whole PyTorch-exported shape computation (`Shape -> Gather -> Unsqueeze -> Concat -> Reshape`) of a
static-shape model folds in that one sweep.

The bytes created and freed are recorded in `graph.meta["folding"]`: a `FoldingStats` that every pass
changing constants updates, net since the first one ran (a constant created by one pass and dropped by
a later one counts in neither). Option `max_folded_broadcast_bytes` (default 64 KiB) is the size above
which Expand/Tile results are not stored.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..ir.graph import Graph, GraphError, Node, TensorType, Value
from ..ir.shape import ShapeError, merge_shapes, shape_str
from ..ops import get_op, infer_node
from .constant_analysis import Kind, classify, max_folded_broadcast_bytes, value_from_type

FOLDING_META = "folding"


@dataclass
class FoldingStats:
    """What folding did to a graph's constants, relative to the graph before the first folding pass
    (bytes count distinct buffers: views and shared arrays once)."""
    nodes_folded: int = 0
    constants_created: int = 0
    bytes_created: int = 0      # constants made by folding that the graph still holds
    constants_freed: int = 0
    bytes_freed: int = 0        # constants of the original graph it no longer references
    created: dict[int, int] = field(default_factory=dict, repr=False, compare=False)  # id -> bytes

    def update(self, before: dict[int, np.ndarray], after: dict[int, np.ndarray], nodes_folded: int) -> None:
        self.nodes_folded += nodes_folded
        for key, buf in before.items():
            if key in after:
                continue
            if key in self.created:  # made by an earlier folding pass, dropped now
                self.bytes_created -= self.created.pop(key)
                self.constants_created -= 1
            else:
                self.bytes_freed += buf.nbytes
                self.constants_freed += 1
        for key, buf in after.items():
            if key not in before:
                self.created[key] = buf.nbytes
                self.bytes_created += buf.nbytes
                self.constants_created += 1

    def __str__(self) -> str:
        return (f"{self.nodes_folded} nodes folded; {self.constants_created} constants created "
                f"({self.bytes_created} bytes), {self.constants_freed} freed ({self.bytes_freed} bytes)")


def _buffer(a: np.ndarray) -> np.ndarray:
    """The array owning `a`'s memory (a itself unless a is a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def constant_buffers(graph: Graph) -> dict[int, np.ndarray]:
    """The distinct buffers behind the graph's constants, by id (holding them keeps the ids unique)."""
    return {id(b): b for b in (_buffer(v.data) for v in graph.constants)}


def record_folding(graph: Graph, before: dict[int, np.ndarray], nodes_folded: int) -> FoldingStats:
    """Add what changed since `before` (from `constant_buffers`) to `graph.meta["folding"]`."""
    old = graph.meta.get(FOLDING_META, FoldingStats())
    stats = replace(old, created=dict(old.created))  # graph copies share meta: never update in place
    stats.update(before, constant_buffers(graph), nodes_folded)
    graph.meta[FOLDING_META] = stats
    return stats


def make_constant(value: Value, data: np.ndarray, where: Node) -> None:
    """Turn `value` (an output of `where`) into a constant holding `data`, checking its type."""
    t = value.type
    fits = t is None or t.shape is None or (len(t.shape) == data.ndim and all(
        not isinstance(d, int) or d == n for d, n in zip(t.shape, data.shape)))
    if t is not None and data.dtype != t.dtype.np:
        data = data.astype(t.dtype.np)
    if not fits:
        raise GraphError(f"{where.label()}: folding gave {data.dtype}{shape_str(data.shape)} for "
                         f"'{value.name}' but its type is {t}")
    value.data = data if data.flags.c_contiguous else data.copy(order="C")
    value.type = TensorType.of(data.dtype if t is None else t.dtype, data.shape)
    value.producer = None


def evaluate_node(node: Node) -> list[np.ndarray]:
    """Run a node whose inputs are all constants (or a Shape/Size fixed by its input's type)."""
    fixed = value_from_type(node)
    if fixed is not None:
        return [fixed]
    if node.op == "Identity" and not node.domain:
        return [node.inputs[0].data]  # share the buffer (exporters alias every shared weight this way)
    opdef = get_op(node.op, node.domain)
    return opdef.run(opdef.context(node), [None if v is None else v.data for v in node.inputs])


def refine_types(node: Node) -> None:
    """Re-infer `node`'s output types (its inputs may be better known now), keeping the more precise of
    the old and the new type per dim."""
    for out, t in zip(node.outputs, infer_node(node)):
        if out.type is None:
            out.type = t
            continue
        try:
            out.type = TensorType(out.type.dtype, merge_shapes(out.type.shape, t.shape))
        except ShapeError as e:
            raise GraphError(f"{node.label()}: output '{out.name}' has type {out.type} but the op now "
                             f"gives {t}: {e}") from None


def fold_constants(graph: Graph, options: dict | None = None) -> Graph:
    """Replace every compile-time constant node by the constants it computes (see the module docstring);
    updates `graph.meta["folding"]`."""
    limit = max_folded_broadcast_bytes(options)
    before = constant_buffers(graph)
    graph.remove_dead_nodes()
    graph.toposort()
    kept: list[Node] = []
    folded = 0
    compile_time = lambda v: Kind.COMPILE_TIME if v.is_constant else None  # noqa: E731
    for node in graph.nodes:
        if classify(node, compile_time, limit) is Kind.COMPILE_TIME:
            for out, data in zip(node.outputs, evaluate_node(node)):
                make_constant(out, data, node)
            folded += 1
        else:
            refine_types(node)
            kept.append(node)
    graph.nodes = kept
    graph.remove_dead_nodes()
    record_folding(graph, before, folded)
    return graph


__all__ = ["fold_constants", "FoldingStats", "FOLDING_META", "record_folding", "constant_buffers",
           "make_constant", "evaluate_node", "refine_types"]
