"""EliminateIdentities: Identity, Dropout at inference and a Cast to the type its input already has pass
their input on unchanged: their readers
read the input instead and the copy they would make goes.

A Dropout is an identity when its training_mode input is absent or a constant false (or its ratio a
constant 0) and its mask output is unused. A node whose output is a graph output stays (the output keeps
its name). Removing them also lets a value stay on one layout across them (the ChannelsLast regions of
SqueezeNet and Inception are split by a Dropout otherwise).
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value


def _false(v: Value | None) -> bool:
    return v is None or (v.is_constant and v.data.size == 1 and not bool(np.asarray(v.data).reshape(-1)[0]))


def is_identity(node: Node, used: set[int]) -> bool:
    if node.domain or not node.inputs or node.inputs[0] is None:
        return False
    if node.op == "Identity":
        return True
    if node.op in ("Cast", "CastLike"):   # (exporters write float-to-float Casts, e.g. after a Softmax)
        source, out = node.inputs[0].type, node.outputs[0].type
        return source is not None and out is not None and source.dtype == out.dtype
    if node.op != "Dropout" or any(id(o) in used for o in node.outputs[1:]):
        return False
    ratio = node.inputs[1] if len(node.inputs) > 1 else None
    training = node.inputs[2] if len(node.inputs) > 2 else None
    return _false(training) or (ratio is not None and ratio.is_constant and ratio.data.size == 1
                                and float(ratio.data.reshape(-1)[0]) == 0)


def eliminate_identities(graph: Graph, options: dict | None = None) -> Graph:
    used = {id(v) for n in graph.nodes for v in n.inputs if v is not None} | {id(v) for v in graph.outputs}
    outputs = {id(v) for v in graph.outputs}
    replaced: dict[int, Value] = {}
    kept = []
    for node in graph.nodes:
        node.inputs = [None if v is None else replaced.get(id(v), v) for v in node.inputs]
        out = node.outputs[0]
        if is_identity(node, used) and id(out) not in outputs and out.type == node.inputs[0].type:
            replaced[id(out)] = node.inputs[0]
        else:
            kept.append(node)
    graph.nodes = kept
    return graph


__all__ = ["eliminate_identities", "is_identity"]
