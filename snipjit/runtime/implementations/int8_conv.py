"""The `int8` implementation of a channels-last Conv that `passes.mark_quantized_convolutions` marked as a
QDQ model's int8 convolution: `conv_int8_launch` on the int8 microkernels, the float implicit GEMM
(`channels_last.ConvKernel`, whose epilogue absorption it shares) where the arrays do not fit it."""
from __future__ import annotations

from ...ir.graph import Node
from ...ops.channels_last import DOMAIN
from ...ops.int8 import META
from .base import Implementation, NotApplicable
from .channels_last import ConvKernel, accepts
from .conv_int8_launch import int8_weights, pack_int8_conv, prepare_int8_conv


class Int8ConvKernel(ConvKernel):
    def __init__(self, node: Node):
        super().__init__(node)
        self.quantization = node.meta[META]
        weights = int8_weights(node.inputs[1].data, self.quantization.weight_scales)
        if weights is None:
            raise NotApplicable
        self.int8 = pack_int8_conv(weights, self.quantization.weight_scales)

    def prepare(self, inputs, y, repeats):
        residual = inputs[3] if len(inputs) > 3 else None
        launch = prepare_int8_conv(inputs[0], self.int8, y, self.geometry(inputs[0]), self.quantization,
                                   self._total_bias(), self.clamp, self.activation, residual)
        return launch if launch is not None else super().prepare(inputs, y, repeats)


def accepts_int8_conv(node: Node, options: dict) -> bool:
    if not (node.op == "Conv" and node.domain == DOMAIN and META in node.meta and accepts(node, options)):
        return False
    group, planar = node.attrs.get("group", 1), node.attrs.get("input_layout", "NHWC") == "NCHW"
    return group == 1 and not planar and options.get("int8", True)


INT8_CONV = Implementation("int8", accepts_int8_conv, lambda node, options: Int8ConvKernel(node))

__all__ = ["INT8_CONV", "Int8ConvKernel"]
