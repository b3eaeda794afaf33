"""Elementwise ops: arithmetic, math functions, activations, comparisons, logic, Where, Clip, Cast and BitCast.

Every op broadcasts its inputs multidirectionally (NumPy rules) unless said otherwise; see
`common` for how kernels compute half-precision floats.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import FLOAT8, DType, boolean, dtype as to_dtype, f8e8m0, i32, i64, string
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


def gelu(x, approximate):
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
unary("Gelu", gelu, attrs={"approximate": "none"}, dtypes=FLOATS,
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
# NumPy's own conversions where it has both types: floats truncate toward zero when cast to integers,
# integers wrap, anything nonzero is true. The ml_dtypes types (bfloat16, float8, float4, int4, ...) go
# through float32 or int8, which hold their values exactly. ONNX's float8 rules: round to nearest even,
# and with `saturate` finite values beyond the range (and infinities) clamp to the largest value.
_ROUND_MODES = ("up", "down", "nearest")
_E8M0_BIAS, _E8M0_LARGEST, _E8M0_NAN = 127, 254, 255


def _exact_native(x: np.ndarray) -> np.ndarray:
    """x itself, or for an ml_dtypes type the same values as float32, int8 or uint8."""
    source = to_dtype(x.dtype)
    if not source.from_ml_dtypes:
        return x
    return x.astype(np.float32 if source.is_float else np.int8 if source.kind == "int" else np.uint8)


def _f32_rounded_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 to float32, truncated and with the last bit set when inexact ("round to odd"). Rounding
    this to a type of 22 significant bits or fewer gives the correctly rounded value of x; rounding x to
    float32 to nearest first could round twice the same way (ml_dtypes converts float64 that way)."""
    nearest = x.astype(np.float32)
    wide = nearest.astype(np.float64)
    bits = nearest.view(np.uint32).copy()
    bits[np.abs(wide) > np.abs(x)] -= 1         # one step toward zero: the truncated value
    bits[(wide != x) & ~np.isnan(x)] |= 1       # inexact: the last bit says so
    return bits.view(np.float32)


def _to_narrow_float(x: np.ndarray, to: DType, saturate: bool) -> np.ndarray:
    """x (NumPy-native) as an ml_dtypes float type, rounded to nearest even."""
    if x.dtype != np.float64:
        x = x.astype(np.float64 if x.dtype.kind in "iu" else np.float32)
    if saturate and to in FLOAT8:
        x = np.clip(x, -to.largest, to.largest)     # infinities too; NaN stays NaN
    if x.dtype == np.float64:
        x = _f32_rounded_to_odd(x)
    return x.astype(to.np)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """x as float8e8m0: powers of two 2^-127..2^127 stored as their biased exponent (255 is NaN). The
    magnitude's exponent rounds by `round_mode` (up: any fraction rounds away from zero, down: truncates,
    nearest: a mantissa of 1.5 or more rounds up); out of range (zero and infinities included) gives the
    nearest end with `saturate`, else NaN. The sign is ignored: negative values are undefined in ONNX."""
    v = np.abs(x.astype(np.float64))
    fraction, exponent = np.frexp(v)           # v = fraction * 2**exponent, fraction in [0.5, 1)
    biased = exponent.astype(np.int64) - 1 + _E8M0_BIAS
    if round_mode == "up":
        biased += fraction > 0.5
    elif round_mode == "nearest":
        biased += fraction >= 0.75
    biased = np.where(v == 0, -1, np.where(np.isinf(v), _E8M0_LARGEST + 1, biased))
    below, above = biased < 0, biased > _E8M0_LARGEST
    if saturate:
        biased = np.clip(biased, 0, _E8M0_LARGEST)
    else:
        biased[below | above] = _E8M0_NAN
    biased[np.isnan(v)] = _E8M0_NAN
    return biased.astype(np.uint8).view(f8e8m0.np)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers printed as NumPy prints them, as ONNX's reference does: the shortest text that reads back
    as the same value ("0.47892547", "1e-07", "nan", "-inf", "True"); ml_dtypes floats print their
    float32 value."""
    if x.dtype.kind in "OUS":
        return np.array([s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in x.reshape(-1)],
                        dtype=object).reshape(x.shape)
    return _exact_native(x).astype(np.str_).astype(object)


def _read_number(text: str, integer: bool) -> float | int:
    """One string as a number: plain or scientific notation, and "INF", "+INF", "-INF", "NaN" in any
    letter case. Integer types read integer text exactly and truncate a fraction ("100.5" -> 100); booleans
    also read "true" and "false"."""
    text = text.strip()
    if text.lower() in ("true", "false"):
        return int(text.lower() == "true")
    if integer:
        try:
            return int(text)
        except ValueError:
            return int(float(text))
    return float(text)


def _from_strings(ctx: OpContext, x: np.ndarray, to: DType, saturate: bool, round_mode: str) -> np.ndarray:
    integer = to.is_int
    numbers = []
    for s in x.reshape(-1):
        s = s.decode("utf-8") if isinstance(s, bytes) else str(s)
        try:
            numbers.append(_read_number(s, integer))
        except (ValueError, OverflowError):
            raise ctx.fail(f"cannot convert to {to}: {s!r} is not a number") from None
    if integer:   # Python ints wrap to 64 bits, then to the target as NumPy's integer casts do
        wrapped = np.array([n % (1 << 64) for n in numbers], np.uint64).reshape(x.shape)
        return _convert(wrapped, to, saturate, round_mode)
    return _convert(np.array(numbers, np.float64).reshape(x.shape), to, saturate, round_mode)


def _convert(x: np.ndarray, to: DType, saturate: bool, round_mode: str) -> np.ndarray:
    """Numbers to the numeric (or bool) type `to`."""
    x = _exact_native(x)
    with np.errstate(all="ignore"):  # out-of-range conversions are undefined in ONNX
        if to == f8e8m0:
            return _to_e8m0(x, saturate, round_mode)
        if to.from_ml_dtypes and to.is_float:
            return _to_narrow_float(x, to, saturate)
        return x.astype(to.np)


def _cast(ctx: OpContext, x: np.ndarray, to: DType) -> np.ndarray:
    """x converted to `to`; strings parse as numbers and numbers print as strings."""
    saturate, round_mode = bool(ctx.attrs["saturate"]), ctx.attrs["round_mode"]
    if round_mode not in _ROUND_MODES:
        raise ctx.fail(f"round_mode must be one of {', '.join(_ROUND_MODES)}, got {round_mode!r}")
    if to.kind == "string":
        return _to_strings(x)
    if x.dtype.kind in "OUS":
        return _from_strings(ctx, x, to, saturate, round_mode)
    try:
        return _convert(x, to, saturate, round_mode)
    except (ValueError, TypeError) as e:
        raise ctx.fail(f"cannot convert {x.dtype} to {to}: {e}") from None


def _target(ctx: OpContext) -> DType:
    try:
        return to_dtype(ctx.attrs["to"])
    except TypeError as e:
        raise ctx.fail(f"attribute to={ctx.attrs['to']!r}: {e}") from None


# `saturate` is about float8 targets, `round_mode` about float8e8m0
_CAST_ATTRS = {"saturate": 1, "round_mode": "up"}


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
