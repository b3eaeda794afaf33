"""snipjit's own quantized op (domain `snipjit.int8`), which `passes.float_integer_products` makes of
ONNX Runtime's dynamically quantized linear layers:

    DynamicQuantizedMatMul(x, scale, zero, w) = (clip(round(x / scale) + zero, 0, 255) - zero) @ w

x float32 [..., K]; scale and zero float32 scalars (the activations' DynamicQuantizeLinear parameters,
zero an integer value); w int8 [K, N] (symmetric weights: no zero point). The result is the float32
value of the int32 product MatMulInteger computes (exact below 2^24), before the layer's scaling.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import f32, i8
from ..ir.graph import TensorType
from .registry import Category, OpContext, register

DOMAIN = "snipjit.int8"
META = "int8"   # Node.meta key of a Conv that reads quantized activations and weights (`StaticQuantization`)


def unsigned_zero(zero: int, low: int) -> int:
    """A zero point in uint8's range, which the int8 kernels quantize to: an int8 level moves up by 128
    (clip(round(x/s) + z, -128, 127) + 128 == clip(round(x/s) + z + 128, 0, 255))."""
    return zero + 128 if low < 0 else zero


@dataclass(frozen=True)
class StaticQuantization:
    """What a QDQ model says of a Conv (`passes.mark_quantized_convolutions`): its input is
    DequantizeLinear(QuantizeLinear(x, scale, zero), scale, zero) into [low, high] (per tensor), and its
    weights are int8 times `weight_scales` (one, or one per output channel; no zero point). The int8
    kernels compute it exactly as the float Conv of those values, with integer dot products."""
    scale: float
    zero: int
    low: int
    high: int
    weight_scales: tuple[float, ...]


def _infer(ctx: OpContext) -> list[TensorType]:
    x, scale, zero, w = ctx.in_types
    for i, (t, want) in enumerate(((x, f32), (scale, f32), (zero, f32), (w, i8))):
        if t.dtype != want:
            raise ctx.fail(f"input {i} must be {want}, got {t.dtype}")
    if w.shape is None or len(w.shape) != 2 or x.shape is None or not x.shape:
        raise ctx.fail(f"needs x of rank >= 1 and 2-D weights, got {x.shape} and {w.shape}")
    if isinstance(x.shape[-1], int) and isinstance(w.shape[0], int) and x.shape[-1] != w.shape[0]:
        raise ctx.fail(f"x has {x.shape[-1]} columns but the weights {w.shape[0]} rows")
    return [TensorType(f32, tuple(x.shape[:-1]) + (w.shape[1],))]


@register("DynamicQuantizedMatMul", Category.HEAVY, infer=_infer, inputs=4, domain=DOMAIN)
def dynamic_quantized_matmul(ctx: OpContext, x, scale, zero, w):
    """The centered quantized activations times the int8 weights, exactly (float64), as float32."""
    s, z = np.float32(np.asarray(scale).reshape(-1)[0]), np.float32(np.asarray(zero).reshape(-1)[0])
    with np.errstate(invalid="ignore"):
        q = np.clip(np.nan_to_num(np.round(x / s) + z, nan=0.0), 0, 255) - z
    return np.matmul(q.astype(np.float64), w.astype(np.float64)).astype(np.float32)
