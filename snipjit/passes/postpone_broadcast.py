"""PostponeBroadcast: move broadcasts after the elementwise ops that consume them (seed section 3.5).

A broadcast (`Expand`, or a `Tile` that only repeats size-1 axes) makes a tensor bigger without adding
information; `ConstantAnalysis` does not fold large ones, which would stop folding of everything after
them. For an elementwise op `f` that reads the broadcast,

    f(Expand(x, s), c1, ...)  ==  Expand(f(x, c1, ...), s)

whenever every other input `ci` fits into x's shape (broadcast(x, ci) == x): both sides compute `f`
on the same elements, the right one only once per distinct element. The pass rewrites to the right side
when the other inputs are constant, so `f` folds on the small tensor (or, when x is not constant, runs on
fewer elements) and the broadcast runs last. It repeats along a chain (Expand -> Cast -> Mul(c) becomes
Cast -> Mul(c) -> Expand). It does not fire when

* the broadcast has other readers or is a graph output (it would then run twice),
* the consumer is not elementwise (Softmax, MatMul, a Reshape: they see the shape),
* another input of the consumer is not constant, or is larger than x (then f(x, c) is as large as the
  broadcast result and nothing is gained),
* the consumer reads the broadcast for something other than its elements (CastLike's target type
  input: moving the broadcast would change the result's shape) — checked by inferring the rewritten
  nodes' types, which must equal the original output type,
* any shape involved is not static.

A broadcast that cannot move further but feeds an elementwise op that broadcasts by itself is dropped
when the op gives the same output type reading x directly: `Add(y, Expand(x, s))` -> `Add(y, x)`. In
the same way a constant that is a broadcast of a smaller tensor (all its slices along some axes are
identical, bit for bit: e.g. a folded embedding lookup with all-zero token types) is replaced by that
smaller tensor when all its readers are elementwise ops that broadcast by themselves.

Options: `constant_inputs` (runtime constants count as constant). Run `fold_constants` before (so
constants are folded and shapes static) and after (to fold the moved consumers).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.graph import Graph, Node, TensorType, Value
from ..ir.shape import broadcast_shapes, is_static
from ..ops import OpError, get_op, has_op, infer_node
from .constant_analysis import ConstantAnalysis, FreshNames, is_deterministic
from .fold_constants import constant_buffers, record_folding


@dataclass
class _Broadcast:
    node: Node
    data: Value       # the small tensor
    out: Value        # the broadcast result


def as_broadcast(node: Node) -> _Broadcast | None:
    """`node` as a pure broadcast of its first input, when all shapes are static."""
    if node.domain or node.op not in ("Expand", "Tile") or len(node.outputs) != 1:
        return None
    x, out = node.inputs[0], node.outputs[0]
    if not is_static(x.shape) or not is_static(out.shape):
        return None
    if node.op == "Tile" and any(a != b and a != 1 for a, b in zip(x.shape, out.shape)):
        return None  # repeating a dim larger than 1 is not a broadcast
    return _Broadcast(node, x, out)


def _is_elementwise(node: Node) -> bool:
    return (not node.domain and has_op(node.op) and len(node.outputs) == 1 and is_deterministic(node)
            and get_op(node.op).category.is_elementwise)


def _retyped(op: Node, inputs: list[Value | None], out: Value) -> TensorType | None:
    """The output type `op` would have with these inputs (None when they do not fit)."""
    trial = Node(op.op, inputs, [Value(out.name)], dict(op.attrs), domain=op.domain)
    try:
        return infer_node(trial)[0]
    except (OpError, ValueError):
        return None


class _Postponer:
    def __init__(self, graph: Graph, options: dict | None):
        self.graph = graph
        self.analysis = ConstantAnalysis.of(graph, options)
        self.names = FreshNames(graph)
        self.graph_outputs = set(graph.outputs)

    def static(self, v: Value | None) -> bool:
        return v is None or (v.type is not None and is_static(v.shape))

    def postpone(self, b: _Broadcast, uses: dict) -> _Broadcast | None:
        """Move `b` after its single elementwise reader; returns the moved broadcast, or None."""
        readers = uses.get(b.out, [])
        if b.out in self.graph_outputs or len(readers) != 1:
            return None
        f = readers[0][0]
        if not _is_elementwise(f) or sum(v is b.out for v in f.inputs) != 1:
            return None
        others = [v for v in f.inputs if v is not None and v is not b.out]
        if not all(self.analysis.is_constant(v) and self.static(v) for v in others):
            return None
        if any(broadcast_shapes(b.data.shape, v.shape) != b.data.shape for v in others):
            return None
        result = f.outputs[0]
        small = Value(self.names(f"{result.name}_small"))
        small.type = _retyped(f, [b.data if v is b.out else v for v in f.inputs], small)
        if small.type is None or small.type.dtype != result.dtype or small.shape != b.data.shape:
            return None
        if _retyped(b.node, [small] + b.node.inputs[1:], result) != result.type:
            return None
        new_f = Node(f.op, [b.data if v is b.out else v for v in f.inputs], [small], dict(f.attrs), f.name,
                     f.domain, dict(f.meta))
        moved = Node(b.node.op, [small] + b.node.inputs[1:], [result], dict(b.node.attrs), b.node.name)
        self.graph.nodes = [n for n in self.graph.nodes if n is not f and n is not b.node] + [new_f, moved]
        return _Broadcast(moved, small, result)

    def read_directly(self, readers: list[tuple[Node, int]], small: Value, every: bool) -> bool:
        """Make elementwise `readers` (node, input index) of a broadcast tensor read `small` instead, where
        they give the same output type (they broadcast by themselves). With `every`, rewire either all
        of them or none. Returns whether all were rewired."""
        rewired = []
        for f, i in readers:
            if not _is_elementwise(f) or not all(self.static(v) for v in f.inputs):
                continue
            inputs = [small if k == i else v for k, v in enumerate(f.inputs)]
            if _retyped(f, inputs, f.outputs[0]) == f.outputs[0].type:
                rewired.append((f, i))
        if every and len(rewired) < len(readers):
            return False
        for f, i in rewired:
            f.inputs = [small if k == i else v for k, v in enumerate(f.inputs)]
        return len(rewired) == len(readers)

    def shrink_constants(self) -> None:
        """Store constants that are broadcasts of a smaller tensor (a folded embedding lookup with
        constant indices, a filled mask) small, when all their readers broadcast by themselves."""
        for v, readers in self.graph.consumers().items():
            if not v.is_constant or v in self.graph_outputs or v.data.size < 2:
                continue
            if not all(_is_elementwise(f) for f, _ in readers):
                continue
            small = broadcast_source(v.data)
            if small is not None:
                self.read_directly(readers, Value.constant(self.names(f"{v.name}_small"), small), every=True)

    def run(self) -> Graph:
        before = constant_buffers(self.graph)
        self.graph.toposort()
        work = [b for b in map(as_broadcast, self.graph.nodes) if b is not None]
        while work:
            b = work.pop()
            moved = self.postpone(b, self.graph.consumers())
            if moved is not None:
                work.append(moved)
            else:
                self.read_directly(self.graph.consumers().get(b.out, []), b.data, every=False)
        self.shrink_constants()
        self.graph.toposort()
        self.graph.remove_dead_nodes()
        record_folding(self.graph, before, 0)
        return self.graph


def broadcast_source(a: np.ndarray) -> np.ndarray | None:
    """The smallest array whose broadcast to a's shape equals `a` bit for bit, when smaller than a: a
    keeps size 1 along every axis where all its slices are identical."""
    if a.dtype.itemsize not in (1, 2, 4, 8) or a.dtype.kind in "OSUc":
        return None
    bits = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    same = [ax for ax in range(a.ndim) if a.shape[ax] > 1 and (bits == bits.take([0], axis=ax)).all()]
    if not same:
        return None
    return a[tuple(slice(0, 1) if ax in same else slice(None) for ax in range(a.ndim))].copy()


def postpone_broadcast(graph: Graph, options: dict | None = None) -> Graph:
    """Move broadcasts after their elementwise consumers, drop those their readers make redundant and
    store broadcast-shaped constants small (see the module docstring); updates `graph.meta["folding"]`."""
    return _Postponer(graph, options).run()


__all__ = ["postpone_broadcast", "as_broadcast", "broadcast_source"]
