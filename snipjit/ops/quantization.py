"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer products
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

These are what models quantized by onnxruntime.quantization contain (QDQ models: QuantizeLinear and
DequantizeLinear around float ops; dynamic ones: DynamicQuantizeLinear feeding MatMulInteger). The reference
kernels define the meaning exactly: rounding is half to even, results saturate to the output type, and the
integer products accumulate exactly (in int64, see `integer_matmul`); MatMulInteger and ConvInteger then wrap
to int32 as an int32 accumulator would. Requantization (QLinear*) scales the exact accumulator in float64.

QuantizeLinear and DequantizeLinear work on any NumPy element type with an integer range (int8 ... uint16,
ml_dtypes' int4 and int2) or a float one (ml_dtypes' float8, float6 and float4 types; saturated when
`saturate` is set): they ask the dtype for its range rather than listing types.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import DType, dtype as to_dtype, f32, i8, i32, u8
from ..ir.graph import TensorType
from ..ir.shape import Shape, numel, shape_str
from .common import FLOATS, axis_of, compute_dtype, unidirectional
from .registry import Category, OpContext, get_op, register
from .windows import conv_output, im2col, window_from_attrs

try:
    import ml_dtypes as _ml   # integer and float ranges of int4 and float8 types too
except ImportError:   # pragma: no cover - onnx always brings it
    _ml = None

# Q and DQ are not registered as elementwise: passes that move elementwise ops to another layout or past a
# broadcast would misplace their per-axis and blocked scales. Like BatchNormalization, they are per-axis maps.
PER_AXIS = Category.REDUCTION
H = Category.HEAVY

EIGHT_BITS = (u8, i8)


# ---- element types ----------------------------------------------------------------------------------
def integer_range(dt: np.dtype) -> tuple[int, int] | None:
    """(lowest, highest) of an integer element type; None for other types."""
    try:
        info = _ml.iinfo(dt) if _ml is not None else np.iinfo(dt)
    except ValueError:
        return None
    return int(info.min), int(info.max)


def is_quantized_type(dt: DType) -> bool:
    """An element type QuantizeLinear can produce: integers of up to 16 bits, floats of up to 8 bits."""
    return (dt.is_int and dt.bits <= 16) or (dt.is_float and dt.bits <= 8)


def round_saturate(q: np.ndarray, zero_point, out: np.dtype) -> np.ndarray:
    """saturate(round(q) + zero_point) in the integer type `out`, rounding half to even (NaN gives the
    lowest value, as in onnxruntime)."""
    lo, hi = integer_range(np.dtype(out))
    zp = 0 if zero_point is None else np.asarray(zero_point).astype(np.float64)
    y = np.clip(np.rint(np.asarray(q, dtype=np.float64)) + zp, lo, hi)
    return np.where(np.isnan(y), lo, y).astype(out)


def cast_saturate(q: np.ndarray, zero_point, out: np.dtype, saturate: bool) -> np.ndarray:
    """q + zero_point in the float type `out` (float8: its own rounding); with `saturate`, values beyond
    the type's range (infinities too) become its largest finite value, else they overflow as the type does."""
    y = np.asarray(q, dtype=np.float64)
    if zero_point is not None:
        y = y + np.asarray(zero_point).astype(np.float64)
    if saturate:
        big = float((_ml.finfo(out) if _ml is not None else np.finfo(out)).max)
        y = np.clip(y, -big, big)
    return y.astype(out)


def _dtype_attr(ctx: OpContext, name: str) -> DType | None:
    """An attribute holding an ONNX element type (0: not given)."""
    code = int(ctx.attrs[name] or 0)
    if not code:
        return None
    try:
        return to_dtype(code)
    except TypeError:
        raise ctx.fail(f"{name}={code} is an element type snipjit does not support") from None


def _type_names(allowed) -> str:
    names = [d.np.name for d in allowed]
    return " or ".join(names if isinstance(allowed, tuple) else sorted(names))


def _expect(ctx: OpContext, names: tuple[str, ...], i: int, allowed) -> None:
    t = ctx.in_types[i] if i < len(ctx.in_types) else None
    if t is not None and t.dtype not in allowed:
        raise ctx.fail(f"{names[i]} must be {_type_names(allowed)}, got {t.dtype}")


def _match(ctx: OpContext, names: tuple[str, ...], i: int, j: int) -> None:
    """Fail unless inputs i and j (when present) have one element type."""
    ti, tj = (ctx.in_types[k] if k < len(ctx.in_types) else None for k in (i, j))
    if ti is not None and tj is not None and ti.dtype != tj.dtype:
        raise ctx.fail(f"{names[i]} has dtype {ti.dtype} but {names[j]} has {tj.dtype}")


def _shape(ctx: OpContext, i: int) -> Shape:
    return ctx.in_types[i].shape if ctx.has_input(i) else None


def _differ(a, b) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a != b


def _per_tensor(ctx: OpContext, names: tuple[str, ...], *indices: int) -> None:
    for i in indices:
        shape = _shape(ctx, i)
        if numel(shape) not in (None, 1):
            raise ctx.fail(f"{names[i]} must hold one value (per-tensor), got shape {shape_str(shape)}")


def _one_value(ctx: OpContext, **params: np.ndarray) -> None:
    for what, param in params.items():
        if param.size != 1:
            raise ctx.fail(f"{what} must hold one value (per-tensor), got shape {list(param.shape)}")


def _same_layout(ctx: OpContext, scale: Shape, zero_point: Shape, names: tuple[str, str]) -> None:
    """A scale and its zero point must have one shape (one value each, in whatever shape, also fits)."""
    if scale is None or zero_point is None or numel(scale) == numel(zero_point) == 1:
        return
    if len(scale) != len(zero_point) or any(_differ(a, b) for a, b in zip(scale, zero_point)):
        raise ctx.fail(f"{names[1]} of shape {shape_str(zero_point)} must have the shape of {names[0]} "
                       f"{shape_str(scale)}")


# ---- how a scale spreads over x: per tensor, per axis, or in blocks along an axis ----------------------
@dataclass(frozen=True)
class Layout:
    axis: int | None   # None: per tensor
    block: int = 0     # the block size of blocked quantization; 0: per axis


def layout_of(ctx: OpContext, x: Shape, scale: Shape, what: str) -> Layout | None:
    """The quantization layout the scale's shape and the axis and block_size attributes give (None when
    the shapes leave it open); a scale that fits none raises OpError naming the node."""
    if scale is None:
        return None
    if numel(scale) == 1:
        return Layout(None)
    if x is None:
        return None
    block = int(ctx.attrs.get("block_size") or 0)
    if block < 0:
        raise ctx.fail(f"block_size must be positive, got {block}")
    axis = 0 if len(x) == 1 else axis_of(ctx, ctx.attrs["axis"], len(x))   # rank 1: the axis is implied
    if not block:
        if len(scale) != 1:
            raise ctx.fail(f"{what} of shape {shape_str(scale)} must be a scalar or 1-D (per axis); blocked "
                           "quantization needs the block_size attribute")
        if _differ(scale[0], x[axis]):
            raise ctx.fail(f"{what} has {scale[0]} values but x of shape {shape_str(x)} has {x[axis]} along "
                           f"axis {axis}")
        return Layout(axis)
    blocks = list(x)
    blocks[axis] = -(-x[axis] // block) if isinstance(x[axis], int) else None
    if len(scale) != len(x) or any(_differ(s, b) for s, b in zip(scale, blocks)):
        raise ctx.fail(f"{what} of shape {shape_str(scale)} does not fit x of shape {shape_str(x)} in blocks of "
                       f"{block} along axis {axis}: it must have shape {shape_str(tuple(blocks))}")
    return Layout(axis, block)


def spread(param: np.ndarray, layout: Layout, shape: tuple[int, ...]) -> np.ndarray:
    """A scale or zero point as an array that broadcasts over x of `shape`, one value per element."""
    if layout.axis is None:
        return param.reshape(())
    if not layout.block:
        return param.reshape([-1 if i == layout.axis else 1 for i in range(len(shape))])
    repeated = np.repeat(param, layout.block, axis=layout.axis)
    return repeated[(slice(None),) * layout.axis + (slice(0, shape[layout.axis]),)]


def _check_layouts(ctx: OpContext, names: tuple[str, str, str]) -> None:
    x, scale, zero_point = (_shape(ctx, i) for i in range(3))
    layout_of(ctx, x, scale, names[1])
    _same_layout(ctx, scale, zero_point, names[1:])


def _spread_pair(ctx: OpContext, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
                 names: tuple[str, str, str]) -> tuple[np.ndarray, np.ndarray | None]:
    _same_layout(ctx, scale.shape, None if zero_point is None else zero_point.shape, names[1:])
    layout = layout_of(ctx, x.shape, scale.shape, names[1])
    return spread(scale, layout, x.shape), None if zero_point is None else spread(zero_point, layout, x.shape)


# ---- QuantizeLinear -----------------------------------------------------------------------------------
Q_NAMES = ("x", "y_scale", "y_zero_point")
_DIVIDES_IN = {d.np for d in FLOATS}


def _quantized_dtype(ctx: OpContext) -> DType:
    """The output type: the zero point's, else the output_dtype attribute's, else uint8."""
    wanted = _dtype_attr(ctx, "output_dtype")
    if ctx.has_input(2):
        zp = ctx.in_types[2].dtype
        if wanted is not None and wanted != zp:
            raise ctx.fail(f"output_dtype {wanted} differs from the zero point's type {zp}")
        wanted = zp
    wanted = wanted or u8
    if not is_quantized_type(wanted):
        raise ctx.fail(f"cannot quantize to {wanted}: the output must be an integer type of up to 16 bits "
                       "or a float type of up to 8 bits")
    return wanted


def _infer_quantize(ctx: OpContext) -> list[TensorType]:
    _expect(ctx, Q_NAMES, 0, FLOATS | {i32})
    _expect(ctx, Q_NAMES, 1, FLOATS | {i32})
    out = _quantized_dtype(ctx)
    precision = _dtype_attr(ctx, "precision")
    if precision is not None and precision not in FLOATS:
        raise ctx.fail(f"precision must be a float type, got {precision}")
    _check_layouts(ctx, Q_NAMES)
    return [TensorType(out, ctx.in_types[0].shape)]


def _division_dtype(ctx: OpContext, scale: np.ndarray) -> np.dtype:
    """x / y_scale is computed in the precision attribute's type, else in the scale's (float64 for
    int32 scales)."""
    precision = _dtype_attr(ctx, "precision")
    dt = precision.np if precision is not None else scale.dtype
    return dt if dt in _DIVIDES_IN else np.dtype(np.float64)


@register("QuantizeLinear", PER_AXIS, infer=_infer_quantize, inputs=(2, 3),
          attrs={"axis": 1, "block_size": 0, "output_dtype": 0, "saturate": 1, "precision": 0})
def quantize_linear(ctx: OpContext, x, y_scale, y_zero_point=None):
    """y = saturate(round(x / y_scale) + y_zero_point), rounding half to even; the scale and zero point are
    per tensor, per axis or per block (see `layout_of`)."""
    out = y_zero_point.dtype if y_zero_point is not None else (_dtype_attr(ctx, "output_dtype") or u8).np
    scale, zero_point = _spread_pair(ctx, x, y_scale, y_zero_point, Q_NAMES)
    dt = _division_dtype(ctx, y_scale)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = x.astype(dt) / scale.astype(dt)
        if integer_range(out) is None:
            return cast_saturate(q, zero_point, out, bool(ctx.attrs["saturate"]))
        return round_saturate(q, zero_point, out)


# ---- DequantizeLinear -----------------------------------------------------------------------------------
DQ_NAMES = ("x", "x_scale", "x_zero_point")


def _infer_dequantize(ctx: OpContext) -> list[TensorType]:
    x = ctx.in_types[0]
    if not (is_quantized_type(x.dtype) or x.dtype == i32):
        raise ctx.fail(f"x has dtype {x.dtype}; DequantizeLinear takes integers of up to 16 bits, int32 and "
                       "float types of up to 8 bits")
    _match(ctx, DQ_NAMES, 2, 0)
    _expect(ctx, DQ_NAMES, 1, FLOATS)
    out = _dtype_attr(ctx, "output_dtype") or ctx.in_types[1].dtype
    if out not in FLOATS:
        raise ctx.fail(f"output_dtype must be a float type, got {out}")
    _check_layouts(ctx, DQ_NAMES)
    return [TensorType(out, x.shape)]


def centered(x: np.ndarray, zero_point) -> np.ndarray:
    """x - zero_point, exact: in int64 for integer types, in float32 for float ones."""
    wide = np.int64 if integer_range(x.dtype) is not None else np.float32
    y = x.astype(wide)
    return y if zero_point is None else y - np.asarray(zero_point).astype(wide)


@register("DequantizeLinear", PER_AXIS, infer=_infer_dequantize, inputs=(2, 3),
          attrs={"axis": 1, "block_size": 0, "output_dtype": 0})
def dequantize_linear(ctx: OpContext, x, x_scale, x_zero_point=None):
    """y = (x - x_zero_point) * x_scale in the output type (x_scale's, or output_dtype): the difference is
    exact, the product is computed in float32 and rounded once to the output type."""
    wanted = _dtype_attr(ctx, "output_dtype")
    out = x_scale.dtype if wanted is None else wanted.np
    math_dtype = compute_dtype(out)
    if x_scale.size == 1 and x.dtype.itemsize <= 2 and integer_range(x.dtype) is not None and math_dtype == f32.np:
        zero = 0 if x_zero_point is None else np.float32(np.asarray(x_zero_point).reshape(-1)[0])
        return ((x.astype(np.float32) - zero) * np.float32(x_scale.reshape(-1)[0])).astype(out)   # (exact difference)
    scale, zero_point = _spread_pair(ctx, x, x_scale, x_zero_point, DQ_NAMES)
    return (centered(x, zero_point).astype(math_dtype) * scale.astype(math_dtype)).astype(out)


# ---- DynamicQuantizeLinear ---------------------------------------------------------------------------------
def _infer_dynamic_quantize(ctx: OpContext) -> list[TensorType]:
    _expect(ctx, ("x",), 0, (f32,))
    return [TensorType(u8, ctx.in_types[0].shape), TensorType(f32, ()), TensorType(u8, ())]


@register("DynamicQuantizeLinear", PER_AXIS, infer=_infer_dynamic_quantize, outputs=3)
def dynamic_quantize_linear(ctx: OpContext, x):
    """x quantized to uint8 over its range widened to include 0: y_scale = (max - min) / 255 (1 when the
    range is empty, as in onnxruntime), y_zero_point = saturate(round(-min / y_scale)), and y as
    QuantizeLinear computes it. NaNs are left out of the range. All arithmetic is float32."""
    flat = x.reshape(-1)
    lo, hi = np.fmin.reduce(flat, initial=np.float32(0)), np.fmax.reduce(flat, initial=np.float32(0))
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.float32(1) if hi == lo else np.float32(hi - lo) / np.float32(255)
        zero_point = round_saturate(np.float32(0) - lo / scale, None, np.uint8)
        y = round_saturate(x / scale, zero_point, np.uint8)
    return y, np.array(scale, np.float32), zero_point


# ---- exact integer products ---------------------------------------------------------------------------------
_FLOAT64_EXACT = 2**53   # every integer of smaller magnitude is a float64


def integer_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul of integer arrays, exact, in int64. When no partial sum can reach 2**53 (any 8-bit
    product, for inner sizes up to 2**37), BLAS multiplies them as float64, exactly; otherwise NumPy's
    int64 matmul does (slowly)."""
    if a.size and b.size:
        bound = int(np.abs(a).max()) * int(np.abs(b).max()) * a.shape[-1]
    else:
        bound = 0
    if bound < _FLOAT64_EXACT:
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


def _wrap_int32(y: np.ndarray) -> np.ndarray:
    """An int64 sum as an int32 accumulator ends up: modulo 2**32."""
    return y.astype(np.int32)


def _shape_by(ctx: OpContext, op: str, types: list[TensorType | None]) -> Shape:
    """The output shape `op` infers for inputs of these types: the integer products follow MatMul's and
    Conv's shape rules, and fail with their messages (naming this node)."""
    opdef = get_op(op)
    proxy = OpContext(ctx.node, {k: ctx.attrs.get(k, v) for k, v in opdef.attrs.items()}, types)
    return opdef.infer(proxy)[0].shape


def _as(t: TensorType | None, dt: DType) -> TensorType | None:
    return None if t is None else TensorType(dt, t.shape)


# ---- per-row and per-column parameters of the matrix products ---------------------------------------------------
ROW, COLUMN = -2, -1


def _promoted(shape: Shape, side: int) -> Shape:
    """A matrix product operand's shape with a 1-D operand made a matrix (a row for A, a column for B)."""
    if shape is None or len(shape) != 1:
        return shape
    return (1,) + tuple(shape) if side == ROW else tuple(shape) + (1,)


def check_row_or_column(ctx: OpContext, x: Shape, param: Shape, what: str, side: int) -> None:
    """A zero point (or scale) of a matrix product operand: one value, one per row of A, or one per column
    of B (1-D, or with batch dims: [..., M, 1] for A, [..., 1, N] for B)."""
    x = _promoted(x, side)
    if x is None or param is None or numel(param) == 1:
        return
    where = "row" if side == ROW else "column"
    if len(param) == 1:
        if _differ(param[0], x[side]):
            raise ctx.fail(f"{what} of shape {shape_str(param)} must be a scalar or have one value per {where} "
                           f"({x[side]})")
        return
    other = COLUMN if side == ROW else ROW
    if _differ(param[other], 1):
        raise ctx.fail(f"{what} of shape {shape_str(param)} must have size 1 in dim {other} (one value per "
                       f"{where})")
    unidirectional(ctx, x, param, what)


def _rows_or_columns(ctx: OpContext, x: np.ndarray, param: np.ndarray | None, what: str, side: int):
    """`param` shaped to broadcast over the promoted operand x (None stays None)."""
    if param is None:
        return None
    check_row_or_column(ctx, x.shape, param.shape, what, side)
    if param.size == 1:
        return param.reshape(())
    return param.reshape(-1, 1) if param.ndim == 1 and side == ROW else param


def _centered_product(ctx: OpContext, a, b, a_zero_point, b_zero_point):
    """(A - a_zero_point) @ (B - b_zero_point) exactly in int64, with 1-D operands promoted to matrices (see
    `_demoted`), and the promoted operands."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    if a.ndim == 0 or b.ndim == 0 or a2.shape[-1] != b2.shape[-2]:
        raise ctx.fail(f"inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    ca = centered(a2, _rows_or_columns(ctx, a2, a_zero_point, "a_zero_point", ROW))
    cb = centered(b2, _rows_or_columns(ctx, b2, b_zero_point, "b_zero_point", COLUMN))
    try:
        np.broadcast_shapes(ca.shape[:-2], cb.shape[:-2])
    except ValueError:
        raise ctx.fail(f"batch dimensions do not broadcast: {list(a.shape)} @ {list(b.shape)}") from None
    return integer_matmul(ca, cb), a2, b2


def _demoted(y: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A product of promoted operands with the unit dims of 1-D operands dropped again (NumPy's rule)."""
    if b.ndim == 1:
        y = y[..., 0]
    if a.ndim == 1:
        y = y[..., 0, :] if b.ndim > 1 else y[..., 0]
    return y


# ---- MatMulInteger --------------------------------------------------------------------------------------------
MMI_NAMES = ("A", "B", "a_zero_point", "b_zero_point")


def _integer_operands(ctx: OpContext, names: tuple[str, ...]) -> None:
    """MatMulInteger's and ConvInteger's inputs: 8-bit integers, each zero point of its operand's type."""
    for i in range(len(ctx.in_types)):
        _expect(ctx, names, i, EIGHT_BITS)
    _match(ctx, names, 2, 0)
    _match(ctx, names, 3, 1)


def _infer_matmul_integer(ctx: OpContext) -> list[TensorType]:
    _integer_operands(ctx, MMI_NAMES)
    a, b = ctx.in_types[:2]
    check_row_or_column(ctx, a.shape, _shape(ctx, 2), "a_zero_point", ROW)
    check_row_or_column(ctx, b.shape, _shape(ctx, 3), "b_zero_point", COLUMN)
    return [TensorType(i32, _shape_by(ctx, "MatMul", [_as(a, i32), _as(b, i32)]))]


@register("MatMulInteger", H, infer=_infer_matmul_integer, inputs=(2, 4))
def matmul_integer(ctx: OpContext, a, b, a_zero_point=None, b_zero_point=None):
    """(A - a_zero_point) @ (B - b_zero_point) on 8-bit integers into int32, with NumPy's matmul shapes;
    a_zero_point is per tensor or per row of A, b_zero_point per tensor or per column of B."""
    y, _, _ = _centered_product(ctx, a, b, a_zero_point, b_zero_point)
    return _wrap_int32(_demoted(y, a, b))


# ---- QLinearMatMul ----------------------------------------------------------------------------------------------
QMM_NAMES = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point")


def _infer_qlinear_matmul(ctx: OpContext) -> list[TensorType]:
    _per_tensor(ctx, QMM_NAMES, 6, 7)
    for data, scale, zero_point in ((0, 1, 2), (3, 4, 5), (None, 6, 7)):
        if data is not None:
            _expect(ctx, QMM_NAMES, data, EIGHT_BITS)
            _match(ctx, QMM_NAMES, zero_point, data)
        _expect(ctx, QMM_NAMES, zero_point, EIGHT_BITS)
        _expect(ctx, QMM_NAMES, scale, FLOATS)
        _match(ctx, QMM_NAMES, scale, 1)
        _same_layout(ctx, _shape(ctx, scale), _shape(ctx, zero_point), (QMM_NAMES[scale], QMM_NAMES[zero_point]))
    a, b = ctx.in_types[0], ctx.in_types[3]
    check_row_or_column(ctx, a.shape, _shape(ctx, 1), "a_scale", ROW)
    check_row_or_column(ctx, b.shape, _shape(ctx, 4), "b_scale", COLUMN)
    return [TensorType(ctx.in_types[7].dtype, _shape_by(ctx, "MatMul", [_as(a, i32), _as(b, i32)]))]


def requantize(accumulator: np.ndarray, multiplier: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """An exact integer accumulator times its real scale (input scales / output scale), quantized: in
    float64, rounding half to even, saturating to the zero point's type."""
    return round_saturate(accumulator.astype(np.float64) * multiplier, zero_point.reshape(()), zero_point.dtype)


@register("QLinearMatMul", H, infer=_infer_qlinear_matmul, inputs=8)
def qlinear_matmul(ctx: OpContext, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """The quantized matrix product: y = saturate(round((A - a_zp) @ (B - b_zp) * a_scale * b_scale / y_scale)
    + y_zp), the product exact; a's scale and zero point per tensor or per row, b's per tensor or per column."""
    _one_value(ctx, y_scale=y_scale, y_zero_point=y_zero_point)
    _same_layout(ctx, a_scale.shape, a_zero_point.shape, QMM_NAMES[1:3])
    _same_layout(ctx, b_scale.shape, b_zero_point.shape, QMM_NAMES[4:6])
    acc, a2, b2 = _centered_product(ctx, a, b, a_zero_point, b_zero_point)
    multiplier = (_rows_or_columns(ctx, a2, a_scale, "a_scale", ROW).astype(np.float64) *
                  _rows_or_columns(ctx, b2, b_scale, "b_scale", COLUMN).astype(np.float64) /
                  np.float64(y_scale.reshape(())))
    return _demoted(requantize(acc, multiplier, y_zero_point), a, b)


# ---- ConvInteger and QLinearConv --------------------------------------------------------------------------------
_CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
               "strides": None}


def _check_per_channel(ctx: OpContext, names: tuple[str, ...], i: int, w: Shape) -> None:
    """A weight scale or zero point: one value, or one per output channel."""
    shape, m = _shape(ctx, i), None if w is None else w[0]
    if shape is None or numel(shape) == 1:
        return
    if len(shape) != 1 or _differ(shape[0], m):
        raise ctx.fail(f"{names[i]} of shape {shape_str(shape)} must be a scalar or 1-D with one value per "
                       f"output channel ({m})")


def _per_channel(ctx: OpContext, param: np.ndarray, m: int, rank: int, channel_axis: int, what: str):
    """A per-tensor or per-output-channel parameter shaped to broadcast over a tensor of `rank` whose
    output channels are along `channel_axis` (0 for the weights, 1 for the output)."""
    if param.size == 1:
        return param.reshape(())
    if param.ndim != 1 or param.size != m:
        raise ctx.fail(f"{what} of shape {list(param.shape)} must be a scalar or 1-D with one value per output "
                       f"channel ({m})")
    return param.reshape([-1 if i == channel_axis else 1 for i in range(rank)])


def _conv_shape(ctx: OpContext, x: TensorType, w: TensorType, bias: TensorType | None = None) -> Shape:
    return _shape_by(ctx, "Conv", [_as(x, f32), _as(w, f32)] + ([_as(bias, f32)] if bias is not None else []))


def integer_conv(ctx: OpContext, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution of centered (zero point subtracted) integer tensors, exact in int64: Conv's im2col,
    then `integer_matmul` per group."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ctx.fail(f"X of shape {list(x.shape)} and W of shape {list(w.shape)} must both have rank >= 3")
    kernel = ctx.attrs["kernel_shape"]
    win = window_from_attrs(ctx, tuple(int(k) for k in (w.shape[2:] if kernel is None else kernel)))
    weights, columns, spatial = im2col(ctx, x, w, win, ctx.attrs["group"])
    return conv_output(integer_matmul(weights, columns), x.shape[0], spatial)


CI_NAMES = ("x", "w", "x_zero_point", "w_zero_point")


def _infer_conv_integer(ctx: OpContext) -> list[TensorType]:
    _integer_operands(ctx, CI_NAMES)
    _per_tensor(ctx, CI_NAMES, 2)
    x, w = ctx.in_types[:2]
    _check_per_channel(ctx, CI_NAMES, 3, w.shape)
    return [TensorType(i32, _conv_shape(ctx, x, w))]


@register("ConvInteger", H, infer=_infer_conv_integer, inputs=(2, 4), attrs=_CONV_ATTRS)
def conv_integer(ctx: OpContext, x, w, x_zero_point=None, w_zero_point=None):
    """Conv of (x - x_zero_point) with (w - w_zero_point) on 8-bit integers into int32; x_zero_point is per
    tensor, w_zero_point per tensor or per output channel. Padding reads as the zero point (a zero after
    centering)."""
    if x_zero_point is not None:
        _one_value(ctx, x_zero_point=x_zero_point)
        x_zero_point = x_zero_point.reshape(())
    cw = centered(w, None if w_zero_point is None else
                  _per_channel(ctx, w_zero_point, w.shape[0], w.ndim, 0, "w_zero_point"))
    return _wrap_int32(integer_conv(ctx, centered(x, x_zero_point), cw))


QC_NAMES = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B")


def _infer_qlinear_conv(ctx: OpContext) -> list[TensorType]:
    for data, scale, zero_point in ((0, 1, 2), (3, 4, 5), (None, 6, 7)):
        if data is not None:
            _expect(ctx, QC_NAMES, data, EIGHT_BITS)
            _match(ctx, QC_NAMES, zero_point, data)
        _expect(ctx, QC_NAMES, zero_point, EIGHT_BITS)
        _expect(ctx, QC_NAMES, scale, (f32,))
    _expect(ctx, QC_NAMES, 8, (i32,))
    _per_tensor(ctx, QC_NAMES, 1, 2, 6, 7)
    x, w = ctx.in_types[0], ctx.in_types[3]
    _check_per_channel(ctx, QC_NAMES, 4, w.shape)
    _check_per_channel(ctx, QC_NAMES, 5, w.shape)
    bias = ctx.in_types[8] if ctx.has_input(8) else None
    return [TensorType(ctx.in_types[7].dtype, _conv_shape(ctx, x, w, bias))]


@register("QLinearConv", H, infer=_infer_qlinear_conv, inputs=(8, 9), attrs=_CONV_ATTRS)
def qlinear_conv(ctx: OpContext, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 bias=None):
    """The quantized convolution: the exact Conv of (x - x_zp) and (w - w_zp), plus the int32 bias (quantized
    with scale x_scale * w_scale), requantized to y_scale and y_zp; w's scale and zero point are per tensor
    or per output channel."""
    m = w.shape[0]
    _one_value(ctx, x_scale=x_scale, x_zero_point=x_zero_point, y_scale=y_scale, y_zero_point=y_zero_point)
    cw = centered(w, _per_channel(ctx, w_zero_point, m, w.ndim, 0, "w_zero_point"))
    acc = integer_conv(ctx, centered(x, x_zero_point.reshape(())), cw)
    if bias is not None:
        if bias.shape != (m,):
            raise ctx.fail(f"B of shape {list(bias.shape)} must have one value per output channel ({m})")
        acc = acc + bias.astype(np.int64).reshape([-1 if i == 1 else 1 for i in range(acc.ndim)])
    w_scale = _per_channel(ctx, w_scale, m, acc.ndim, 1, "w_scale").astype(np.float64)
    multiplier = np.float64(x_scale.reshape(())) * w_scale / np.float64(y_scale.reshape(()))
    return requantize(acc, multiplier, y_zero_point)
