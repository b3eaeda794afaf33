"""FusePadIntoConv: a zero Pad of the spatial dims that only Convs read becomes the Convs' own padding.

Exporters write explicit padding as a Pad node before the Conv (TensorFlow-style "same" padding, as
transformers' MobileNet-V2 and EfficientNet do it): a full copy of the activation, larger than it, that
the convolution kernels would read only to multiply zeros. A Conv pads with zeros itself, so

    Conv(Pad(x, pads, 0), w)  ==  Conv(x, w) {pads = conv pads + the Pad's spatial pads}

when the Pad is in constant mode with value 0, pads nothing but spatial dims, pads no negative amount
(a crop) and every reader of its output is such a Conv with explicit padding or none (auto_pad NOTSET
or VALID; not SAME_*, whose padding depends on the padded size). The Pad
then has no readers and goes. Run after constant folding, which turns computed pads into constants.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value


def _constant(v: Value | None) -> np.ndarray | None:
    return None if v is None or not v.is_constant else v.data


def spatial_pads(pad: Node) -> list[int] | None:
    """A zero, constant-mode Pad's widths of the spatial dims of an NCHW-style input, ONNX-ordered
    (all begins, then all ends); None when it pads anything else or is not such a Pad."""
    x = pad.inputs[0]
    if pad.domain or pad.attrs.get("mode", "constant") != "constant" or x.shape is None or len(x.shape) < 3:
        return None   # (a Conv's input is [N, C, spatial...])
    pads = _constant(pad.inputs[1] if len(pad.inputs) > 1 else None)
    value = _constant(pad.inputs[2] if len(pad.inputs) > 2 else None)
    axes_in = pad.inputs[3] if len(pad.inputs) > 3 else None
    axes = _constant(axes_in)
    if pads is None or (value is not None and value.size and value.reshape(-1)[0] != 0):
        return None
    if axes_in is not None and axes is None:
        return None
    rank = len(x.shape)
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes.reshape(-1)]
    pads = [int(p) for p in pads.reshape(-1)]
    if len(pads) != 2 * len(axes) or any(p < 0 for p in pads):
        return None
    begin, end = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        begin[axis], end[axis] = pads[i], pads[i + len(axes)]
    if begin[0] or begin[1] or end[0] or end[1]:
        return None
    return begin[2:] + end[2:]


def _takes_padding(conv: Node, pad_out: Value, spatial: int) -> bool:
    own = conv.attrs.get("pads")
    return (not conv.domain and conv.op == "Conv" and conv.inputs[0] is pad_out
            and conv.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "", "VALID")
            and pad_out not in conv.inputs[1:] and (own is None or len(own) == 2 * spatial))


def fuse_pad_into_conv(graph: Graph, options: dict | None = None) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    for pad in [n for n in graph.nodes if n.op == "Pad"]:
        out = pad.outputs[0]
        widths = spatial_pads(pad)
        readers = [n for n, _ in uses.get(out, [])]
        if widths is None or not readers or out in outputs:
            continue
        spatial = len(widths) // 2
        if not all(_takes_padding(conv, out, spatial) for conv in readers):
            continue
        for conv in readers:
            valid = conv.attrs.get("auto_pad") == "VALID"   # (no padding of its own)
            own = [0] * (2 * spatial) if valid or not conv.attrs.get("pads") else conv.attrs["pads"]
            conv.attrs = {**conv.attrs, "auto_pad": "NOTSET", "pads": [int(a) + b for a, b in zip(own, widths)]}
            conv.inputs = [pad.inputs[0], *conv.inputs[1:]]
    graph.remove_dead_nodes()
    return graph


__all__ = ["fuse_pad_into_conv", "spatial_pads"]
