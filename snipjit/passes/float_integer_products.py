"""FloatIntegerProducts: a MatMulInteger whose int32 result only becomes float32 runs as a float32 product.

Models quantized dynamically (ONNX Runtime's `quantize_dynamic`) compute each linear layer as

    x_q, s, z = DynamicQuantizeLinear(x);  y = Cast(MatMulInteger(x_q, W_q, z, W_z), to=float) * s * W_s

Until snipjit has int8 microkernels, the integer product is a NumPy reference kernel, ten times slower
than the float product on the generated GEMM. Where the int32 result is read only by a Cast to float32,
it is not observable as an integer, so the product is rewritten as

    Cast(MatMulInteger(a, b, za, zb), float)  ->  MatMul(Cast(a, float) - Cast(za, float), (b - zb) as float)

with the constant weights centered and converted here (then packed like any MatMul's). The operands are
the same integers; the sums are float32 instead of exact int32, which the Cast would round for sums past
2^24 anyway: the results differ from the integer product's by float32 rounding (about 1e-7 relative per
term summed), far below the quantization step.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import f32
from ..ir.graph import Graph, Node, TensorType, Value

FLOAT = 1   # onnx.TensorProto.FLOAT


def _constant(v: Value | None) -> np.ndarray | None:
    return None if v is None or not v.is_constant else v.data


def float_integer_products(graph: Graph, options: dict | None = None) -> Graph:
    consumers = graph.consumers()
    outputs = set(map(id, graph.outputs))
    replaced: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if node.op != "MatMulInteger" or node.domain or id(node.outputs[0]) in outputs:
            continue
        readers = consumers.get(node.outputs[0], [])
        if len(readers) != 1 or readers[0][0].op != "Cast" or readers[0][0].attrs.get("to") != FLOAT:
            continue
        a, b = node.inputs[:2]
        za = node.inputs[2] if len(node.inputs) > 2 else None
        zb = node.inputs[3] if len(node.inputs) > 3 else None
        weights, weights_zero = _constant(b), _constant(zb)
        if weights is None or (zb is not None and weights_zero is None) or a.type is None or b.type is None or \
                weights.ndim != 2 or (za is not None and za.type is not None and za.type.shape not in ((), (1,))):
            continue   # (constant 2-D weights; a per-tensor zero point for the activations)
        cast = readers[0][0]
        replaced[id(node)] = []
        replaced[id(cast)] = _float_product(node, cast, weights, weights_zero)
    if replaced:
        graph.nodes = [m for n in graph.nodes for m in replaced.get(id(n), [n])]
    return graph


def _float_product(node: Node, cast: Node, weights: np.ndarray, weights_zero: np.ndarray | None) -> list[Node]:
    a = node.inputs[0]
    za = node.inputs[2] if len(node.inputs) > 2 else None
    base = cast.outputs[0].name
    centered = weights.astype(np.int32) - (0 if weights_zero is None else weights_zero.astype(np.int32))
    b = Value.constant(f"{base}/weights", np.ascontiguousarray(centered.astype(np.float32)))
    nodes: list[Node] = []

    def step(op: str, inputs: list[Value], shape, attrs=None, out: Value | None = None) -> Value:
        out = out or Value(f"{base}/{op.lower()}{len(nodes)}", TensorType(f32, shape))
        nodes.append(Node(op, inputs, [out], dict(attrs or {}), f"{base}/{op.lower()}{len(nodes)}"))
        return out

    x = step("Cast", [a], a.type.shape, {"to": FLOAT})
    if za is not None:
        x = step("Sub", [x, step("Cast", [za], za.type.shape, {"to": FLOAT})], a.type.shape)
    step("MatMul", [x, b], None, out=cast.outputs[0])
    return nodes
