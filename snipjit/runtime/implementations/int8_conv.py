"""The `int8` implementation of a channels-last Conv that `passes.mark_quantized_convolutions` marked as a
QDQ model's int8 convolution: `conv_int8_launch` on the int8 microkernels, the float implicit GEMM
(`channels_last.ConvKernel`, whose epilogue absorption it shares) where the arrays do not fit it."""
from __future__ import annotations

import numpy as np

from ...ir.graph import Node
from ...ops.channels_last import DOMAIN
from ...ops.int8 import META
from . import conv_launch, held_weights
from .base import Implementation, NotApplicable
from .channels_last import ConvKernel, accepts
from .conv_int8_launch import PackedInt8Conv, exact_int8_levels, pack_int8_conv, prepare_int8_conv
from .held_weights import HeldWeight

LARGEST_LEVEL = 255   # of the image's unsigned values


class Int8ConvKernel(ConvKernel):
    """Holds the weights as int8 (`PackedInt8Conv`); packs the float form only if an input or output
    layout ever needs the float kernel."""

    def _packed_weights(self, node: Node):
        self.quantization = node.meta[META]
        w = node.inputs[1]
        self.int8 = held_weights.offered(w, PackedInt8Conv) or self._int8_form(w.data)
        return None

    def _int8_form(self, w: np.ndarray) -> PackedInt8Conv:
        weights = exact_int8_levels(w, self.quantization.weight_scales)
        if weights is None:
            raise NotApplicable   # (not exactly int8 times the scales)
        if LARGEST_LEVEL * np.abs(weights.astype(np.int64)).reshape(len(weights), -1).sum(1).max(initial=0) >= 2**31:
            raise NotApplicable   # (sums of products could pass int32)
        return pack_int8_conv(weights, self.quantization.weight_scales)

    def held(self, index: int) -> HeldWeight:
        return HeldWeight(self.int8) if index == 1 else super().held(index)

    def native_jobs(self) -> list:
        return []   # (its int8 kernel is compiled when first used)

    def prepare(self, inputs, y, repeats):
        residual = inputs[3] if len(inputs) > 3 else None
        launch = prepare_int8_conv(inputs[0], self.int8, y, self.geometry(inputs[0]), self.quantization,
                                   self._total_bias(), self.clamp, self.activation, residual)
        if launch is not None:
            return launch
        if self.packed is None:
            self.packed = conv_launch.pack_conv(self.int8.unpack(), 1)
        return super().prepare(inputs, y, repeats)


def accepts_int8_conv(node: Node, options: dict) -> bool:
    if not (node.op == "Conv" and node.domain == DOMAIN and META in node.meta and accepts(node, options)):
        return False
    group, planar = node.attrs.get("group", 1), node.attrs.get("input_layout", "NHWC") == "NCHW"
    return group == 1 and not planar and options.get("int8", True)


INT8_CONV = Implementation("int8", accepts_int8_conv, lambda node, options: Int8ConvKernel(node))

__all__ = ["INT8_CONV", "Int8ConvKernel"]
