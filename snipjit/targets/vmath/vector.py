"""The abstract vector builder every math function is written against, and ``Vec``, its values.

A math function (exp, erf, ...) is Python that composes a small set of lane-wise operations on
``Vec`` values; a renderer (LLVM IR in ``targets/llvm/vmath.py``, C in ``targets/c/vmath_render.py``)
implements ``VectorBuilder`` and so turns the same composition into its own code. The set is
kept small so that every renderer can give each operation the same IEEE result:

    binary      add sub mul div (floats and ints), and or xor (ints and masks), shl ashr (ints)
    unary       neg, not (ints and masks), fabs sqrt roundeven (floats)
    fma         a*b + c rounded once (asked for only on ISA levels with an FMA instruction)
    copysign    magnitude of a, sign of b
    compare     < <= > >= == != (floats: ordered, false with a NaN), uno (either is NaN),
                ult (unsigned, ints)
    select      mask ? a : b
    convert     bitcast f32<->i32 and f64<->i64, fptosi, sitofp, fpext (f32->f64), fptrunc
    branch      ``branch_if_any``: a computation run only when some lane of a mask needs it

Value kinds: f32, i32, f64, i64, and the masks m32 / m64 that compares of 32-/64-bit lanes give.
Nothing here rounds differently from IEEE arithmetic on the lane type, and no operation is left
for a compiler to contract: renderers keep a*b + c unfused unless ``fma`` asks.

FMA: a builder is made for one ISA level and knows whether it has an FMA instruction
(``fused_multiply_add``); without one, a fused a*b + c would become a slow library call. The
library never asks the builder for ``fma`` directly but through the helpers here, the only place
the flag is read: ``fma`` (a*b + c, fused where the level has FMA, else rounded twice: for Horner
steps and corrections), ``two_product`` (a*b = p + e exactly: one FMA, or Dekker's product of
12-bit halves), ``mul_add_exact`` (a*b + c with the product exact: one FMA, or f64 lanes,
correctly rounded where the sum cancels, as in Cody–Waite reductions and zero crossings) and
``mul_add_pair`` (a*b + c as a sum and its rounding error). On FMA levels they emit exactly the
FMAs the algorithms were written with.
"""
from __future__ import annotations

import math
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

Handle = Any   # a renderer's value: an llvmlite value, a C expression, ...

MASK_OF = {"f32": "m32", "i32": "m32", "f64": "m64", "i64": "m64", "m32": "m32", "m64": "m64"}
BITS_OF = {"f32": "i32", "f64": "i64"}
FLOAT_OF = {"i32": "f32", "i64": "f64"}


class VectorBuilder(ABC):
    """Emits lane-wise operations on vectors of ``lanes`` lanes for one renderer and ISA level."""

    fused_multiply_add: bool = True   # the level has an FMA instruction (renderers set it per level)

    @abstractmethod
    def constant(self, kind: str, number: float | int) -> Handle: ...

    @abstractmethod
    def binary(self, op: str, kind: str, a: Handle, b: Handle) -> Handle: ...

    @abstractmethod
    def unary(self, op: str, kind: str, a: Handle) -> Handle: ...

    @abstractmethod
    def fma(self, kind: str, a: Handle, b: Handle, c: Handle) -> Handle: ...

    @abstractmethod
    def copysign(self, kind: str, magnitude: Handle, sign: Handle) -> Handle: ...

    @abstractmethod
    def compare(self, op: str, kind: str, a: Handle, b: Handle) -> Handle: ...

    @abstractmethod
    def select(self, kind: str, mask: Handle, a: Handle, b: Handle) -> Handle: ...

    @abstractmethod
    def convert(self, op: str, source: str, target: str, a: Handle) -> Handle: ...

    @abstractmethod
    def branch_if_any(self, mask: Handle, compute: Callable[[], list[Handle]], defaults: list[Handle],
                      kinds: list[str]) -> list[Handle]:
        """Per lane ``mask ? compute()[i] : defaults[i]``; ``compute`` only runs when some lane of
        ``mask`` (an m32 or m64) is set. ``compute`` returns values already selected by ``mask``."""


@dataclass(frozen=True, eq=False)
class Vec:
    """A vector value of one kind; Python numbers on the other side of an operator are splatted."""

    b: VectorBuilder
    value: Handle
    kind: str

    @property
    def is_float(self) -> bool:
        return self.kind in ("f32", "f64")

    def const(self, number: float | int) -> Vec:
        return Vec(self.b, self.b.constant(self.kind, number), self.kind)

    def _raw(self, other: Vec | float | int) -> Handle:
        if isinstance(other, Vec):
            if other.kind != self.kind:
                raise TypeError(f"vector math mixes {self.kind} and {other.kind}")
            return other.value
        return self.b.constant(self.kind, other)

    def _binary(self, op: str, other, swap: bool = False) -> Vec:
        lhs, rhs = self.value, self._raw(other)
        if swap:
            lhs, rhs = rhs, lhs
        return Vec(self.b, self.b.binary(op, self.kind, lhs, rhs), self.kind)

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, swap=True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, swap=True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, swap=True)
    def __truediv__(self, o): return self._binary("div", o)
    def __rtruediv__(self, o): return self._binary("div", o, swap=True)
    def __and__(self, o): return self._binary("and", o)
    def __or__(self, o): return self._binary("or", o)
    def __lshift__(self, o): return self._binary("shl", o)
    def __rshift__(self, o): return self._binary("ashr", o)  # arithmetic

    def _unary(self, op: str) -> Vec:
        return Vec(self.b, self.b.unary(op, self.kind, self.value), self.kind)

    def __neg__(self) -> Vec:
        return self._unary("neg")

    def __invert__(self) -> Vec:
        return self._unary("not")

    def _compare(self, op: str, other) -> Vec:
        return Vec(self.b, self.b.compare(op, self.kind, self.value, self._raw(other)), MASK_OF[self.kind])

    def __lt__(self, o): return self._compare("<", o)
    def __le__(self, o): return self._compare("<=", o)
    def __gt__(self, o): return self._compare(">", o)
    def __ge__(self, o): return self._compare(">=", o)
    def eq(self, o) -> Vec: return self._compare("==", o)
    def ne(self, o) -> Vec: return self._compare("!=", o)

    def ult(self, other) -> Vec:
        """Unsigned integer less-than."""
        return self._compare("ult", other)

    def isnan(self) -> Vec:
        return Vec(self.b, self.b.compare("uno", self.kind, self.value, self.value), MASK_OF[self.kind])

    def _convert(self, op: str, target: str) -> Vec:
        return Vec(self.b, self.b.convert(op, self.kind, target, self.value), target)

    def bits(self) -> Vec:
        """Reinterpret f32/f64 lanes as i32/i64."""
        return self._convert("bitcast", BITS_OF[self.kind])

    def as_float(self) -> Vec:
        """Reinterpret i32/i64 lanes as f32/f64."""
        return self._convert("bitcast", FLOAT_OF[self.kind])

    def to_int(self, width: int = 32) -> Vec:
        """Convert integral-valued float lanes (must be in range) to integers."""
        return self._convert("fptosi", f"i{width}")

    def to_float(self) -> Vec:
        return self._convert("sitofp", FLOAT_OF[self.kind])

    def widen(self) -> Vec:
        return self._convert("fpext", "f64")

    def narrow(self) -> Vec:
        return self._convert("fptrunc", "f32")


def fma(a: Vec, b: Vec | float, c: Vec | float) -> Vec:
    """a*b + c, fused where the ISA level has FMA, else rounded twice (an algorithm that needs the
    product exact takes ``mul_add_exact`` or ``two_product``)."""
    if not a.b.fused_multiply_add:
        return a * b + c
    return Vec(a.b, a.b.fma(a.kind, a.value, a._raw(b), a._raw(c)), a.kind)


HALF_BITS = 12   # an f32 significand (24 bits) as two halves of 12: their products are exact


def split_halves(a: Vec | float) -> tuple[Vec | float, Vec | float]:
    """f32 a = hi + lo exactly, each with at most 12 significand bits (a finite): hi is a with its
    low 12 bits cleared (Dekker's split, without Veltkamp's overflow for large a)."""
    if isinstance(a, Vec):
        hi = (a.bits() & -(1 << HALF_BITS)).as_float()
        return hi, a - hi
    a = struct.unpack("<f", struct.pack("<f", a))[0]   # the f32 constant the renderers emit
    mantissa, exponent = math.frexp(a)
    hi = math.ldexp(math.trunc(mantissa * 2.0**HALF_BITS), exponent - HALF_BITS)
    return hi, a - hi


def two_product(a: Vec, b: Vec | float) -> tuple[Vec, Vec]:
    """(p, e) with p = fl(a*b) and p + e == a*b exactly (f32, finite products, no underflow)."""
    p = a * b
    if a.b.fused_multiply_add:
        return p, fma(a, b, -p)
    if a.kind != "f32":
        raise TypeError(f"two_product without FMA splits f32 lanes, not {a.kind}")
    (a_hi, a_lo), (b_hi, b_lo) = split_halves(a), split_halves(b)
    return p, ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def mul_add_exact(a: Vec, b: Vec | float, c: Vec | float) -> Vec:
    """f32 a*b + c with the product exact: one FMA, or without one in f64 lanes, where the product
    of two f32 is exact: the FMA's bits but where the f64 sum lies within 2**-53 of a boundary
    between two f32 roundings (never where the sum cancels: Cody–Waite steps, zero crossings)."""
    if a.b.fused_multiply_add:
        return fma(a, b, c)
    return (a.widen() * _wide(a, b) + _wide(a, c)).narrow()


def _wide(like: Vec, value: Vec | float) -> Vec:
    """An f32 operand (a Vec or a constant, rounded to f32 as renderers round constants) in f64 lanes."""
    return value.widen() if isinstance(value, Vec) else like.const(value).widen()


def mul_add_pair(a: Vec, b: Vec | float, c: float, c_low: float | None = None) -> tuple[Vec, Vec]:
    """(s, e) with s ~ a*b + c and e ~ a*b + c + c_low - s to f32 precision, for c - s exact (s
    within a factor 2 of c): one FMA for s and one for its error, or a two-product."""
    if a.b.fused_multiply_add:
        s = fma(a, b, c)
        return s, fma(a, b, (c - s) if c_low is None else (c - s) + c_low)
    p, p_error = two_product(a, b)
    s = p + c
    return s, ((c - s) + p) + (p_error if c_low is None else p_error + c_low)


def fabs(x: Vec) -> Vec: return x._unary("fabs")
def sqrt_(x: Vec) -> Vec: return x._unary("sqrt")
def roundeven(x: Vec) -> Vec: return x._unary("roundeven")


def copysign(magnitude: Vec, sign: Vec) -> Vec:
    return Vec(magnitude.b, magnitude.b.copysign(magnitude.kind, magnitude.value, sign.value), magnitude.kind)


def where(mask: Vec, a: Vec | float, b: Vec | float) -> Vec:
    like = a if isinstance(a, Vec) else b
    return Vec(mask.b, mask.b.select(like.kind, mask.value, like._raw(a), like._raw(b)), like.kind)


def clamp(x: Vec, lo: float, hi: float) -> Vec:
    """Clamp into [lo, hi]; NaN becomes lo (callers restore NaN with ``keep_nan``)."""
    above = where(x > lo, x, lo)
    return where(above < hi, above, hi)


def limit(a: Vec, hi: float) -> Vec:
    """min(a, hi), NaN kept (one compare-and-select, a single min instruction on x86)."""
    return where(a > hi, hi, a)


def poly(x: Vec, coeffs: tuple[float, ...]) -> Vec:
    """sum(c[i] * x**i) by Horner's rule."""
    acc = x.const(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = fma(acc, x, c)
    return acc


def poly_even_odd(x: Vec, coeffs: tuple[float, ...]) -> Vec:
    """``poly`` as two interleaved Horner chains in x**2: one more multiply, half the latency."""
    x2 = x * x
    return fma(poly(x2, coeffs[1::2]), x, poly(x2, coeffs[0::2]))


def branch_if_any(mask: Vec, compute: Callable[[], tuple[Vec, ...]], default: tuple[Vec, ...]):
    """Per lane ``mask ? compute() : default``; ``compute`` only runs if some lane needs it."""
    kinds = [d.kind for d in default]

    def chosen() -> list[Handle]:
        return [where(mask, value, fallback).value for value, fallback in zip(compute(), default)]

    merged = mask.b.branch_if_any(mask.value, chosen, [d.value for d in default], kinds)
    return tuple(Vec(mask.b, value, kind) for value, kind in zip(merged, kinds))


def fast_unless(slow: Vec, fast: Vec, full: Callable[[], Vec]) -> Vec:
    """``fast``, except in the lanes of ``slow``, which take ``full()``, computed only when some
    lane needs it: a fast path need not care about NaN, infinities or extreme arguments."""
    return branch_if_any(slow, lambda: (full(),), (fast,))[0]


def keep_nan(x: Vec, result: Vec) -> Vec:
    return where(x.isnan(), x, result)


def keep_zero(x: Vec, result: Vec) -> Vec:
    """For odd functions whose formula loses the sign of a zero argument."""
    return where(x.eq(0.0), x, result)


def two_sum(a: Vec, b: Vec) -> tuple[Vec, Vec]:
    """s + e == a + b exactly, s = fl(a + b) (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def split(x: Vec) -> tuple[Vec, Vec]:
    """A double as an f32 pair hi + lo."""
    hi = x.narrow()
    return hi, (x - hi.widen()).narrow()
