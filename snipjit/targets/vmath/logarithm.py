"""Logarithms and powers: log, log1p, pow, pow_static, sqrt, reciprocal, rsqrt, and the inverse
hyperbolics (asinh, acosh, atanh) built on log1p.

x = 2**e (1 + f) with 1 + f in [√½, √2) read from the bits; log1p(f) by a polynomial; pow takes
log and exp in f64 lanes, rounded once to f32.
"""
from __future__ import annotations

import math

from .vector import Vec, clamp, copysign, fabs, fast_unless, fma, keep_zero, poly, roundeven, sqrt_, where
from .constants import ATANH_D, EXP_D, LN2, LN2_HI, LN2_HI_D, LN2_LO, LN2_LO_D, LOG1P_R, LOG2E, f32_bits
from .registry import register


SQRT_HALF_BITS = f32_bits(math.sqrt(0.5))
MIN_NORMAL_BITS = 0x00800000


def is_normal_positive(x: Vec) -> Vec:
    """x > 0 normal and finite (one unsigned compare of the bits)."""
    return (x.bits() - MIN_NORMAL_BITS).ult(f32_bits(math.inf) - MIN_NORMAL_BITS)


def log_split(x: Vec) -> tuple[Vec, Vec]:
    """x = 2**e * (1 + f) with 1 + f in [√½, √2) and f exact, for x > 0 normal and finite."""
    bits = x.bits() - SQRT_HALF_BITS
    return bits >> 23, ((bits & 0x7FFFFF) + SQRT_HALF_BITS).as_float() - 1.0


def log_split_any(x: Vec) -> tuple[Vec, Vec]:
    """``log_split`` for x > 0 finite, denormals included."""
    tiny = x < 2.0**-126
    e, f = log_split(where(tiny, x * 2.0**23, x))
    return e - where(tiny, e.const(23), 0), f


def log_kernel(e: Vec, f: Vec) -> Vec:
    ef = e.to_float()
    tail = fma(ef, LN2_LO, f * f * poly(f, LOG1P_R))
    return fma(ef, LN2_HI, f + tail)


def log_special(x: Vec, result: Vec) -> Vec:
    """log's values at 0, inf, negatives and NaN."""
    edge = where(x.eq(0.0), result.const(-math.inf), math.nan)
    return where(x > 0.0, where(x.eq(math.inf), math.inf, result), edge)


def log_plus(x: Vec, correction: Vec | None = None) -> Vec:
    """ln(x) + correction for every x, with a fast path for normal positive x."""
    def plus(value: Vec) -> Vec:
        return value if correction is None else value + correction

    fast = plus(log_kernel(*log_split(x)))
    return fast_unless(~is_normal_positive(x), fast,
                        lambda: log_special(x, plus(log_kernel(*log_split_any(x)))))


@register("log")
def log(x: Vec) -> Vec:
    return log_plus(x)


@register("log1p")
def log1p(x: Vec) -> Vec:
    u = x + 1.0
    correction = (x - (u - 1.0)) / u  # what rounding 1 + x lost
    return keep_zero(x, log_plus(u, correction))


def log_double(x: Vec) -> Vec:
    """ln(x) in double precision for f32 x > 0 finite: 2 atanh(s), s = f/(2+f)."""
    e, f = log_split_any(x)
    fd = f.widen()
    s = fd / (fd + 2.0)
    return fma(e.to_float().widen(), LN2, fma(s * s * s, poly(s * s, ATANH_D), s * 2.0))


def exp_double_to_f32(t: Vec) -> Vec:
    """e^t for a double t (clamped to [-110, 100]), rounded once to f32."""
    t = clamp(t, -110.0, 100.0)
    k = roundeven(t * LOG2E)
    r = fma(k, -LN2_LO_D, fma(k, -LN2_HI_D, t))
    scale = ((k.to_int(64) + 1023) << 52).as_float()
    return (poly(r, EXP_D) * scale).narrow()


def is_integer(y: Vec) -> Vec:
    return roundeven(y).eq(y)


@register("pow", arity=2)
def power(x: Vec, y: Vec) -> Vec:
    ax = fabs(x)
    ln = where(ax.eq(0.0), -math.inf, where(ax.eq(math.inf), math.inf, log_double(ax)))
    magnitude = exp_double_to_f32(y.widen() * ln)
    odd = is_integer(y) & ~is_integer(y * 0.5)
    result = where((x.bits() < 0) & odd, -magnitude, magnitude)
    negative_finite = (x < 0.0) & (x > -math.inf)
    result = where(negative_finite & ~is_integer(y), math.nan, result)
    result = where(x.isnan() | y.isnan(), x + y, result)
    result = where(ax.eq(1.0) & fabs(y).eq(math.inf), 1.0, result)
    return where(x.eq(1.0) | y.eq(0.0), 1.0, result)


def integer_power(x: Vec, n: int) -> Vec:
    """x**n for n >= 1 by square-and-multiply."""
    result, square = None, x
    while n:
        if n & 1:
            result = square if result is None else result * square
        n >>= 1
        if n:
            square = square * square
    return result


MAX_MULTIPLIED_EXPONENT = 8  # beyond, repeated rounding would exceed the error budget
MAX_ROOTED_EXPONENT = 4      # quarter exponents up to this: a power, a square and a fourth root multiplied


@register("pow_static")
def pow_static(x: Vec, exponent: float) -> Vec:
    """x**exponent for a compile-time exponent, like numpy's scalar-exponent power."""
    if exponent == 0:
        return x.const(1.0)
    if exponent == 0.5:
        return sqrt_(x)
    if float(exponent).is_integer() and abs(exponent) <= MAX_MULTIPLIED_EXPONENT:
        base = x if exponent > 0 else 1.0 / x
        return integer_power(base, abs(int(exponent)))
    if float(exponent * 4).is_integer() and abs(exponent) <= MAX_ROOTED_EXPONENT:
        return quarter_power(x, exponent)
    return power(x, x.const(exponent))


def quarter_power(x: Vec, exponent: float) -> Vec:
    """x**exponent for a multiple of 1/4 that is not an integer (LRN's beta of 0.75, x**1.5): x**n times a
    square root and a fourth root, instead of a logarithm and an exponential in double precision (at most
    ~3 ulp more rounding). Negative x gives NaN (the roots' NaN); ±0 and -inf give C's pow results."""
    whole, quarters = divmod(int(abs(exponent) * 4), 4)
    root = sqrt_(x)
    roots = root if quarters == 2 else sqrt_(root) if quarters == 1 else root * sqrt_(root)
    if exponent < 0:   # (1/x before the power, as for integers: x**-n would overflow first; the roots do not)
        roots = 1.0 / roots
    result = roots * integer_power(x if exponent > 0 else 1.0 / x, whole) if whole else roots
    at_limits = x.const(0.0 if exponent > 0 else math.inf)   # for ±0 and for -inf
    result = where(x.eq(0.0), at_limits, result)
    return where(x.eq(-math.inf), x.const(math.inf if exponent > 0 else 0.0), result)


@register("sqrt")
def sqrt(x: Vec) -> Vec:
    return sqrt_(x)


@register("reciprocal")
def reciprocal(x: Vec) -> Vec:
    return 1.0 / x


@register("rsqrt")
def rsqrt(x: Vec) -> Vec:
    return 1.0 / sqrt_(x)



HUGE = 2.0**12  # beyond: asinh/acosh(a) = log(2a) = log1p(a - 1) + ln2 to f32 precision


def log_twice(a: Vec, near: Vec) -> Vec:
    """log1p(near) for a <= HUGE, else log(2a); a >= 1 in the far branch."""
    far = a > HUGE
    return log1p(where(far, a - 1.0, near)) + where(far, a.const(LN2), 0.0)


@register("asinh")
def asinh(x: Vec) -> Vec:
    a = fabs(x)
    a2 = a * a
    return copysign(log_twice(a, a + a2 / (sqrt_(a2 + 1.0) + 1.0)), x)


@register("acosh")
def acosh(x: Vec) -> Vec:
    t = x - 1.0
    return where(x >= 1.0, log_twice(x, t + sqrt_(t * (t + 2.0))), math.nan)


@register("atanh")
def atanh(x: Vec) -> Vec:
    a = fabs(x)
    return copysign(log1p(a * 2.0 / (1.0 - a)) * 0.5, x)
