"""SimplifyShapes: remove shape computations of dynamic-shape models where their result is known.

Exporters compute shapes at run time (`Shape -> Gather -> Unsqueeze -> Concat -> Reshape`) even when most
of the dims are static, or when the computed shape is just "the same dims as the input". The pass
tracks, for each small integer vector computed from `Shape`, what each element is: a known int, or
"dim `a` of value `v`" (`DimOf`). It follows `Shape`, and `Gather`, `Slice`, `Squeeze`, `Unsqueeze`,
`Concat`, `Reshape`, `Identity` and `Cast` to i32/i64 with constant index inputs (by running each op's
reference kernel on the element positions, so the ops mean exactly what the registry says). The outputs
of a Split have the dims of its input off the split axis (GPT-2 reshapes V to heads with the dims of K,
both from one Split: so V's Reshape gets a constant target, and the Split no longer feeds a Shape). Then:

* a vector whose elements are all known ints becomes a constant (`Shape` of a partially static value,
  where only static dims are gathered);
* `Reshape(x, target)` gets a constant target when each element is known: an int stays; "dim k of x"
  (or of any value whose dim has the same name, as named dims are equal at run time) at position k
  becomes 0 (copy, only with allowzero=0); a single element left unknown becomes -1 when all the
  others are positive ints (with a copied dim that may be 0 at run time, -1 would be ambiguous);
* `Expand(x, s)` where `s` is x's own shape (each element is 1 or equal to x's dim) is dropped.

Anything not provably equal is left as it is. Output types are re-inferred as the pass goes, so a
simplified Reshape gives its consumers better shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

import numpy as np

from ..ir.dtypes import i32, i64
from ..ir.graph import Graph, Node, Value
from ..ops import get_op
from .constant_analysis import FreshNames, shape_positions
from .fold_constants import make_constant, refine_types

# op -> the inputs that carry the tracked vector; the other inputs must be constants
TRACKED_OPS: dict[str, tuple[int, ...] | None] = {
    "Gather": (0,), "Slice": (0,), "Squeeze": (0,), "Unsqueeze": (0,), "Reshape": (0,), "Identity": (0,),
    "Cast": (0,), "Concat": None,  # None: every input
}
MAX_TRACKED = 64  # elements: shape vectors are short


@dataclass(frozen=True)
class DimOf:
    """Element: dimension `axis` of `value` (not static when it was tracked)."""
    value: Value
    axis: int


def dim_key(v: Value, axis: int) -> Hashable:
    """What dim `axis` of `v` is known to equal: its size, its name, the same dim of the input of the Split
    giving `v` (off the split axis), or only itself."""
    d = v.shape[axis]
    if d is not None:
        return d
    split = v.producer
    if split is not None and split.op == "Split" and not split.domain:
        x = split.inputs[0]
        rank = len(v.shape)
        if x.shape is not None and len(x.shape) == rank and axis != split.attrs.get("axis", 0) % rank:
            return dim_key(x, axis)
    return (id(v), axis)


def entry_key(e) -> Hashable:
    """An element's value when known (an int), else what it is known to equal (see dim_key)."""
    return dim_key(e.value, e.axis) if isinstance(e, DimOf) else int(e)


def _elements(items: list, shape: tuple[int, ...]) -> np.ndarray:
    """An object array of ints and DimOfs (np.array would try to look inside them)."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


class _Tracker:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.entries: dict[Value, np.ndarray] = {}   # value -> object array of ints / DimOf
        self.names = FreshNames(graph)

    def of(self, v: Value | None) -> np.ndarray | None:
        if v is None:
            return None
        if v.is_constant:
            ok = v.data.dtype.kind in "iu" and v.data.size <= MAX_TRACKED
            return _elements([int(i) for i in v.data.reshape(-1)], v.data.shape) if ok else None
        return self.entries.get(v)

    def track(self, node: Node) -> np.ndarray | None:
        """The elements of node's (single) output, when it is a tracked vector."""
        if node.domain or len(node.outputs) != 1:
            return None
        if node.op == "Shape":
            axes = shape_positions(node)
            x = node.inputs[0]
            if axes is None:
                return None
            return _elements([x.shape[a] if isinstance(x.shape[a], int) else DimOf(x, a) for a in axes], (len(axes),))
        if node.op not in TRACKED_OPS:
            return None
        if node.op == "Cast" and not (node.outputs[0].dtype in (i32, i64) and node.inputs[0].dtype.is_int):
            return None
        carried = TRACKED_OPS[node.op] or range(len(node.inputs))
        if any(self.of(node.inputs[i]) is None for i in carried) or \
                not all(v is None or v.is_constant or i in carried for i, v in enumerate(node.inputs)):
            return None
        return self._moved(node, list(carried))

    def _moved(self, node: Node, carried: list[int]) -> np.ndarray | None:
        """Run the op on the positions of the carried elements, then look the elements up."""
        table, inputs, start = [], [v.data if v is not None else None for v in node.inputs], 0
        for i in carried:
            e = self.of(node.inputs[i])
            table.extend(e.reshape(-1).tolist())
            inputs[i] = np.arange(start, start + e.size, dtype=np.int64).reshape(e.shape)
            start += e.size
        opdef = get_op(node.op)
        positions = opdef.run(opdef.context(node, with_values=False), inputs)[0]
        if positions.ndim > 1 or positions.size > MAX_TRACKED:
            return None
        return _elements([table[int(p)] for p in positions.reshape(-1)], positions.shape)


def reshape_target(node: Node, entries: np.ndarray) -> np.ndarray | None:
    """A constant target for `Reshape(x, target)` with the given elements, when one is provable."""
    x = node.inputs[0]
    allowzero = bool(node.attrs.get("allowzero", 0))
    if x.shape is None or entries.ndim != 1:
        return None
    target: list[int | None] = []
    for k, e in enumerate(entries.tolist()):
        key = entry_key(e)
        if isinstance(key, int):
            target.append(key)
        elif not allowzero and k < len(x.shape) and key == dim_key(x, k):
            target.append(0)
        else:
            target.append(None)
    unknown = [k for k, t in enumerate(target) if t is None]
    if len(unknown) == 1 and all(t is None or t > 0 for t in target):
        target[unknown[0]] = -1
    if any(t is None for t in target):
        return None
    return np.array(target, dtype=np.int64)


def is_own_shape(x: Value, entries: np.ndarray) -> bool:
    """Whether broadcasting x to a shape with these elements leaves x as it is."""
    if x.shape is None or entries.ndim != 1 or len(entries) > len(x.shape):
        return False
    offset = len(x.shape) - len(entries)
    return all(entry_key(e) == 1 or entry_key(e) == dim_key(x, offset + j)
               for j, e in enumerate(entries.tolist()))


def simplify_shapes(graph: Graph, options: dict | None = None) -> Graph:
    """Replace known shape vectors by constants, give Reshapes constant targets and drop Expands to the
    input's own shape (see the module docstring)."""
    graph.remove_dead_nodes()
    graph.toposort()
    tracker = _Tracker(graph)
    graph_outputs = set(graph.outputs)
    kept: list[Node] = []
    for node in graph.nodes:
        entries = tracker.track(node)
        if entries is not None:
            out = node.outputs[0]
            known = [entry_key(e) for e in entries.reshape(-1).tolist()]
            if all(isinstance(k, int) for k in known):
                make_constant(out, np.array(known, dtype=out.dtype.np).reshape(entries.shape), node)
                continue
            tracker.entries[out] = entries
        if node.op == "Reshape" and not node.domain and not node.inputs[1].is_constant:
            wanted = tracker.of(node.inputs[1])
            target = None if wanted is None else reshape_target(node, wanted)
            if target is not None:
                node.inputs[1] = Value.constant(tracker.names(f"{node.outputs[0].name}_shape"), target)
        if node.op == "Expand" and not node.domain and node.outputs[0] not in graph_outputs:
            wanted = tracker.of(node.inputs[1])
            if wanted is not None and is_own_shape(node.inputs[0], wanted):
                graph.replace_uses(node.outputs[0], node.inputs[0])
                continue
        refine_types(node)
        kept.append(node)
    graph.nodes = kept
    graph.remove_dead_nodes()
    return graph


__all__ = ["simplify_shapes", "DimOf", "reshape_target", "is_own_shape"]
