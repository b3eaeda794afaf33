"""Piecewise activations and simple functions: abs, neg, relu and its variants, elu, selu, celu,
clip, hard_sigmoid, hard_swish, softsign, rounding, sign, and Gelu's choice of form.
"""
from __future__ import annotations


from .vector import Vec, clamp, fabs, keep_nan, mul_add_exact, roundeven, where
from .exponential import expm1
from .gates import TAIL, gated, gelu_erf, gelu_tanh
from .registry import register


@register("abs")
def absolute(x: Vec) -> Vec:
    return fabs(x)


@register("neg")
def neg(x: Vec) -> Vec:
    return -x


@register("relu")
def relu(x: Vec) -> Vec:
    return where(x <= 0.0, 0.0, x)   # max(x, 0): -0 gives +0, NaN stays NaN


@register("leaky_relu")
def leaky_relu(x: Vec, alpha: float = 0.01) -> Vec:
    return where(x < 0.0, x * alpha, x)


@register("elu")
def elu(x: Vec, alpha: float = 1.0) -> Vec:
    return where(x > 0.0, x, expm1(where(x > 0.0, 0.0, x)) * alpha)


@register("selu")
def selu(x: Vec, alpha: float = 1.67326319217681884765625,
         gamma: float = 1.05070102214813232421875) -> Vec:
    return elu(x, alpha) * gamma


@register("clip")
def clip(x: Vec, lo: float, hi: float) -> Vec:
    return where(x < lo, lo, where(x > hi, hi, x))


@register("hard_sigmoid")
def hard_sigmoid(x: Vec, alpha: float = 0.2, beta: float = 0.5) -> Vec:
    return clip(mul_add_exact(x, alpha, beta), 0.0, 1.0)   # exact near alpha*x + beta = 0


@register("hard_swish")
def hard_swish(x: Vec) -> Vec:
    """x * clip(x/6 + 1/2, 0, 1) with the gate as (x + 3) * (1/6): the sum is exact near -3, where
    x/6 + 1/2 would cancel, and the rounding of 1/6 stays relative."""
    return gated(x, clamp((x + 3.0) * (1.0 / 6.0), 0.0, 1.0) * 2.0**TAIL)


@register("round_half_even")
def round_half_even(x: Vec) -> Vec:
    return roundeven(x)


@register("sign")
def sign(x: Vec) -> Vec:
    """-1, 0 or 1; NaN stays NaN and -0 becomes 0, like numpy."""
    return keep_nan(x, where(x > 0.0, 1.0, where(x < 0.0, x.const(-1.0), 0.0)))


@register("celu")
def celu(x: Vec, alpha: float = 1.0) -> Vec:
    """max(0, x) + min(0, alpha (e^(x/alpha) - 1)), as ONNX defines it (so -0 gives +0)."""
    return where(x > 0.0, x, expm1(x / alpha) * alpha) + 0.0


@register("softsign")
def softsign(x: Vec) -> Vec:
    return x / (fabs(x) + 1.0)


@register("thresholded_relu")
def thresholded_relu(x: Vec, alpha: float = 1.0) -> Vec:
    return where(x > alpha, x, 0.0)


@register("prelu", arity=2)
def prelu(x: Vec, slope: Vec) -> Vec:
    return where(x < 0.0, x * slope, x)


@register("gelu")
def gelu(x: Vec, approximate: str = "none") -> Vec:
    """ONNX Gelu: the erf form, or with approximate="tanh" the tanh form."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return gelu_tanh(x) if approximate == "tanh" else gelu_erf(x)
