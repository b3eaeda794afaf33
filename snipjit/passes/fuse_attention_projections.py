"""FuseAttentionProjections: the Q, K and V projections of an attention block — three MatMuls of one
input by constant 2-D weights, each with or without an Add of a constant bias along the last axis —
become one MatMul by the weights side by side (and one Add of the biases side by side), then a Split
along the last axis giving Q, K and V.

Why: TokenizeMHA absorbs a Split giving Q, K and V into the attention block (the kernel reads the heads
through its strides, as for GPT-2's fused projection), so the three products become one three times
wider: one launch instead of three, and three times the column panels to share among the threads (ViT's
and BERT's 384-wide projections give 6 panels of 64 columns each). The sums are the same, each output
element over the same K in the same order.

Only blocks that `match_mha` finds are changed, with Q, K and V each read by the block alone (the Split
is then absorbed, never copied): nothing changes with `mha=False` or `fuse=False`; option
`fuse_projections=False` turns the pass off alone. The projections must
all have a bias or all have none (a zero bias would turn -0 into +0), and each weight must be read by its
MatMul alone (else the concatenated copy would double it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import f32
from ..ir.graph import Graph, Node, TensorType, Value
from .tokenize_mha import match_mha


@dataclass
class _Projection:
    """result = MatMul(x, weight) [+ bias]: its nodes and constants."""
    result: Value
    product: Node
    weight: np.ndarray          # [K, N]
    add: Node | None = None
    bias: np.ndarray | None = None   # [N]


def _only_use(value: Value, uses: dict, outputs: set) -> Node | None:
    found = uses.get(value, ())
    return found[0][0] if len(found) == 1 and value not in outputs else None


def _bias(add: Node, product: Value, n: int) -> np.ndarray | None:
    """The Add's other operand as a [n] vector, when it is a constant along the last axis only."""
    if add.op != "Add" or add.domain or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] is product else add.inputs[0]
    if other is None or other is product or not other.is_constant or other.data.dtype != np.float32:
        return None
    shape = other.data.shape
    if shape[-1:] != (n,) or any(d != 1 for d in shape[:-1]) or len(shape) > len(product.shape):
        return None
    return other.data.reshape(n)


def _projection(value: Value, uses: dict, outputs: set) -> _Projection | None:
    """How `value` (read by the block alone) is computed, when it is a projection by constant weights."""
    if _only_use(value, uses, outputs) is None or value.type is None or value.type.dtype != f32:
        return None
    node = value.producer
    add = None
    if node is not None and node.op == "Add" and not node.domain:
        add = node
        node = next((v.producer for v in add.inputs if v is not None and v.producer is not None
                     and v.producer.op == "MatMul"), None)
    if node is None or node.op != "MatMul" or node.domain:
        return None
    x, w = node.inputs
    if not w.is_constant or w.data.ndim != 2 or w.data.dtype != np.float32 or x.is_constant \
            or x.shape is None or len(x.shape) < 2 or len(uses.get(w, ())) != 1:
        return None
    projection = _Projection(value, node, w.data)
    if add is not None:
        if _only_use(node.outputs[0], uses, outputs) is not add:
            return None
        projection.add, projection.bias = add, _bias(add, node.outputs[0], w.data.shape[1])
        if projection.bias is None:
            return None
    return projection


def _fused(graph: Graph, parts: list[_Projection], index: int) -> list[Node]:
    """The nodes computing the parts' results as one product and a Split (the results keep their Values)."""
    x = parts[0].product.inputs[0]
    name = f"{graph.fresh_name('qkv')}_{index}"
    weight = Value.constant(f"{name}_weight", np.ascontiguousarray(np.concatenate([p.weight for p in parts], 1)))
    n = weight.data.shape[1]
    rank = len(parts[0].result.shape)
    shape = parts[0].result.shape[:-1] + (n,)
    product = Value(f"{name}_product", TensorType(f32, shape))
    nodes = [Node("MatMul", [x, weight], [product], {}, f"{name}_matmul")]
    if parts[0].add is not None:
        bias = Value.constant(f"{name}_bias", np.concatenate([p.bias for p in parts]))
        summed = Value(f"{name}_sum", TensorType(f32, shape))
        nodes.append(Node("Add", [product, bias], [summed], {}, f"{name}_add"))
        product = summed
    sizes = Value.constant(f"{name}_sizes", np.array([p.weight.shape[1] for p in parts], np.int64))
    nodes.append(Node("Split", [product, sizes], [p.result for p in parts], {"axis": rank - 1}, f"{name}_split"))
    return nodes


def fuse_attention_projections(graph: Graph, options: dict | None = None) -> Graph:
    """Give each attention block's Q, K and V projections one product (see the module docstring)."""
    options = options or {}
    if not options.get("mha", True) or not options.get("fuse_projections", True):
        return graph
    graph.toposort()
    outputs, uses = set(graph.outputs), graph.consumers()
    replaced: dict[Node, list[Node]] = {}   # a first projection node -> the fused nodes
    removed: set[Node] = set()
    for node in list(graph.nodes):
        found = match_mha(node, uses, outputs) if node.op == "Softmax" else None
        if found is None or found.split is not None or len({found.q, found.k, found.v}) != 3:
            continue
        parts = [_projection(v, uses, outputs) for v in (found.q, found.k, found.v)]
        if any(p is None for p in parts) or len({id(p.product.inputs[0]) for p in parts}) != 1 \
                or len({p.add is None for p in parts}) != 1 \
                or len({p.result.shape[:-1] for p in parts}) != 1 \
                or any(p.result.shape[-1] != p.weight.shape[1] for p in parts):
            continue
        mine = [n for p in parts for n in (p.product, p.add) if n is not None]
        if removed & set(mine):
            continue
        first = next(n for n in graph.nodes if n in mine)
        replaced[first] = _fused(graph, parts, len(replaced))
        removed.update(mine)
    if not replaced:
        return graph
    graph.nodes = [m for n in graph.nodes if n in replaced or n not in removed for m in replaced.get(n, [n])]
    graph.toposort()
    graph.validate()
    return graph


__all__ = ["fuse_attention_projections"]
