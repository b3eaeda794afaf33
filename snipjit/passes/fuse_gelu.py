"""FuseGelu: a GELU that an exporter wrote out in arithmetic becomes one `Gelu` node (approximate "none"
for the erf form BERT and ViT use, "tanh" for GPT-2's), so that a matrix product's store applies it
(`MarkSkippedByPlugin`, the GEMM epilogue) or a kernel evaluates it in one function call.

Exporters order and group the operations differently (x·0.5·(1 + erf(x/√2)), 0.5·x·(1 + tanh(√(2/π)·(x +
0.044715·x³))), divisions for multiplications...), so a candidate is recognised by what it computes: the
elementwise nodes between a value x and a Mul that read nothing but x, each other and scalar constants,
whose intermediate results nothing else reads, are evaluated on sample points and compared with both
GELUs. Only groups containing an Erf or a Tanh are tried. The one difference: at x = -inf the Gelu gives
-0, its limit, where the written-out arithmetic computes -inf · 0 = NaN.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ops.interpreter import run_graph_reference
from .tokenize import make_body

ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sqrt", "Neg"})
MAX_NODES = 10
SAMPLES = np.linspace(-6, 6, 97)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _scalar_constant(v: Value | None) -> bool:
    return v is not None and v.is_constant and v.data.size == 1


def _group(root: Node, x: Value) -> list[Node] | None:
    """The arithmetic nodes between x and root (root last, in order), or None when they read anything else."""
    members: dict[int, Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in members:
            continue
        if node.domain or node.op not in ARITHMETIC or len(members) >= MAX_NODES:
            return None
        members[id(node)] = node
        for v in node.inputs:
            if v is x or _scalar_constant(v):
                continue
            if v is None or v.producer is None:
                return None
            stack.append(v.producer)
    return list(members.values())


def _sources(root: Node) -> list[Value]:
    """The values the group of `root` could start from: the non-constant values above it, nearest first."""
    found, frontier = [], [root]
    for _ in range(MAX_NODES):
        values = [v for n in frontier for v in n.inputs if v is not None and not v.is_constant]
        found += [v for v in values if v not in found]
        frontier = [v.producer for v in values if v.producer is not None and v.producer.op in ARITHMETIC]
        if not frontier:
            break
    return found


def match_gelu(root: Node, uses: dict, outputs: set) -> tuple[Value, list[Node], str] | None:
    """(x, the nodes, approximate) when `root` ends a GELU of x, else None."""
    if root.op != "Mul" or root.domain or root.outputs[0].type is None:
        return None
    for x in _sources(root):
        nodes = _group(root, x)
        if nodes is None or not any(n.op in ("Erf", "Tanh") for n in nodes) or x.type != root.outputs[0].type:
            continue
        inside = {id(n) for n in nodes}
        if any(o in outputs or any(id(u) not in inside for u, _ in uses.get(o, ())) for n in nodes
               if n is not root for o in n.outputs):
            continue   # (an intermediate value read elsewhere)
        order = _topological(nodes)
        body = make_body([x], [root.outputs[0]], order, "gelu")
        try:
            got = run_graph_reference(body, [SAMPLES.astype(x.type.dtype.np)])[0]
        except Exception:   # (shapes that do not broadcast the samples: not a GELU of x)
            continue
        for approximate in ("none", "tanh"):
            want = _gelu(SAMPLES, approximate)
            if got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5):
                return x, order, approximate
    return None


def _topological(nodes: list[Node]) -> list[Node]:
    inside = {id(n) for n in nodes}
    done: set[int] = set()
    order: list[Node] = []

    def visit(n: Node) -> None:
        if id(n) in done:
            return
        done.add(id(n))
        for v in n.inputs:
            if v is not None and v.producer is not None and id(v.producer) in inside:
                visit(v.producer)
        order.append(n)

    for n in nodes:
        visit(n)
    return order


def fuse_gelu(graph: Graph, options: dict | None = None) -> Graph:
    graph.toposort()
    uses, outputs = graph.consumers(), set(graph.outputs)
    replaced: dict[int, Node] = {}
    removed: set[int] = set()
    for node in graph.nodes:
        if id(node) in removed or not (node.op == "Mul" and not node.domain):
            continue
        found = match_gelu(node, uses, outputs)
        if found is None or any(id(n) in removed for n in found[1]):
            continue
        x, nodes, approximate = found
        removed.update(id(n) for n in nodes)
        replaced[id(node)] = Node("Gelu", [x], [node.outputs[0]], {"approximate": approximate}, node.name)
    if replaced:
        graph.nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) in replaced or id(n) not in removed]
    return graph


__all__ = ["fuse_gelu", "match_gelu"]
