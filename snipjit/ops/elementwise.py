"""Elementwise ops: arithmetic, math functions, activations, comparisons, logic, Where, Clip, Cast and BitCast.

Every op broadcasts its inputs multidirectionally (NumPy rules) unless said otherwise; see
`common` for how kernels compute half-precision floats.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import DType, boolean, dtype as to_dtype, i32, i64, string
from ..ir.graph import TensorType
from ..ir.shape import is_static, numel, shape_str
from ._indexing import tensor
from .common import (BOOL, FLOATS, INTS, NUMERIC, SIGNED, binary, broadcast_infer, check_broadcast,
                     check_dtypes, comparison, one_of, unary, unidirectional, upcast, variadic)
from .registry import REQUIRED, Category, OpContext, register


# ---- arithmetic ----------------------------------------------------------------------------------
def _divide(a, b):
    """Division; integers truncate toward zero as in C (NumPy's // floors)."""
    if not np.issubdtype(a.dtype, np.integer):
        return a / b
    if np.any(b == 0):
        raise ZeroDivisionError("integer division by zero")
    q = a // b
    return q + ((q < 0) & (q * b != a))  # floor -> truncation where the quotient is negative and inexact


def _mod(a, b, fmod):
    """Remainder with the sign of the divisor (fmod=0: a - floor(a/b)*b) or of the dividend
    (fmod=1: C's fmod, a - trunc(a/b)*b)."""
    if np.issubdtype(a.dtype, np.integer) and np.any(b == 0):
        raise ZeroDivisionError("integer modulo by zero")
    return np.fmod(a, b) if fmod else np.mod(a, b)


def _pow(x, y):
    """x ** y in the dtype of x; for integer x, fractional or negative powers truncate toward zero."""
    if np.issubdtype(x.dtype, np.integer) and not (np.issubdtype(y.dtype, np.integer) and np.all(y >= 0)):
        return np.power(x.astype(np.float64), y.astype(np.float64))
    return np.power(x, y)


def _check_pow(ctx: OpContext) -> None:
    check_dtypes(ctx, NUMERIC, [1])


binary("Add", lambda a, b: a + b, dtypes=NUMERIC)
binary("Sub", lambda a, b: a - b, dtypes=NUMERIC)
binary("Mul", lambda a, b: a * b, dtypes=NUMERIC)
binary("Div", _divide, dtypes=NUMERIC)
binary("Mod", _mod, attrs={"fmod": 0}, dtypes=NUMERIC, check=one_of("fmod", (0, 1)))
binary("Pow", _pow, same_dtype=False, dtypes=FLOATS | {i32, i64}, check=_check_pow)

unary("Neg", lambda x: -x, dtypes=SIGNED)
unary("Abs", np.abs, dtypes=NUMERIC)
unary("Sign", np.sign, dtypes=NUMERIC)
unary("Reciprocal", lambda x: 1 / x, dtypes=FLOATS)

variadic("Max", np.maximum, NUMERIC)
variadic("Min", np.minimum, NUMERIC)
variadic("Sum", np.add, FLOATS)
variadic("Mean", np.add, FLOATS, finish=lambda total, n: total / n)


# ---- math functions ------------------------------------------------------------------------------
_erf = np.vectorize(math.erf, otypes=[np.float64])

for _name, _fn in {"Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log, "Floor": np.floor, "Ceil": np.ceil,
                   "Round": np.round, "Erf": _erf, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan,
                   "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh,
                   "Cosh": np.cosh, "Tanh": np.tanh, "Asinh": np.arcsinh, "Acosh": np.arccosh,
                   "Atanh": np.arctanh}.items():
    unary(_name, _fn, dtypes=FLOATS)  # np.round rounds half to even, as ONNX Round does

unary("IsNaN", np.isnan, out_dtype=boolean, dtypes=FLOATS)
unary("IsInf", lambda x, detect_negative, detect_positive:
      (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative)),
      attrs={"detect_negative": 1, "detect_positive": 1}, out_dtype=boolean, dtypes=FLOATS)


# ---- activations ---------------------------------------------------------------------------------
def _softplus(x):
    return np.logaddexp(0, x)


def _gated(x, gate):
    """x · gate(x), where a gate of 0 gives a zero of x's sign: at x = -inf the product is the limit -0,
    not inf · 0 = NaN (the generated kernels give the same)."""
    return np.where(gate == 0, np.copysign(np.zeros_like(x), x), x * gate)


def _gelu(x, approximate):
    if approximate == "tanh":   # 0.5 (1 + tanh z) as 1 / (1 + e^-2z): the tail below -9 does not round to 0
        z = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        with np.errstate(over="ignore"):
            return _gated(x, 1 / (1 + np.exp(-2 * z)))
    return _gated(x, 0.5 * (1 + _erf(x / math.sqrt(2))))


def _hard_sigmoid(x, alpha, beta):
    return np.clip(alpha * x + beta, 0, 1)


unary("Relu", lambda x: np.maximum(x, x.dtype.type(0)), dtypes=SIGNED)
unary("LeakyRelu", lambda x, alpha: np.where(x < 0, alpha * x, x), attrs={"alpha": 0.01}, dtypes=FLOATS)
unary("Elu", lambda x, alpha: np.where(x < 0, alpha * np.expm1(x), x), attrs={"alpha": 1.0},
      dtypes=FLOATS)
unary("Selu", lambda x, alpha, gamma: gamma * np.where(x <= 0, alpha * np.expm1(x), x),
      attrs={"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}, dtypes=FLOATS)
unary("Celu", lambda x, alpha: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha)),
      attrs={"alpha": 1.0}, dtypes=FLOATS)
unary("HardSigmoid", _hard_sigmoid, attrs={"alpha": 0.2, "beta": 0.5}, dtypes=FLOATS)
unary("HardSwish", lambda x: _gated(x, _hard_sigmoid(x, 1 / 6, 0.5)), dtypes=FLOATS)
unary("Sigmoid", lambda x: 1 / (1 + np.exp(-x)), dtypes=FLOATS)
unary("Softplus", _softplus, dtypes=FLOATS)
unary("Softsign", lambda x: x / (1 + np.abs(x)), dtypes=FLOATS)
unary("Mish", lambda x: _gated(x, np.tanh(_softplus(x))), dtypes=FLOATS)
unary("Gelu", _gelu, attrs={"approximate": "none"}, dtypes=FLOATS,
      check=one_of("approximate", ("none", "tanh")))
unary("ThresholdedRelu", lambda x, alpha: np.where(x > alpha, x, 0), attrs={"alpha": 1.0}, dtypes=FLOATS)
unary("Shrink", lambda x, bias, lambd: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)),
      attrs={"bias": 0.0, "lambd": 0.5}, dtypes=NUMERIC)


def _infer_prelu(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, NUMERIC)
    x, slope = ctx.in_types
    if slope.dtype != x.dtype:
        raise ctx.fail(f"slope has dtype {slope.dtype} but X has {x.dtype}")
    unidirectional(ctx, x.shape, slope.shape, "slope")
    return [x]


@register("PRelu", Category.BINARY, infer=_infer_prelu, inputs=2)
def prelu(ctx: OpContext, x, slope):
    """x where x >= 0, else slope * x; slope broadcasts to the shape of x."""
    if check_broadcast(ctx, x, slope) != x.shape:
        raise ctx.fail(f"slope of shape {shape_str(slope.shape)} does not broadcast to {shape_str(x.shape)}")
    with np.errstate(all="ignore"):
        xc = upcast(x)
        return np.where(xc < 0, xc * upcast(slope), xc).astype(x.dtype)


# ---- comparisons, logic and bits -----------------------------------------------------------------
comparison("Equal", np.equal, dtypes=NUMERIC | BOOL | {string})
comparison("Less", np.less, dtypes=NUMERIC)
comparison("LessOrEqual", np.less_equal, dtypes=NUMERIC)
comparison("Greater", np.greater, dtypes=NUMERIC)
comparison("GreaterOrEqual", np.greater_equal, dtypes=NUMERIC)

unary("Not", np.logical_not, dtypes=BOOL)
binary("And", np.logical_and, dtypes=BOOL)
binary("Or", np.logical_or, dtypes=BOOL)
binary("Xor", np.logical_xor, dtypes=BOOL)

unary("BitwiseNot", np.invert, dtypes=INTS)
binary("BitwiseAnd", np.bitwise_and, dtypes=INTS)
binary("BitwiseOr", np.bitwise_or, dtypes=INTS)
binary("BitwiseXor", np.bitwise_xor, dtypes=INTS)


def _bit_shift(x, y, direction):
    """Shift x by y bits; a shift by a negative amount or by the bit width or more leaves only the
    sign fill: -1 for a right shift of a negative x, 0 otherwise."""
    bits = 8 * x.dtype.itemsize
    in_range = (y >= 0) & (y < bits)
    amount = np.where(in_range, y, 0)
    shifted = np.left_shift(x, amount) if direction == "LEFT" else np.right_shift(x, amount)
    fill = np.right_shift(x, bits - 1) if direction == "RIGHT" and x.dtype.kind == "i" else 0
    return np.where(in_range, shifted, fill)


binary("BitShift", _bit_shift, attrs={"direction": REQUIRED}, dtypes=INTS,
       check=one_of("direction", ("LEFT", "RIGHT")))


# ---- selection -----------------------------------------------------------------------------------
def _infer_where(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, BOOL, [0])
    return broadcast_infer(dtype_from=1)(ctx)


@register("Where", Category.TERNARY, infer=_infer_where, inputs=3)
def where(ctx: OpContext, condition, x, y):
    """x where condition holds, else y."""
    check_broadcast(ctx, condition, x, y)
    return np.where(condition, x, y)


def _infer_clip(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, NUMERIC)
    x = ctx.in_types[0]
    for i, what in ((1, "min"), (2, "max")):
        t = ctx.in_types[i] if ctx.has_input(i) else None
        if t is None:
            continue
        if t.dtype != x.dtype:
            raise ctx.fail(f"{what} has dtype {t.dtype} but the input has {x.dtype}")
        if is_static(t.shape) and numel(t.shape) != 1:
            raise ctx.fail(f"{what} must be a scalar, got shape {shape_str(t.shape)}")
    return [x]


@register("Clip", Category.TERNARY, infer=_infer_clip, inputs=(1, 3))
def clip(ctx: OpContext, x, lo=None, hi=None):
    """x limited to [min, max] (either optional); where min > max every element becomes max."""
    y = x
    for bound, limit in ((lo, np.maximum), (hi, np.minimum)):
        if bound is None:
            continue
        if bound.size != 1:
            raise ctx.fail(f"min and max must be scalars, got shape {shape_str(bound.shape)}")
        y = limit(y, bound.reshape(()))
    return np.array(y, dtype=x.dtype)


# ---- casts ---------------------------------------------------------------------------------------
def _cast(ctx: OpContext, x: np.ndarray, to: DType) -> np.ndarray:
    """x converted to `to`: floats truncate toward zero when cast to integers, anything nonzero is
    true, strings parse as numbers ("INF", "-inf" and "NaN" included) and numbers print as strings."""
    if to.kind == "string":
        return x.astype(np.str_).astype(object)
    try:
        with np.errstate(all="ignore"):  # out-of-range conversions are undefined in ONNX
            return x.astype(to.np)
    except ValueError as e:
        raise ctx.fail(f"cannot convert to {to}: {e}") from None


def _target(ctx: OpContext) -> DType:
    try:
        return to_dtype(ctx.attrs["to"])
    except TypeError as e:
        raise ctx.fail(f"attribute to={ctx.attrs['to']!r}: {e}") from None


_CAST_ATTRS = {"saturate": 1, "round_mode": "up"}  # both only matter for float8 types, not supported


@register("Cast", Category.UNARY, infer=lambda ctx: [TensorType(_target(ctx), ctx.in_types[0].shape)],
          attrs={"to": REQUIRED, **_CAST_ATTRS})
def cast(ctx: OpContext, x):
    """x converted to the dtype `to` (an ONNX element type number or a snipjit dtype name)."""
    return _cast(ctx, x, _target(ctx))


@register("CastLike", Category.UNARY,
          infer=lambda ctx: [TensorType(ctx.in_types[1].dtype, ctx.in_types[0].shape)],
          attrs=_CAST_ATTRS, inputs=2)
def cast_like(ctx: OpContext, x, like):
    """x converted to the dtype of `like` (whose values are not read)."""
    return _cast(ctx, x, to_dtype(like.dtype))


# ---- BitCast -------------------------------------------------------------------------------------
def _bitcast_target(ctx: OpContext) -> DType:
    try:
        to = to_dtype(int(ctx.attrs["to"]))
    except TypeError as e:
        raise ctx.fail(f"attribute to: {e}") from None
    src = ctx.in_types[0].dtype
    if string in (to, src):
        raise ctx.fail("BitCast does not take string tensors")
    if to.bits != src.bits:
        raise ctx.fail(f"cannot reinterpret {src} ({src.bits} bits) as {to} ({to.bits} bits)")
    return to


@register("BitCast", Category.UNARY, attrs={"to": REQUIRED},
          infer=lambda ctx: [tensor(_bitcast_target(ctx), ctx.in_types[0].shape)])
def bitcast(ctx: OpContext, x):
    """The bytes of x (little endian) read as elements of type `to`, of the same width."""
    to = _bitcast_target(ctx).np
    data = np.ascontiguousarray(x)
    if to == np.bool_ and np.any(data.view(np.uint8) > 1):
        raise ctx.fail("a byte other than 0 or 1 is not a boolean")
    return data.view(to).copy()
