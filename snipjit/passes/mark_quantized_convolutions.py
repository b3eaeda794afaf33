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

import numpy as np

from ..ir.graph import Graph, Value
from ..ops.int8 import META, StaticQuantization
from .decompose_fake_quantize import _dequantize, _quantize


def _fake_quantized(v: Value) -> tuple[float, int, int, int] | None:
    """(scale, zero, low, high) when v = DequantizeLinear(QuantizeLinear(x, s, z), s, z) of 8-bit values."""
    dq = v.producer
    found = _dequantize(dq) if dq is not None else None
    q = dq.inputs[0].producer if found is not None else None
    quantized = _quantize(q) if q is not None else None
    if quantized is None:
        return None
    scale, zero, (low, high) = quantized
    if (scale, zero) != found or (low, high) not in ((0, 255), (-128, 127)) or not scale > 0:
        return None
    return scale, zero, low, high


def _int8_weight_scales(v: Value) -> tuple[float, ...] | None:
    """The scales of w = DequantizeLinear(W, scales) with W a constant int8 [O, C, KH, KW], the scales one
    or one per output channel (axis 0), no zero point but zeros."""
    dq = v.producer
    if dq is None or dq.op != "DequantizeLinear" or dq.domain or len(dq.inputs) < 2:
        return None
    w, scale = dq.inputs[:2]
    zero = dq.inputs[2] if len(dq.inputs) > 2 else None
    if not (w.is_constant and scale.is_constant) or w.data.dtype != np.int8 or w.data.ndim != 4 or \
            scale.data.dtype != np.float32 or dq.attrs.get("block_size", 0):
        return None
    if zero is not None and (not zero.is_constant or zero.data.any()):
        return None
    scales = scale.data.reshape(-1)
    if scales.size != 1 and (scale.data.ndim != 1 or scales.size != w.data.shape[0] or
                             dq.attrs.get("axis", 1) % 4 != 0):
        return None
    return tuple(float(s) for s in scales)


def mark_quantized_convolutions(graph: Graph, options: dict | None = None) -> Graph:
    if not (options or {}).get("int8", True):
        return graph
    for node in graph.nodes:
        if node.op != "Conv" or node.domain or len(node.inputs) < 2:
            continue
        activations = _fake_quantized(node.inputs[0])
        weight_scales = _int8_weight_scales(node.inputs[1])
        if activations is not None and weight_scales is not None:
            node.meta[META] = StaticQuantization(*activations, weight_scales)
    return graph


__all__ = ["mark_quantized_convolutions"]
