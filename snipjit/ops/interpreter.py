"""The reference interpreter: runs a graph node by node with the op registry's NumPy reference kernels.

It defines what a graph computes. The `Subgraph` op's reference kernel runs its body with it, and tests
compare transformed graphs (and generated kernels) against it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir.graph import Graph, Value
from .registry import get_op


def run_graph_reference(graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run `graph` (valid, nodes in topological order) on `inputs`, given in the order of
    `graph.inputs`; returns the outputs in the order of `graph.outputs`.

    Like the runtime's reference steps, each result is cast to the dtype inference gave its value."""
    if len(inputs) != len(graph.inputs):
        raise ValueError(f"graph '{graph.name}' takes {len(graph.inputs)} inputs, got {len(inputs)}")
    env: dict[Value, np.ndarray] = {v: np.asarray(a) for v, a in zip(graph.inputs, inputs)}

    def read(v: Value | None) -> np.ndarray | None:
        if v is None:
            return None
        return v.data if v.is_constant else env[v]

    with np.errstate(all="ignore"):   # inf/NaN results are values, not errors
        for node in graph.nodes:
            opdef = get_op(node.op, node.domain)
            results = opdef.run(opdef.context(node), [read(v) for v in node.inputs])
            for value, result in zip(node.outputs, results):
                want = value.type.dtype.np if value.type is not None else result.dtype
                env[value] = result if result.dtype == want else result.astype(want)
    return [read(v) for v in graph.outputs]


__all__ = ["run_graph_reference"]
