"""ScaleIntoPointwiseConv: a channels-last 1×1 convolution takes the per-image channel scale of its input.

Squeeze-excitation ends in a Mul of a feature map x [N, H, W, C] by a gate [N, 1, 1, C], and in
EfficientNet, MobileNet-V3 and RegNetY a 1×1 convolution reads that product alone. The convolution is linear
in each input channel, so

    Conv1×1(x · gate, w)  ==  Conv1×1 with weights w[o, c] · gate[n, c] for image n, of x

and the Mul, a pass over the whole map (EfficientNet-B0: 16 of them, ~10% of its time), becomes the Conv's
fifth input (`scale`): its kernel copies each panel of weights scaled by the image's gate, K × NR multiplies
per work item (`runtime.implementations.conv_launch`). That copy grows with the output channels (and the
chunks of rows each panel is copied for), the Mul with the map, so only maps of at least as many pixels as
the convolution has output channels take it (2-core Xeon, AVX-512, Mul + Conv against the folded Conv:
112x112 to 14x14 maps 1.1-1.9x faster, EfficientNet-B0's 7x7 ones of 192 and 320 channels 0.75-0.87x).
Applies to a channels-last Conv of one group, stride 1 and no padding whose input is the Mul's output, read by
it alone and no graph output; the product's other operand must be [N, 1, 1, C] of x's N and C (a constant
scale would already be in the weights). Results change only by rounding (the products are formed in another
order). Runs after `ChannelsLast`.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Value
from ..ops.channels_last import DOMAIN
from .channels_last import META

SCALE_INPUT = 4   # the channels-last Conv's inputs: x, w, bias, residual, scale


def _pointwise(conv: Node) -> bool:
    """A channels-last Conv of a 1×1 kernel, one group, stride 1, no padding, reading an NHWC input of at
    least as many pixels as it has output channels."""
    a, w = conv.attrs, conv.inputs[1].data if len(conv.inputs) > 1 else None
    if conv.op != "Conv" or conv.domain != DOMAIN or w is None or w.shape[2:] != (1, 1):
        return False
    pixels = conv.inputs[0].shape[1:3] if conv.inputs[0].shape is not None else ()
    return (len(pixels) == 2 and all(isinstance(n, int) for n in pixels) and pixels[0] * pixels[1] >= w.shape[0]
            and a.get("group", 1) == 1 and all(s == 1 for s in a.get("strides") or (1, 1))
            and not any(a.get("pads") or ()) and a.get("input_layout", "NHWC") == "NHWC"
            and (len(conv.inputs) <= SCALE_INPUT or conv.inputs[SCALE_INPUT] is None))


def _channel_scale(mul: Node) -> tuple[Value, Value] | None:
    """(x, gate) of a Mul of x [N, H, W, C] by gate [N, 1, 1, C] (either order), both computed, else None."""
    if mul.op != "Mul" or mul.domain or len(mul.inputs) != 2:
        return None
    for x, gate in (mul.inputs, mul.inputs[::-1]):
        if x is None or gate is None or x.is_constant or gate.is_constant or x.shape is None or gate.shape is None:
            continue
        if (len(x.shape) == 4 and x.type == mul.outputs[0].type and x.dtype == gate.dtype
                and tuple(gate.shape) == (x.shape[0], 1, 1, x.shape[3])):
            return x, gate
    return None


def scale_into_pointwise_conv(graph: Graph, options: dict | None = None) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    folded: set[int] = set()
    for mul in graph.nodes:
        operands = _channel_scale(mul)
        y = mul.outputs[0]
        readers = uses.get(y, [])
        if operands is None or y in outputs or len(readers) != 1:
            continue
        conv, index = readers[0]
        if index != 0 or not _pointwise(conv):
            continue
        x, gate = operands
        inputs = list(conv.inputs) + [None] * (SCALE_INPUT - len(conv.inputs))
        conv.inputs = [x, *inputs[1:SCALE_INPUT], gate]
        folded.add(id(mul))
    if folded:
        graph.nodes = [n for n in graph.nodes if id(n) not in folded]
        summary = graph.meta.get(META)
        if summary is not None:
            summary.converted["input scale"] = summary.converted.get("input scale", 0) + len(folded)
    return graph


__all__ = ["scale_into_pointwise_conv"]
