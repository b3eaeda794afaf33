"""QuantizedProducts: a QDQ model's MatMul or Gemm of quantized activations and int8 weights becomes an
int8 product scaled per column, before FoldConstants turns the weights' DequantizeLinear into floats.

ONNX Runtime's `quantize_static` (and NNCF) write a quantized linear layer as

    MatMul(DequantizeLinear(QuantizeLinear(x, s, z), s, z), DequantizeLinear(W, s_w))      (or Gemm, + C)

With per-tensor activations (uint8 or int8, the same scale and zero point on both sides) and W a constant
int8 matrix scaled per tensor or per output column, without a zero point, that is exactly

    DynamicQuantizedMatMul(x, s, z', W) · (s · s_w)          (`ops.int8`; z' = z, or z + 128 for int8)

— the int8 kernel quantizes x itself, with the same levels as QuantizeLinear (an int8 level shifted by
128 into uint8's range: clip(round(x/s) + z, -128, 127) + 128 == clip(round(x/s) + z + 128, 0, 255)), and
multiplies them exactly; the per-column scale (Gemm: times alpha) and Gemm's C (times beta) are
elementwise ops that fuse with the layer's next ones. The QuantizeLinear → DequantizeLinear pair stays for
any other reader. Option `int8=False` leaves the float products.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import f32
from ..ir.graph import Graph, Node
from ..ops.int8 import DOMAIN as INT8, unsigned_zero
from .node_writer import NodeWriter
from .qdq_patterns import QuantizedActivations, int8_weights, quantized_activations


def _product(node: Node) -> tuple[QuantizedActivations, np.ndarray, np.ndarray, float] | None:
    """What an int8 product needs of a MatMul or Gemm: the activations, W as [K, N], the column scales, alpha."""
    if node.domain or len(node.inputs) < 2 or node.outputs[0].type is None or node.outputs[0].type.dtype != f32:
        return None
    if node.op == "MatMul":
        alpha, trans_a, trans_b = 1.0, 0, 0
    elif node.op == "Gemm":
        alpha, trans_a, trans_b = (float(node.attrs.get("alpha", 1.0)), node.attrs.get("transA", 0),
                                   node.attrs.get("transB", 0))
    else:
        return None
    activations = quantized_activations(node.inputs[0]) if not trans_a else None
    weights = int8_weights(node.inputs[1], 2, 0 if trans_b else 1) if activations is not None else None
    if weights is None:
        return None
    w, scales = weights
    return activations, np.ascontiguousarray(w.T if trans_b else w), scales, alpha


def quantized_products(graph: Graph, options: dict | None = None) -> Graph:
    if not (options or {}).get("int8", True):
        return graph
    replaced: dict[int, list[Node]] = {}
    for node in graph.nodes:
        found = _product(node)
        if found is None:
            continue
        a, w, column_scales, alpha = found
        zero = unsigned_zero(a.zero, a.low)
        y = node.outputs[0]
        step = NodeWriter(y.name)
        product = step("DynamicQuantizedMatMul", [a.x, step.const("scale", np.float32(a.scale)),
                                                  step.const("zero", np.float32(zero)), step.const("weights", w)],
                       y.type.shape)
        step.nodes[-1].domain = INT8
        scales = (np.float32(alpha) * np.float32(a.scale) * column_scales).astype(np.float32)
        columns = step.const("column_scales", scales)
        c = node.inputs[2] if node.op == "Gemm" and len(node.inputs) > 2 else None
        if c is None:
            step("Mul", [product, columns], y.type.shape, out=y)
        else:
            scaled = step("Mul", [product, columns], y.type.shape)
            beta = float(node.attrs.get("beta", 1.0))
            if beta != 1.0:
                c = step("Mul", [c, step.const("beta", np.float32(beta))], c.type.shape)
            step("Add", [scaled, c], y.type.shape, out=y)
        replaced[id(node)] = step.nodes
    if replaced:
        graph.nodes = [m for n in graph.nodes for m in replaced.get(id(n), [n])]
        graph.remove_dead_nodes()
    return graph


__all__ = ["quantized_products"]
