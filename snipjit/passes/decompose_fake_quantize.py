"""DecomposeFakeQuantize: a QuantizeLinear → DequantizeLinear pair on float activations becomes the float
arithmetic it stands for, so it fuses into generated kernels with its neighbours.

Quantized models in the QDQ format (ONNX Runtime's `quantize_static`, NNCF) put such a pair on every
activation a quantized operator reads. Run by itself each is a full pass over the tensor in NumPy, and
the pair cuts the convolutions' channels-last regions apart. With per-tensor scales and zero points that
are constants,

    DequantizeLinear(QuantizeLinear(x, s, z), s', z')  ==  (clip(round(x / s) + z, lo, hi) - z') * s'

where [lo, hi] is the quantized type's range — elementwise math (the FakeQuantize decomposition of
OpenVINO's Snippets): Div, Round (half to even, as QuantizeLinear), Clip, Mul, and Add/Sub of the zero
points when they differ. The division stays a division, in the scale's float32, as QuantizeLinear
divides, so the values are the same; a NaN stays NaN instead of becoming the type's lowest value.
Weights need none of this: their DequantizeLinear has constant inputs and FoldConstants evaluates it.
Run after constant folding (scales and zero points are constants then) and before the layout pass.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import f32
from ..ir.graph import Graph, Node, Value
from .node_writer import NodeWriter

RANGES = {np.dtype(t): (np.iinfo(t).min, np.iinfo(t).max) for t in (np.int8, np.uint8, np.int16, np.uint16)}


def _scalar(v: Value | None, default=None):
    """The value of a constant holding one element, else `default` for a missing input, else None."""
    if v is None:
        return default
    if not v.is_constant or v.data.size != 1:
        return None
    return v.data.reshape(())


def _quantize(node: Node) -> tuple[float, int, tuple[int, int]] | None:
    """(scale, zero point, range) of a per-tensor QuantizeLinear of float32 into an integer type."""
    if node.op != "QuantizeLinear" or node.domain or node.inputs[0].type is None or \
            node.inputs[0].type.dtype != f32 or node.attrs.get("precision", 0) not in (0, 1):
        return None
    scale = _scalar(node.inputs[1])
    zero_point = _scalar(node.inputs[2] if len(node.inputs) > 2 else None, np.uint8(0))
    q = node.outputs[0].type
    if scale is None or zero_point is None or scale.dtype != np.float32 or q is None or \
            q.dtype.np not in RANGES or zero_point.dtype != q.dtype.np:
        return None
    return float(scale), int(zero_point), RANGES[q.dtype.np]


def _dequantize(node: Node) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor DequantizeLinear into float32."""
    if node.op != "DequantizeLinear" or node.domain or node.outputs[0].type is None or \
            node.outputs[0].type.dtype != f32:
        return None
    scale = _scalar(node.inputs[1])
    zero_point = _scalar(node.inputs[2] if len(node.inputs) > 2 else None, np.int64(0))
    if scale is None or zero_point is None or scale.dtype != np.float32:
        return None
    return float(scale), int(zero_point)


def decompose_fake_quantize(graph: Graph, options: dict | None = None) -> Graph:
    consumers = graph.consumers()
    outputs = set(map(id, graph.outputs))
    replaced: dict[int, list[Node]] = {}   # id of a node taken out -> the nodes in its place
    for q in graph.nodes:
        found = _quantize(q)
        readers = consumers.get(q.outputs[0], [])
        if found is None or not readers or id(q.outputs[0]) in outputs:
            continue
        dequantizers = [_dequantize(n) if i == 0 else None for n, i in readers]
        if any(d is None for d in dequantizers):
            continue
        scale, zero_point, (lo, hi) = found
        replaced[id(q)] = []
        pad = _zero_pad(q.inputs[0], consumers, outputs) if len(readers) == 1 else None
        for (dq, _), (scale2, zero_point2) in zip(readers, dequantizers):
            if pad is not None and zero_point == zero_point2 and lo <= zero_point <= hi:   # f(0) = 0
                replaced[id(pad)] = []
                replaced[id(dq)] = _arithmetic(q, dq, scale, zero_point, lo, hi, scale2, zero_point2, pad)
            else:
                replaced[id(dq)] = _arithmetic(q, dq, scale, zero_point, lo, hi, scale2, zero_point2)
    if replaced:
        graph.nodes = [m for n in graph.nodes for m in replaced.get(id(n), [n])]
    return graph


def _zero_pad(x: Value, consumers, outputs: set[int]) -> Node | None:
    """The Pad producing `x` when it pads with zeros (in constant mode) and nothing else reads `x`."""
    pad = x.producer
    if pad is None or pad.op != "Pad" or pad.domain or pad.attrs.get("mode", "constant") != "constant" or \
            len(consumers.get(x, [])) != 1 or id(x) in outputs:
        return None
    value = _scalar(pad.inputs[2] if len(pad.inputs) > 2 else None, np.float32(0))
    return pad if value is not None and value == 0 else None


def _arithmetic(q: Node, dq: Node, scale: float, zero_point: int, lo: int, hi: int, scale2: float,
                zero_point2: int, pad: Node | None = None) -> list[Node]:
    """The nodes computing `dq`'s output from `q`'s input; with the zero `pad` that produces that input,
    the arithmetic goes before the Pad (it maps 0 to 0), which then meets the convolution reading it."""
    x, y = (q.inputs[0], dq.outputs[0]) if pad is None else (pad.inputs[0], dq.outputs[0])
    step, shape = NodeWriter(y.name), x.type.shape

    def const(hint: str, value: float) -> Value:
        return step.const(hint, np.float32(value))

    t = step("Round", [step("Div", [x, const("scale", scale)], shape)], shape)
    if zero_point == zero_point2:   # the usual pair: the zero points cancel
        t = step("Clip", [t, const("lo", lo - zero_point), const("hi", hi - zero_point)], shape)
    else:
        t = step("Clip", [step("Add", [t, const("zero_point", zero_point)], shape), const("lo", lo), const("hi", hi)],
                 shape)
        t = step("Sub", [t, const("zero_point2", zero_point2)], shape)
    if pad is None:
        step("Mul", [t, const("scale2", scale2)], shape, out=y)
        return step.nodes
    t = step("Mul", [t, const("scale2", scale2)], shape)
    step.nodes.append(Node("Pad", [t] + pad.inputs[1:], [y], dict(pad.attrs), pad.name))
    return step.nodes
