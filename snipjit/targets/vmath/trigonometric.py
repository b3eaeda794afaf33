"""Trigonometric functions: sin, cos, tan (f64 after an exact reduction modulo pi/2), atan, asin,
acos.

The reduction is Cody–Waite with a three-part pi/2 below 2**20 (33-bit parts: every k * part is
exact in double, so each step rounds once with or without FMA) and Payne–Hanek on 24-bit chunks
of 2/pi above, in a branch that only runs when a lane needs it; the remainder rounded to f32
keeps sin and cos relatively accurate.
"""
from __future__ import annotations

import math

from .vector import Vec, branch_if_any, copysign, fabs, fma, keep_zero, poly, roundeven, sqrt_, two_sum, where
from .constants import (ASIN_P, ATAN_P, CODY_WAITE_LIMIT, COS_P, PI_HI_F, PI_LO_F, PIO2, PIO2_HI_F, PIO2_LO_F,
                        PIO2_PARTS, PIO4_HI_F, PIO4_LO_F, SIN_P, TWO_OVER_PI_CHUNKS)
from .registry import register


def reduce_cody_waite(xd: Vec) -> tuple[Vec, Vec]:
    k = roundeven(xd * (2 / math.pi))
    r = xd
    for part in PIO2_PARTS:
        r = fma(k, -part, r)
    return k.to_int(), r


def reduce_payne_hanek(xd: Vec) -> tuple[Vec, Vec]:
    """x * 2/pi mod 4 summed exactly from products with 24-bit chunks of 2/pi."""
    hi, lo = xd.const(0.0), xd.const(0.0)
    for chunk in TWO_OVER_PI_CHUNKS:
        p = xd * chunk  # exact: 24 x 24 significand bits
        hi, err = two_sum(hi, p - roundeven(p * 0.25) * 4.0)
        lo = lo + err
    k = roundeven(hi)
    return k.to_int(), ((hi - k) + lo) * PIO2


def sin_cos(x: Vec) -> tuple[Vec, Vec]:
    """(sin x, cos x) for finite x (non-finite lanes give garbage): the reduction is exact in
    double, its remainder r (|r| <= pi/4) rounded to f32 keeps sin(r) relatively accurate."""
    xd, zero = x.widen(), x.widen().const(0.0)
    q, r = reduce_cody_waite(where(fabs(x) < CODY_WAITE_LIMIT, xd, zero))
    far = (fabs(x) >= CODY_WAITE_LIMIT) & (fabs(x) < math.inf)
    q, r = branch_if_any(far, lambda: reduce_payne_hanek(where(far, xd, zero)), (q, r))
    r = r.narrow()
    r2 = r * r
    s = fma(r * r2, poly(r2, SIN_P), r)
    c = fma(r2 * r2, poly(r2, COS_P), fma(r2, -0.5, 1.0))

    def quadrant(q: Vec) -> Vec:  # [s, c, -s, -c][q mod 4]
        value = where((q & 1).ne(0), c, s)
        return where((q & 2).ne(0), -value, value)

    return quadrant(q), quadrant(q + 1)


def trig(x: Vec, value: Vec) -> Vec:
    return where(fabs(x) < math.inf, value, math.nan)


@register("sin")
def sin(x: Vec) -> Vec:
    return keep_zero(x, trig(x, sin_cos(x)[0]))


@register("cos")
def cos(x: Vec) -> Vec:
    return trig(x, sin_cos(x)[1])


@register("tan")
def tan(x: Vec) -> Vec:
    s, c = sin_cos(x)
    return keep_zero(x, trig(x, s / c))


def asin_kernel(s: Vec, z: Vec) -> Vec:
    """asin(s) for |s| <= 1/2, z = s*s."""
    return fma(s * z, poly(z, ASIN_P), s)


@register("atan")
def atan(x: Vec) -> Vec:
    a = fabs(x)
    big = a > 2.414213562373095  # tan(3pi/8): atan(a) = pi/2 + atan(-1/a)
    mid = a > 0.41421356237309503  # tan(pi/8): atan(a) = pi/4 + atan((a-1)/(a+1))
    r = where(big, -1.0, where(mid, a - 1.0, a)) / where(big, a, where(mid, a + 1.0, 1.0))
    offset_hi = where(big, PIO2_HI_F, where(mid, a.const(PIO4_HI_F), 0.0))
    offset_lo = where(big, PIO2_LO_F, where(mid, a.const(PIO4_LO_F), 0.0))
    z = r * r
    return copysign(offset_hi + fma(r * z, poly(z, ATAN_P), r + offset_lo), x)


@register("asin")
def asin(x: Vec) -> Vec:
    # |x| > 1/2: asin(a) = pi/2 - 2 asin(sqrt((1-a)/2))
    a = fabs(x)
    big = a > 0.5
    z = where(big, (1.0 - a) * 0.5, a * a)
    k = asin_kernel(where(big, sqrt_(z), a), z)
    return copysign(where(big, PIO2_HI_F - (k * 2.0 - PIO2_LO_F), k), x)


@register("acos")
def acos(x: Vec) -> Vec:
    # |x| <= 1/2: pi/2 - asin(x); x > 1/2: 2 asin(sqrt((1-x)/2)); x < -1/2: pi - that
    big = fabs(x) > 0.5
    z = where(big, (1.0 - fabs(x)) * 0.5, x * x)
    k = asin_kernel(where(big, sqrt_(z), x), z)
    far = where(x > 0.0, k * 2.0, PI_HI_F - (k * 2.0 - PI_LO_F))
    return where(big, far, PIO2_HI_F - (k - PIO2_LO_F))
