"""TokenizeMHA: collects each attention block into one `Subgraph` node (pattern "mha"), before the
elementwise tokenizer runs, so that the scores never reach memory (see `targets.llvm.attention`).

The pattern, from the Softmax outwards:

    [Split of a fused QKV projection]
    Q: [Reshape] [Transpose]...   Kᵀ: [Reshape] [Transpose]...   V: [Reshape] [Transpose]...
    S = MatMul(Q, Kᵀ) -> [Mul | Div by a scalar]... -> [Add mask]... [Where(keep, S, fill)] -> Softmax(last axis)
    O = MatMul(S, V) -> [Transpose] [Reshape]

(up to two Adds — T5 adds a position bias, then the padding mask — and the Where before or after them;
the Where may also read Where(keep, fill, S)). A soft cap, Tanh between scalings before the masks
(Gemma 2's Tanh(S · scale / c) · c), is the attention kernel's too (`soft_cap`). Other elementwise ops of
the scores alone, or of the scores and scalar constants, are taken as well: such a block runs as a
Snippets kernel with Brgemms (`runtime.implementations.brgemm_attention`), not the attention kernel. Q, Kᵀ and V are
rank 3 or 4 ([batch,] heads, rows, head size); the masks (f32 to add, bool to keep) broadcast to the
scores, the fill is a scalar constant (a causal mask is a triangular `keep`). The
movement ops that split the heads off a projection and merge them back are absorbed when nothing else
reads their results, and so is a Split giving Q, K and V (GPT-2's): the kernel reads through their
strides instead of copying. Every absorbed value
but the block's result must be used only inside the block. The body keeps the original nodes, so the
block also runs node by node (the reference kernel) wherever the kernel does not take the layouts.

`match_mha` also describes a body again for the implementation (`MHAMatch`). Option `mha=False` turns
the pass off.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.dtypes import boolean, f32
from ..ir.graph import Graph, Node, TensorType, Value
from ..ir.shape import merge_shapes
from ..ops.registry import infer_node
from ..snippets.supported_ops import ELEMENTWISE_OPS
from .tokenize import make_body

PATTERN = "mha"
MAX_VIEW_NODES = 5   # movement ops (and scalings) absorbed in front of an operand or after the result


@dataclass
class MHAMatch:
    """An attention block found in a graph: its nodes in order, and what the kernel needs of them."""
    softmax: Node
    scores: Node                    # MatMul(Q, Kᵀ)
    context: Node                   # MatMul(P, V)
    q: Value                        # where each operand comes from (before its absorbed movement ops)
    k: Value
    v: Value
    q_views: list[Node] = field(default_factory=list)   # the absorbed movement ops, first applied first
    k_views: list[Node] = field(default_factory=list)
    v_views: list[Node] = field(default_factory=list)
    scale: float = 1.0
    mask: Value | None = None       # added to the scores
    mask2: Value | None = None      # added after it
    keep: Value | None = None       # where(keep, scores, fill), or where(keep, fill, scores) when `inverted`
    fill: float = 0.0
    inverted: bool = False
    kept_first: bool = False        # the Where comes before the Add
    between: list[Node] = field(default_factory=list)   # the scale and mask nodes, in order
    out_views: list[Node] = field(default_factory=list)
    split: Node | None = None   # the Split giving q, k and v
    safe: list[Node] = field(default_factory=list)   # rows whose mask is all -inf give zeros (ONNX Attention)
    others: list[Node] = field(default_factory=list)   # elementwise ops on the scores the attention kernel lacks
    operand_scale: float = 1.0   # the part of `scale` from scalings of Q and Kᵀ among their views
    soft_cap: float | None = None   # the scores become soft_cap · tanh(s · scale) before the masks

    @property
    def output(self) -> Value:
        return (self.out_views[-1] if self.out_views else self.context).outputs[0]

    @property
    def nodes(self) -> list[Node]:
        return ([self.split] if self.split else []) + self.q_views + self.k_views + self.v_views + [self.scores] \
            + self.between + [self.softmax] + self.safe + [self.context] + self.out_views

    @property
    def inputs(self) -> list[Value]:
        """The block's inputs, each once: the operands' sources, then the masks."""
        found = [self.split.inputs[0]] if self.split else [self.q, self.k, self.v]
        found += [m for m in (self.mask, self.mask2, self.keep) if m is not None]
        return list(dict.fromkeys(found))


def _scalar(v: Value | None) -> float | None:
    if v is None or not v.is_constant or v.data.size != 1 or not np.issubdtype(v.data.dtype, np.floating):
        return None
    return float(v.data.reshape(()))


def _is_view(node: Node | None) -> bool:
    """A movement op the kernel reads through: Transpose, Identity, or a Reshape, Unsqueeze or Expand to
    constant dimensions."""
    if node is None or node.domain or len(node.outputs) != 1:
        return False
    if node.op in ("Transpose", "Identity"):
        return True
    return (node.op in ("Reshape", "Unsqueeze", "Expand") and len(node.inputs) == 2 and node.inputs[1] is not None
            and node.inputs[1].is_constant)


def _scaling(node: Node | None) -> float | None:
    """The factor of a Mul of an operand by a scalar constant (ONNX Attention scales Q and Kᵀ so)."""
    if node is None or node.domain or node.op != "Mul":
        return None
    return _scalar(node.inputs[1]) if _scalar(node.inputs[0]) is None else _scalar(node.inputs[0])


def _views_before(value: Value, uses: dict, outputs: set) -> tuple[Value, list[Node], float]:
    """Walk back from an operand through movement ops and scalings used only on this path; (source, ops in
    order, the product of the scalings)."""
    views: list[Node] = []
    factor = 1.0
    while len(views) < MAX_VIEW_NODES and _used_once(value, uses, outputs):
        node = value.producer
        scaling = _scaling(node)
        if not _is_view(node) and not scaling:
            break
        factor *= scaling or 1.0
        views.insert(0, node)
        value = next(v for v in node.inputs if v is not None and not v.is_constant) if scaling else node.inputs[0]
    return value, views, factor


def _used_once(value: Value, uses: dict, outputs: set) -> bool:
    return value not in outputs and len(uses.get(value, ())) == 1


def _shared_split(q: Value, k: Value, v: Value, uses: dict, outputs: set) -> Node | None:
    """The Split (into constant sizes) whose three outputs are q, k and v, read nowhere else."""
    split = q.producer
    if split is None or split.op != "Split" or split.domain or k.producer is not split or v.producer is not split:
        return None
    sizes = split.inputs[1] if len(split.inputs) > 1 else None
    if len({q, k, v}) != 3 or set(split.outputs) != {q, k, v} or (sizes is not None and not sizes.is_constant):
        return None
    return split if all(_used_once(o, uses, outputs) for o in split.outputs) else None


def _rank_ok(value: Value) -> bool:
    t = value.type
    return t is not None and t.dtype == f32 and t.shape is not None and len(t.shape) in (3, 4)


def _from_scores(v: Value, depth: int = 0) -> bool:
    """Whether `v` looks like the scores: made by the product, a scale, mask or Where, or an elementwise op
    of such a value and scalar constants."""
    node = v.producer
    if node is None:
        return False
    if node.op in ("MatMul", "Mul", "Div", "Add", "Where"):
        return True
    source = _elementwise_of_scores(node)
    return depth < MAX_VIEW_NODES and source is not None and _from_scores(source, depth + 1)


def _scores_first(add: Node) -> tuple[Value, Value]:
    """(the scores, the mask) of an Add: the scores come from the product or what the block did to it."""
    a, b = add.inputs
    from_scores = [_from_scores(v) for v in (a, b)]
    return (b, a) if from_scores == [False, True] or (
        all(from_scores) and b.producer.op == "MatMul" and a.producer.op != "MatMul") else (a, b)


def _mask_ok(v: Value, dtype) -> bool:
    return v.type is not None and v.type.dtype == dtype and v.type.shape is not None and len(v.type.shape) <= 4


@dataclass
class _Between:
    """What the block does to the scores between the product and the Softmax."""
    nodes: list[Node] = field(default_factory=list)
    scale: float = 1.0
    adds: list[Value] = field(default_factory=list)   # the additive masks, first added first
    keep: Value | None = None
    fill: float = 0.0
    inverted: bool = False
    kept_first: bool = False
    others: list[Node] = field(default_factory=list)   # elementwise ops only a Snippets kernel runs

    def take(self, node: Node) -> Value | None:
        """Take `node` (walking from the Softmax back to the product); the scores value it reads, or None
        when it is not part of the pattern. A scale after the masks would scale them too: refused."""
        scaled = any(n.op in ("Mul", "Div") for n in self.nodes)
        if node.op in ("Mul", "Div"):
            factor, x = _factor(node)
            if factor is None:
                return None
            self.scale *= factor
        elif node.op == "Add" and len(self.adds) < 2 and not scaled and not (self.keep is not None and self.kept_first):
            x, mask = _scores_first(node)
            if not _mask_ok(mask, f32):
                return None
            self.adds.insert(0, mask)
        elif node.op == "Where" and self.keep is None and not scaled:
            self.keep, a, b = node.inputs
            fill = _scalar(b) if _from_scores(a) else _scalar(a)
            if fill is None or not _mask_ok(self.keep, boolean):
                return None
            x, self.fill, self.inverted = (a, fill, False) if _from_scores(a) else (b, fill, True)
            self.kept_first = bool(self.adds)
        else:
            x = _elementwise_of_scores(node)
            if x is None:
                return None
            self.others.insert(0, node)
        self.nodes.insert(0, node)
        return x

    def soft_cap(self) -> tuple[float, float] | None:
        """(the scale before, the cap) when the ops the attention kernel lacks are one Tanh with only scalings
        before it: the scores become cap · tanh(s · scale) (cap: the scalings after it), then the masks."""
        if [n.op for n in self.others] != ["Tanh"]:
            return None
        at = self.nodes.index(self.others[0])
        if any(n.op not in ("Mul", "Div") for n in self.nodes[:at]):
            return None   # (a mask before the Tanh)
        factors = [1.0, 1.0]
        for i, node in enumerate(self.nodes):
            if node.op in ("Mul", "Div"):
                factors[i > at] *= _factor(node)[0]
        return factors[0], factors[1]


def _factor(node: Node) -> tuple[float | None, Value]:
    """(the factor, the other input) of a Mul by a scalar constant or a Div by one (its inverse); factor None
    for other Muls and Divs, and for a zero."""
    constant, x = _scalar(node.inputs[1]), node.inputs[0]
    if constant is None and node.op == "Mul":
        constant, x = _scalar(node.inputs[0]), node.inputs[1]
    if constant is None or constant == 0:
        return None, x
    return (constant if node.op == "Mul" else 1 / constant), x


def _elementwise_of_scores(node: Node) -> Value | None:
    """The scores an elementwise op of one input, or of the scores and a scalar constant, reads (a
    soft cap: Tanh(s / c) * c); None for other nodes. A scale or mask in another order than the
    attention kernel's lands here too."""
    if node.op not in ELEMENTWISE_OPS or len(node.outputs) != 1 or node.outputs[0].type is None \
            or node.outputs[0].type.dtype != f32:
        return None
    variable = [v for v in node.inputs if v is not None and _scalar(v) is None]
    return variable[0] if len(variable) == 1 else None


def _safe_softmax(where: Node, probabilities: Value, mask: Value | None, uses: dict, outputs: set) -> list[Node]:
    """ONNX Attention's zero rows: Where(Equal(ReduceMax(mask, last axis), -inf), 0, P) — the nodes
    (ReduceMax, Equal, Where), or [] when `where` is not that."""
    if mask is None or where.op != "Where" or where.domain or where.inputs[2] is not probabilities \
            or _scalar(where.inputs[1]) != 0.0:
        return []
    equal = where.inputs[0].producer
    if equal is None or equal.op != "Equal" or not _used_once(where.inputs[0], uses, outputs):
        return []
    row_max, minus_inf = equal.inputs if _scalar(equal.inputs[1]) is not None else equal.inputs[::-1]
    reduce = row_max.producer
    if _scalar(minus_inf) != float("-inf") or reduce is None or reduce.op != "ReduceMax" \
            or reduce.inputs[0] is not mask or not _used_once(row_max, uses, outputs):
        return []
    axes = reduce.inputs[1] if len(reduce.inputs) > 1 else None
    axes = axes.data.reshape(-1).tolist() if axes is not None and axes.is_constant else reduce.attrs.get("axes")
    rank = len(mask.type.shape)
    if axes is None or [int(a) % rank for a in axes] != [rank - 1] or not reduce.attrs.get("keepdims", 1):
        return []
    return [reduce, equal, where]


def match_mha(softmax: Node, uses: dict, outputs: set) -> MHAMatch | None:
    """The attention block around `softmax`, or None. `uses`: `Graph.consumers()`; `outputs`: the graph's
    outputs (values the block may not hide)."""
    if softmax.op != "Softmax" or softmax.domain or not _rank_ok(softmax.outputs[0]):
        return None
    axis = softmax.attrs.get("axis", -1)
    if axis not in (-1, len(softmax.outputs[0].shape) - 1):
        return None
    between = _Between()
    x = softmax.inputs[0]
    while True:
        node = x.producer
        if node is None or node.domain or not _used_once(x, uses, outputs):
            return None
        if node.op == "MatMul":
            break
        x = between.take(node)
        if x is None:
            return None
    scores = x.producer
    probabilities = softmax.outputs[0]
    if not _used_once(probabilities, uses, outputs):
        return None
    mask, mask2 = (between.adds + [None, None])[:2]
    # (the kernel zeroes rows of -inf scores: the same rows as the graph only when one additive mask makes them)
    safe = [] if mask2 is not None or between.keep is not None else \
        _safe_softmax(uses[probabilities][0][0], probabilities, mask, uses, outputs)
    if safe:
        probabilities = safe[-1].outputs[0]
        if not _used_once(probabilities, uses, outputs):
            return None
    context, index = uses[probabilities][0]
    if context.op != "MatMul" or context.domain or index != 0:
        return None
    if not all(_rank_ok(v) for v in (scores.inputs[0], scores.inputs[1], context.inputs[1], context.outputs[0])):
        return None
    q, q_views, q_factor = _views_before(scores.inputs[0], uses, outputs)
    k, k_views, k_factor = _views_before(scores.inputs[1], uses, outputs)
    v, v_views, v_factor = _views_before(context.inputs[1], uses, outputs)
    if v_factor != 1.0:
        return None
    if len({id(n) for n in q_views + k_views + v_views}) != len(q_views + k_views + v_views):
        return None   # (an operand reaching another's movement ops: keep them outside)
    out_views: list[Node] = []
    result = context.outputs[0]
    while len(out_views) < MAX_VIEW_NODES and _used_once(result, uses, outputs):
        after = uses[result][0][0]
        if not _is_view(after) or after.op not in ("Transpose", "Reshape", "Identity") or uses[result][0][1] != 0:
            break
        out_views.append(after)
        result = after.outputs[0]
    split = _shared_split(q, k, v, uses, outputs)
    inside = {o for n in q_views + k_views + v_views + ([split] if split else []) for o in n.outputs}
    if any(m in inside for m in between.adds + [between.keep]):
        return None
    scale, others, cap = between.scale, between.others, between.soft_cap()
    if cap is not None:   # (Tanh is the kernel's then: a scale before it, a cap after)
        scale, others, cap = cap[0], [], cap[1]
    return MHAMatch(softmax, scores, context, q, k, v, q_views, k_views, v_views, scale * q_factor * k_factor,
                    mask, mask2, between.keep, between.fill, between.inverted, between.kept_first, between.nodes,
                    out_views, split, safe, others, q_factor * k_factor, cap)


def tokenize_mha(graph: Graph, options: dict | None = None) -> Graph:
    """Replace every attention block by a Subgraph node `mhaK` with pattern "mha"."""
    if not (options or {}).get("mha", True):
        return graph
    graph.toposort()
    outputs, uses = set(graph.outputs), graph.consumers()   # (the graph changes only after the walk)
    taken = {n.name for n in graph.nodes}
    fused: dict[Node, Node] = {}   # the block's last node -> its Subgraph
    absorbed: set[Node] = set()
    for node in list(graph.nodes):
        if node.op != "Softmax":
            continue
        found = match_mha(node, uses, outputs)
        if found is None or absorbed & set(found.nodes):
            continue
        name = next(f"mha{k}" for k in range(len(taken) + 1) if f"mha{k}" not in taken)
        taken.add(name)
        body = make_body(found.inputs, [found.output], found.nodes, name)
        fused[found.nodes[-1]] = Node("Subgraph", found.inputs, [found.output], {"body": body, "pattern": PATTERN},
                                      name)
        absorbed.update(found.nodes)
    if not fused:
        return graph
    graph.nodes = [fused.get(n, n) for n in graph.nodes if n in fused or n not in absorbed]
    graph.toposort()
    for sub in fused.values():
        for out, t in zip(sub.outputs, infer_node(sub)):
            out.type = TensorType(t.dtype, merge_shapes(out.type.shape, t.shape))
    graph.validate()
    return graph


__all__ = ["MHAMatch", "PATTERN", "match_mha", "tokenize_mha"]
