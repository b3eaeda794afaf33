"""Vectorised f32 math written once, rendered to LLVM IR and to C (no libm calls).

Fused elementwise kernels need exp/log/tanh/erf/... on whole vectors, fast enough that a kernel
over a large tensor still runs at memory bandwidth. Each function here is Python composing the
few lane-wise operations of ``vector.VectorBuilder`` (arithmetic, FMA, compare and select, bit
casts, integer shifts, one "any lane" branch); ``targets/llvm/vmath.py`` renders them as LLVM IR
and ``targets/c/vmath_render.py`` as C, so both targets compute the same bits. NaN and ±inf
follow numpy; no fast-math.

Fast and full paths: most functions evaluate a short straight-line f32 formula valid where
activations live (exp for |x| <= 87, sigmoid for x >= -87, ...) and ignore NaN, infinities,
overflow and denormal results; ``fast_unless`` then branches, on "some lane is outside", to a
full path that handles every float and replaces those lanes. Typical vectors never take it.

Techniques: Cody–Waite range reduction with split constants; e^x as 2**k * p(r), k read from the
low bits of x/ln2 + 1.5 * 2**23 and shifted into the exponent field; polynomial and rational
kernels by Horner with FMA (near-minimax fits of our own by Lawson's iteratively reweighted least
squares, rounded to f32): tanh and erf as a P(a^2)/Q(a^2), the normal tail Phi(-y) =
e^(-y^2/2) Mills(y) for erfc and gelu; exact products from FMA, or on ISA levels without FMA from
Dekker's two-product (the builder knows its level; ``vector`` holds the only switch); f64 lanes
where an f32 argument needs more than 24 bits (pow's log and exp, gelu_tanh's full path, and the
reduction of sin/cos/tan modulo pi/2, exact for every float: Cody–Waite below 2**20, Payne–Hanek
above in a branch that only runs when a lane needs it).

Families: ``exponential`` (exp, expm1, sinh, cosh, tanh), ``gates`` (sigmoid, silu, softplus,
mish, gelu, erf, erfc), ``logarithm`` (log, log1p, pow, sqrt, inverse hyperbolics),
``trigonometric``, ``activations`` (piecewise ones). ``accuracy.ACCURACY`` is the one error
table, ``elementwise.ELEMENTWISE`` maps graph ops onto these functions.
"""
from __future__ import annotations

from . import activations, exponential, gates, logarithm, trigonometric
from .accuracy import ACCURACY, Bound
from .elementwise import ELEMENTWISE, MathCall
from .registry import MathOp
from .vector import Vec, VectorBuilder

FAMILIES = (exponential, gates, logarithm, trigonometric, activations)
OPS: dict[str, MathOp] = {value.name: value for family in FAMILIES for value in vars(family).values()
                          if isinstance(value, MathOp)}


def lookup(name: str) -> MathOp:
    """The math function ``name``; KeyError names the known ones."""
    if name not in OPS:
        raise KeyError(f"no vector math op {name!r}; known: {sorted(OPS)}")
    return OPS[name]


__all__ = ["ACCURACY", "Bound", "ELEMENTWISE", "MathCall", "OPS", "MathOp", "lookup", "Vec", "VectorBuilder"]
