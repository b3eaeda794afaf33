"""ActivationsBeforeReshapes: an activation reading a Reshape of a matrix product's result moves before
the Reshape (`product -> Reshape -> Gelu` becomes `product -> Gelu -> Reshape`).

Why: GPT-2's exporter flattens each Linear's input to 2-D for a Gemm and reshapes the result back to
[batch, sequence, width], so its MLP's Gelu reads a Reshape, not the Gemm: MarkSkippedByPlugin then
cannot give it to the product's epilogue, and it runs as a step of its own, one more pass over the
[128, 3072] activations. An activation is elementwise, so it gives the same values on either side of a
Reshape. Moved only when the Reshape's result is read by the activation alone (and is no graph output),
and the Reshape's input is the result of a MatMul or Gemm read by nothing else.
"""
from __future__ import annotations

from ..ir.graph import Graph, TensorType, Value

ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh", "Gelu", "LeakyRelu"})   # (one input, elementwise)
PRODUCTS = frozenset({"MatMul", "Gemm"})


def activations_before_reshapes(graph: Graph, options: dict | None = None) -> Graph:
    """Move each activation of a reshaped product before the Reshape (see the module docstring)."""
    uses = graph.consumers()
    outputs = set(graph.outputs)
    moved = 0
    for node in graph.nodes:
        if node.op not in ACTIVATIONS or node.domain or len(node.inputs) != 1 or node.inputs[0] is None:
            continue
        reshaped = node.inputs[0]
        reshape = reshaped.producer
        if reshape is None or reshape.op != "Reshape" or reshape.domain or reshaped in outputs \
                or len(uses.get(reshaped, ())) != 1:
            continue
        source = reshape.inputs[0]
        if source.producer is None or source.producer.op not in PRODUCTS or source.producer.domain \
                or source in outputs or len(uses.get(source, ())) != 1 or source.type is None:
            continue
        activated = Value(graph.fresh_name(f"{node.outputs[0].name}_before_reshape"),
                          TensorType(node.outputs[0].type.dtype if node.outputs[0].type else source.type.dtype,
                                     source.type.shape))
        result = node.outputs[0]
        node.inputs, node.outputs = [source], [activated]
        reshape.inputs[0], reshape.outputs = activated, [result]
        activated.producer, result.producer = node, reshape
        moved += 1
    if moved:
        graph.toposort()
        graph.validate()
    return graph


__all__ = ["activations_before_reshapes"]
