"""The QDQ-format patterns the int8 passes look for (`MarkQuantizedConvolutions`, `QuantizedProducts`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.graph import Value
from .decompose_fake_quantize import _dequantize, _quantize


@dataclass(frozen=True)
class QuantizedActivations:
    """v = DequantizeLinear(QuantizeLinear(x, scale, zero), scale, zero) into the levels [low, high]."""
    x: Value
    scale: float
    zero: int
    low: int
    high: int


def quantized_activations(v: Value) -> QuantizedActivations | None:
    """The pattern producing v, with one scale and zero point (per tensor) and 8-bit levels, or None."""
    dq = v.producer
    found = _dequantize(dq) if dq is not None else None
    q = dq.inputs[0].producer if found is not None else None
    quantized = _quantize(q) if q is not None else None
    if quantized is None:
        return None
    scale, zero, (low, high) = quantized
    if (scale, zero) != found or (low, high) not in ((0, 255), (-128, 127)) or not scale > 0:
        return None
    return QuantizedActivations(q.inputs[0], scale, zero, low, high)


def int8_weights(v: Value, ndim: int, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(W, scales) when v = DequantizeLinear(W, scales) of a constant int8 W of rank `ndim` with no zero point
    (or zeros), scaled per tensor or per slice along `axis`; scales as a 1-D float32 array."""
    dq = v.producer
    if dq is None or dq.op != "DequantizeLinear" or dq.domain or len(dq.inputs) < 2 or dq.attrs.get("block_size", 0):
        return None
    w, scale = dq.inputs[:2]
    zero = dq.inputs[2] if len(dq.inputs) > 2 else None
    if not (w.is_constant and scale.is_constant) or w.data.dtype != np.int8 or w.data.ndim != ndim or \
            scale.data.dtype != np.float32 or (zero is not None and (not zero.is_constant or zero.data.any())):
        return None
    if scale.data.size != 1 and (scale.data.ndim != 1 or scale.data.size != w.data.shape[axis] or
                                 dq.attrs.get("axis", 1) % ndim != axis):
        return None
    return w.data, scale.data.reshape(-1)
