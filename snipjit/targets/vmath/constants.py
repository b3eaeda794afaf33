"""Constants of the math library: split forms of ln2 and pi/2, chunks of 2/pi, and the
polynomial coefficients (order c0, c1, ...; rationals are P/Q with Q's constant term 1).

The f32 kernels are near-minimax fits of our own (Lawson's iteratively reweighted least squares,
linearised for rationals, rounded to f32); pi comes from Machin's formula in integers.
"""
from __future__ import annotations

import math
import struct



def f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def truncate(value: float, bits: int) -> float:
    """``value`` with only its leading ``bits`` significand bits kept."""
    mantissa, exponent = math.frexp(value)
    return math.ldexp(math.floor(mantissa * 2.0**bits), exponent - bits)


def pi_scaled(bits: int) -> int:
    """floor(pi * 2**bits), from Machin's formula pi = 16 atan(1/5) - 4 atan(1/239)."""
    one = 1 << (bits + 32)

    def atan_inverse(n: int) -> int:
        total, power, k = 0, one // n, 0
        while power:
            total += (-1) ** k * (power // (2 * k + 1))
            power //= n * n
            k += 1
        return total

    return (16 * atan_inverse(5) - 4 * atan_inverse(239)) >> 32


def bit_fields(scaled: int, frac_bits: int, widths: tuple[int, ...]) -> tuple[float, ...]:
    """Consecutive bit fields, from the leading bit, of scaled * 2**-frac_bits (exact doubles)."""
    fields, shift = [], scaled.bit_length()
    for width in widths:
        shift -= width
        fields.append(math.ldexp((scaled >> shift) & ((1 << width) - 1), shift - frac_bits))
    return tuple(fields)


LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
LN2_HI = 0.693359375  # 9 significant bits: k * LN2_HI is exact for |k| < 2**15
LN2_LO = LN2 - LN2_HI
LN2_HI_D = truncate(LN2, 32)  # the same split for double arithmetic, |k| < 2**21
LN2_LO_D = LN2 - LN2_HI_D
PIO2 = math.pi / 2
PIO2_HI_F = f32(PIO2)
PIO2_LO_F = PIO2 - PIO2_HI_F
PIO4_HI_F = f32(math.pi / 4)
PIO4_LO_F = math.pi / 4 - PIO4_HI_F
PI_HI_F = f32(math.pi)
PI_LO_F = math.pi - PI_HI_F

PI_BITS = 300
PI_SCALED = pi_scaled(PI_BITS)
PIO2_PARTS = bit_fields(PI_SCALED, PI_BITS + 1, (33, 33, 53))  # Cody–Waite split of pi/2
TWO_OVER_PI_CHUNKS = bit_fields((1 << (2 * PI_BITS + 1)) // PI_SCALED, PI_BITS, (24,) * 10)
CODY_WAITE_LIMIT = 2.0**20  # |k| < 2**20 keeps k * part exact for 33-bit parts

# Kernels; coefficient order is c0, c1, ... (near-minimax, see module docstring). Rationals are
# P/Q with Q's constant term 1.
EXP_P = (1.0, 0.9999997019767761, 0.4999915063381195, 0.16667649149894714,
          0.041897837072610855, 0.008289573714137077)  # e^r, |r| <= ln2/2
EXPM1_Q = (0.4999999701976776, 0.1666654348373413, 0.04166720062494278,
            0.008366511203348637, 0.0013882509665563703)  # (e^r-1-r)/r^2, |r| <= ln2/2
# (log1p(f) - f)/f^2, f in [√½-1, √2-1]
LOG1P_R = (-0.49999991059303284, 0.3333394527435303, -0.25001776218414307,
            0.19962237775325775, -0.16570305824279785, 0.14916366338729858,
            -0.1430782973766327, 0.08738933503627777)
# log1p(u)/u, u in [0, 1]
LOG1P_U = (1.0, -0.49999648332595825, 0.33321329951286316, -0.24857217073440552,
            0.1915384829044342, -0.13754189014434814, 0.07920888811349869,
            -0.030068378895521164, 0.005365455988794565)
# tanh(a)/a and erf(a)/a as rationals in a^2 up to where f32 rounds them to 1
TANH_ONE = 8.0  # 1 - tanh(8) < 4 ulp
TANH_P = (1.0, 0.1344449520111084, 0.003571593901142478, 2.189459337387234e-05,
           1.5230318339831683e-08)
TANH_Q = (1.0, 0.46777820587158203, 0.026164427399635315, 0.0003411285288166255,
           8.522407028976886e-07)
ERF_ONE = 3.92  # 1 - erf(3.92) < 1/2 ulp
ERF_P = (1.1283791065216064, 0.19992676377296448, 0.05057362839579582, 0.003701704554259777,
          0.0001418526953784749, -1.957841732291854e-06, 1.992415299412187e-08)
ERF_Q = (1.0, 0.510512113571167, 0.11499933898448944, 0.01435339730232954,
          0.0009560619364492595)
# Mills ratio of the normal distribution: Phi(-y) e^(y^2/2), y in [0, 15] (a rational in y)
MILLS_P = (0.5, 0.4392831325531006, 0.1839689016342163, 0.04088104888796806,
            0.004153218120336533)
MILLS_Q = (1.0, 1.6764512062072754, 1.2055473327636719, 0.47140809893608093,
            0.1024797111749649, 0.010410462506115437)
ATAN_P = (-0.33333316445350647, 0.19998471438884735, -0.14243531227111816,
           0.10593792796134949, -0.06078165024518967)  # (atan(r)-r)/r^3 in r^2, |r| <= tan(pi/8)
ASIN_P = (0.16666752099990845, 0.07495297491550446, 0.04547044634819031,
           0.0241791270673275, 0.042167022824287415)  # (asin(s)-s)/s^3 in s^2, s <= 1/2
SIN_P = (-0.16666655242443085, 0.008332189172506332,
          -0.00019518291810527444)  # (sin r - r)/r^3 in r^2, |r| <= pi/4
COS_P = (0.04166664555668831, -0.0013887309469282627,
          2.4432327336398885e-05)  # (cos r - 1 + r^2/2)/r^4 in r^2, |r| <= pi/4
# Taylor series for the double-precision kernels of pow
EXP_D = tuple(1 / math.factorial(i) for i in range(8))  # e^r, truncation error < 6e-9
ATANH_D = tuple(2.0 / (2 * i + 3) for i in range(6))  # (log1p(f) - 2s)/s^3 in s^2, s = f/(2+f)
