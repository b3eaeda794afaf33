"""MarkQuantizedConvolutions: note on each Conv of a QDQ model what makes it an int8 convolution, before
FoldConstants turns its dequantized weights into plain floats.

ONNX Runtime's `quantize_static` (and NNCF) write a quantized Conv as

    Conv(DequantizeLinear(QuantizeLinear(x, s, z), s, z), DequantizeLinear(W_int8, s_w), bias)

The float graph computes it exactly, and the later passes keep it float: DecomposeFakeQuantize makes the
activations' pair elementwise arithmetic that fuses with its neighbours, FoldConstants evaluates the
weights' DequantizeLinear, ChannelsLast moves the Conv to NHWC. Where the activations are quantized per
tensor (uint8 or int8, the same scale and zero point on both sides) and the weights are a constant int8
tensor scaled per tensor or per output channel (axis 0) without a zero point, this pass records
`StaticQuantization` in the Conv's `meta["int8"]`; the runtime's int8 convolution quantizes the Conv's
(already fake-quantized) input again, which gives back the same integers, and recovers the int8 weights
from the folded floats, checking that they are exactly those products (else the Conv stays float).
Option `int8=False` leaves every Conv float.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..ops.int8 import META, StaticQuantization
from .qdq_patterns import int8_weights, quantized_activations


def mark_quantized_convolutions(graph: Graph, options: dict | None = None) -> Graph:
    if not (options or {}).get("int8", True):
        return graph
    for node in graph.nodes:
        if node.op != "Conv" or node.domain or len(node.inputs) < 2:
            continue
        activations = quantized_activations(node.inputs[0])
        weights = int8_weights(node.inputs[1], 4, 0) if activations is not None else None
        if weights is not None:
            a = activations
            node.meta[META] = StaticQuantization(a.scale, a.zero, a.low, a.high, tuple(map(float, weights[1])))
    return graph


__all__ = ["mark_quantized_convolutions"]
