"""Exponentials: exp, expm1, sinh, cosh, and tanh (a rational that shares their helpers).

e^x = 2**k e^r with k = roundeven(x/ln2) read from the low bits of x/ln2 + 1.5 * 2**23, r by
Cody–Waite with a two-part ln2 (k * LN2_HI is exact, so x - k * LN2_HI is the same with or without
FMA), e^r by a polynomial; the fast path adds k to the exponent bits
(results normal), the full path (``exp_finite``) applies 2**k in two factors so that a denormal
result is rounded once.
"""
from __future__ import annotations


from .vector import Vec, clamp, copysign, fabs, fast_unless, fma, keep_nan, keep_zero, poly, poly_even_odd, where
from .constants import EXPM1_Q, EXP_P, LN2, LN2_HI, LN2_LO, LOG2E, TANH_ONE, TANH_P, TANH_Q, f32_bits
from .registry import register


SHIFTER = 1.5 * 2.0**23  # v + SHIFTER rounds v (|v| < 2**22) to an integer held in low bits
SHIFTER_BITS = f32_bits(SHIFTER)
EXP_FAST = 87.0  # |x| <= 87: e^x and 2**k are normal, so k can be added to exponent bits


def round_log2(x: Vec) -> tuple[Vec, Vec]:
    """(k, t): k = roundeven(x / ln2) as a float, and t, whose low significand bits hold k."""
    t = fma(x, LOG2E, SHIFTER)
    return t - SHIFTER, t


def exp_kernel(k: Vec, r_hi: Vec) -> Vec:
    """e^r for r = r_hi - k*LN2_LO in [-ln2/2, ln2/2]."""
    return poly(fma(k, -LN2_LO, r_hi), EXP_P)


def scale_fast(v: Vec | float, t: Vec) -> Vec:
    """v * 2**k for the k held by t, added to v's exponent bits (the result must be normal)."""
    v = v if isinstance(v, Vec) else t.const(v)
    return (v.bits() + (t.bits() << 23)).as_float()


def pow2(k: Vec) -> Vec:
    """2**k as f32 for int32 k in [-126, 127]."""
    return ((k + 127) << 23).as_float()


def ldexp(v: Vec, k: Vec) -> Vec:
    """v * 2**k for k in [-252, 254] with one rounding (two factors keep each normal)."""
    half = k >> 1
    return v * pow2(half) * pow2(k - half)


def exp_fast(x: Vec) -> Vec:
    """e^x for |x| <= EXP_FAST; other lanes (NaN too) get garbage."""
    k, t = round_log2(x)
    return scale_fast(exp_kernel(k, fma(k, -LN2_HI, x)), t)


def exp_finite(x: Vec, log2_scale: int = 0) -> Vec:
    """e^x * 2**log2_scale for any x, rounded once even when denormal; NaN gives 0."""
    x = clamp(x, -(151 + log2_scale) * LN2, (129 - log2_scale) * LN2)  # beyond: 0 or inf
    k, t = round_log2(x)
    return ldexp(exp_kernel(k, fma(k, -LN2_HI, x)), t.bits() - (SHIFTER_BITS - log2_scale))


def expm1_fast(x: Vec) -> Vec:
    """e^x - 1 for x <= EXP_FAST, NaN kept: 2**k * q + (2**k - 1), q = e^r - 1, one rounding."""
    x = where(x < -EXP_FAST, -EXP_FAST, x)  # e^x - 1 rounds to -1 already
    k, t = round_log2(x)
    r = fma(k, -LN2_LO, fma(k, -LN2_HI, x))
    q = fma(r * r, poly(r, EXPM1_Q), r)
    scale = scale_fast(1.0, t)
    return fma(scale, q, scale - 1.0)


def beyond_exp_fast(x: Vec) -> Vec:
    """Lanes the fast paths of exp-based ops leave to the full one: x > EXP_FAST or NaN."""
    return ~(x <= EXP_FAST)


EXP_ZERO = -104.0  # e^x rounds to 0 below: masked softmax logits (-1e4, -inf) stay fast


@register("exp")
def exp(x: Vec) -> Vec:
    zero = x < EXP_ZERO
    fast = where(zero, 0.0, exp_fast(x))
    slow = ~(fabs(x) <= EXP_FAST) & ~zero
    return fast_unless(slow, fast, lambda: keep_nan(x, exp_finite(x)))


@register("expm1")
def expm1(x: Vec) -> Vec:
    fast = keep_zero(x, expm1_fast(x))
    return fast_unless(beyond_exp_fast(x), fast, lambda: keep_nan(x, exp_finite(x)))


def half_exp_full(x: Vec) -> Vec:
    """e^|x| / 2, which is sinh and cosh to f32 precision where |x| > EXP_FAST."""
    return keep_nan(x, exp_finite(fabs(x), -1))


@register("sinh")
def sinh(x: Vec) -> Vec:
    h = expm1_fast(fabs(x)) * 0.5  # (e^a - 1)/2; sinh = h + h/(2h + 1)
    fast = copysign(h + h / (h * 2.0 + 1.0), x)
    return fast_unless(beyond_exp_fast(fabs(x)), fast, lambda: copysign(half_exp_full(x), x))


@register("cosh")
def cosh(x: Vec) -> Vec:
    g = fma(expm1_fast(fabs(x)), 0.5, 0.5)  # e^a / 2
    return fast_unless(beyond_exp_fast(fabs(x)), g + 0.25 / g, lambda: half_exp_full(x))


def odd_rational(x: Vec, p: tuple[float, ...], q: tuple[float, ...], one: float) -> Vec:
    """sign(x) * a P(a^2)/Q(a^2) for a = |x| <= one, sign(x) beyond (tanh, erf); NaN kept."""
    a = fabs(x)
    u = a * a
    value = a * poly_even_odd(u, p) / poly(u, q)  # NaN where u = inf, but replaced below
    return copysign(where(a > one, 1.0, value), x)


@register("tanh")
def tanh(x: Vec) -> Vec:
    return odd_rational(x, TANH_P, TANH_Q, TANH_ONE)
