"""Sigmoid-shaped functions and the activations gated by them: sigmoid, silu, softplus, mish,
gelu (tanh and erf forms), erf and erfc.

Fast paths take the range where activations live and whose gates are normal numbers; full paths
(``fast_unless``) handle every float, with denormal gates carried scaled by 2**TAIL so that the
product with x is rounded once. Gated activations give -0 at x = -inf, their limit.
"""
from __future__ import annotations

import math
from typing import Callable

from .vector import (Vec, clamp, fabs, fast_unless, fma, keep_nan, limit, mul_add_exact, mul_add_pair, poly, split,
                     two_product, where)
from .constants import ERF_ONE, ERF_P, ERF_Q, LN2_HI, LOG1P_U, MILLS_P, MILLS_Q, f32
from .exponential import EXP_FAST, exp_fast, exp_finite, exp_kernel, odd_rational, round_log2, scale_fast
from .registry import register


# Sigmoid-like ops: the fast paths take x >= -EXP_FAST, where gates are normal numbers. Below,
# gates reach denormals (sigmoid of -90, erfc of 10): the full paths carry them scaled by
# 2**TAIL so that the product with x is rounded once, not once as a denormal gate and again.
TAIL = 32
UNTAIL = 2.0**-TAIL


def below_fast(x: Vec, lowest: float) -> Vec:
    """Lanes a fast path valid for x >= lowest leaves to the full one (NaN included)."""
    return ~(x >= lowest)


def one_plus_exp_minus(x: Vec) -> Vec:
    """1 + e^-x for x >= -EXP_FAST."""
    return 1.0 + exp_fast(-limit(x, EXP_FAST))


def logistic_scaled(z_hi: Vec, z_lo: Vec | None) -> Vec:
    """2**TAIL / (1 + e^-z) for z = z_hi + z_lo, without overflow or cancellation."""
    e = exp_finite(-fabs(z_hi), TAIL)  # e^-|z| * 2**TAIL
    if z_lo is not None:
        e = fma(e, where(z_hi < 0.0, z_lo, -z_lo), e)  # e^-|z_lo| ~ 1 -/+ z_lo
    return where(z_hi >= 0.0, 2.0**TAIL, e) / fma(e, UNTAIL, 1.0)


def gated(x: Vec, gate_scaled: Vec) -> Vec:
    """x * gate(x) given gate * 2**TAIL, for gates that tend to 0 at -inf: there the result is the
    limit -0, not the -inf * 0 = NaN of the textbook formula."""
    product = where(x < 0.0, x * gate_scaled * UNTAIL, x * (gate_scaled * UNTAIL))
    return where(x.eq(-math.inf), -0.0, product)


@register("sigmoid")
def sigmoid(x: Vec) -> Vec:
    return fast_unless(below_fast(x, -EXP_FAST), 1.0 / one_plus_exp_minus(x),
                        lambda: keep_nan(x, logistic_scaled(x, None) * UNTAIL))


@register("silu")
def silu(x: Vec) -> Vec:
    return fast_unless(below_fast(x, -EXP_FAST), x / one_plus_exp_minus(x),
                        lambda: gated(x, logistic_scaled(x, None)))


@register("softplus")
def softplus(x: Vec) -> Vec:
    # max(x, 0) + log1p(e^-|x|); below -87 that is e^x (log1p(u) rounds to u).
    u = exp_fast(-limit(fabs(x), EXP_FAST))
    fast = where(x > 0.0, x, 0.0) + u * poly(u, LOG1P_U)
    return fast_unless(below_fast(x, -EXP_FAST), fast, lambda: keep_nan(x, exp_finite(x)))


MISH_ONE = 9.0  # tanh(softplus(x)) rounds to 1 beyond


@register("mish")
def mish(x: Vec) -> Vec:
    # tanh(log(1 + e)) = n/(n + 2) with n = e(e + 2)
    e = exp_fast(limit(x, MISH_ONE))
    n = e * (e + 2.0)
    fast = x * (n / (n + 2.0))

    def full() -> Vec:
        e = exp_finite(limit(x, MISH_ONE), TAIL)
        n = e * fma(e, UNTAIL, 2.0)  # scaled by 2**TAIL
        return gated(x, n / fma(n, UNTAIL, 2.0))

    return fast_unless(below_fast(x, -EXP_FAST), fast, full)


GELU_C1 = f32(2 * math.sqrt(2 / math.pi))  # 0.5x(1 + tanh(u)) = x sigmoid(z), z = x(C1 + C3 x^2)
GELU_C1_LO = 2 * math.sqrt(2 / math.pi) - GELU_C1
GELU_C3 = 2 * 0.044715 * math.sqrt(2 / math.pi)
GELU_TANH_FAST = -3.0  # below, the rounding of x^2 would cost over 1e-7 in z
GELU_TANH_ONE = 9.0  # the gate rounds to 1 beyond


@register("gelu_tanh")
def gelu_tanh(x: Vec) -> Vec:
    # e^-z with an absolute error of z below 2e-7: the reduction takes x*w unrounded and adds x*dw
    # for the rounding of w and of C1 (C1 - w is exact while w <= 2 C1).
    xc = limit(x, GELU_TANH_ONE)
    x2 = xc * xc
    w, dw = mul_add_pair(x2, GELU_C3, GELU_C1, GELU_C1_LO)
    k, t = round_log2(-(xc * w))
    r_hi = fma(xc, -dw, mul_add_exact(xc, -w, k * -LN2_HI))
    e = scale_fast(exp_kernel(k, r_hi), t)
    fast = x / (1.0 + e)

    def full() -> Vec:
        xd = x.widen()  # z in double, exponentiated as e^hi * (1 + lo)
        z = xd * fma(xd * xd, GELU_C3, GELU_C1 + GELU_C1_LO)
        return gated(x, logistic_scaled(*split(clamp(z, -200.0, 200.0))))

    return fast_unless(below_fast(x, GELU_TANH_FAST), fast, full)



@register("erf")
def erf(x: Vec) -> Vec:
    return odd_rational(x, ERF_P, ERF_Q, ERF_ONE)


def scaled_square(y: Vec, scale: float) -> tuple[Vec, Vec]:
    """hi + lo == scale * y*y exactly, for a power of two ``scale``."""
    return two_product(y, y * scale)


def normal_tail(y: Vec, exponent: tuple[Vec, Vec], exp: Callable[[Vec], Vec]) -> Vec:
    """Phi(-y) = e^(-y^2/2) * Mills(y) for y in [0, 15], given -y^2/2 = hi + lo exactly."""
    hi, lo = exponent
    e = exp(hi)
    return fma(e, lo, e) * (poly(y, MILLS_P) / poly(y, MILLS_Q))


def exp_scaled(x: Vec) -> Vec:
    return exp_finite(x, TAIL)


ERFC_FAST = 9.0  # erfc(9) ~ 4e-37 is still normal
ERFC_ZERO = 10.5  # erfc rounds to 0 beyond


def erfc_tail(a: Vec, exp: Callable[[Vec], Vec]) -> Vec:
    """erfc(a) = 2 Phi(-a√2) for a >= 0."""
    return normal_tail(a * math.sqrt(2.0), scaled_square(a, -1.0), exp) * 2.0


@register("erfc")
def erfc(x: Vec) -> Vec:
    tail = erfc_tail(limit(fabs(x), ERFC_FAST), exp_fast)
    return fast_unless(~(x <= ERFC_FAST), where(x < 0.0, 2.0 - tail, tail),
                        lambda: erfc_tail(limit(x, ERFC_ZERO), exp_scaled) * UNTAIL)


GELU_ERF_FAST = 10.0  # Phi(-10) ~ 8e-24 is far from denormals
GELU_ERF_ZERO = 15.0  # x * Phi(x) rounds to 0 below -15, and the gate to 1 above 15


@register("gelu_erf")
def gelu_erf(x: Vec) -> Vec:
    y = fabs(x)
    tail = normal_tail(y, scaled_square(y, -0.5), exp_fast)  # Phi(-|x|)
    fast = x * where(x < 0.0, tail, 1.0 - tail)

    def full() -> Vec:
        y = limit(fabs(x), GELU_ERF_ZERO)
        tail = normal_tail(y, scaled_square(y, -0.5), exp_scaled)
        tail = where(fabs(x) > GELU_ERF_ZERO, 0.0, tail)  # x * tail underflows; x might be huge
        return gated(x, where(x < 0.0, tail, fma(tail, -UNTAIL, 1.0) * 2.0**TAIL))

    return fast_unless(~(y <= GELU_ERF_FAST), fast, full)
