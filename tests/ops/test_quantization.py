"""Quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul and QLinearConv. Reference kernels against hand-computed cases (ties rounding to even,
saturation at both ends, per-axis, blocked, negative zero points) and loop formulations; inference and its
errors; compiled ONNX models; and models quantized by onnxruntime.quantization against onnxruntime."""
import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import snipjit
from snipjit.ops import OpContext, OpError, get_op
from snipjit.ops.quantization import integer_matmul
from snipjit.snippets.supported_ops import is_supported
from op_cases import output_types, run

rng = np.random.default_rng(0)
f32, u8, i8 = np.float32, np.uint8, np.int8
QUANT_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
             "QLinearMatMul", "QLinearConv")


# ---- QuantizeLinear ------------------------------------------------------------------------------------------
def test_quantize_rounds_ties_to_even():
    x = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 0.49, 0.51], f32)
    np.testing.assert_array_equal(run("QuantizeLinear", x, f32(1), i8(0)), [0, 2, 2, 4, 0, -2, -2, 0, 1])
    np.testing.assert_array_equal(run("QuantizeLinear", 2 * x[:7], f32(2), i8(0)), [0, 2, 2, 4, 0, -2, -2])


@pytest.mark.parametrize("zero_point, expected", [
    (u8(128), [0, 0, 128, 255, 255]),
    (u8(0), [0, 0, 0, 200, 255]),
    (i8(-3), [-128, -128, -3, 127, 127]),
    (np.uint16(100), [0, 0, 100, 300, 65535]),
    (np.int16(-5), [-32768, -32768, -5, 195, 32767]),
])
def test_quantize_saturates_at_both_ends(zero_point, expected):
    x = np.array([-1e9, -np.inf, 0, 200, 1e9], f32)
    y = run("QuantizeLinear", x, f32(1), zero_point)
    assert y.dtype == zero_point.dtype
    np.testing.assert_array_equal(y, expected)


def test_quantize_negative_int8_zero_point_and_default_uint8():
    x = np.array([0, 1, -1, 2.75], f32)
    np.testing.assert_array_equal(run("QuantizeLinear", x, f32(0.5), i8(-10)), [-10, -8, -12, -4])  # 5.5 -> 6
    y = run("QuantizeLinear", x, f32(0.5))
    assert y.dtype == u8 and y.tolist() == [0, 2, 0, 6]


def test_quantize_output_dtype_attribute():
    x = np.array([-3, 3], f32)
    y = run("QuantizeLinear", x, f32(1), output_dtype=TensorProto.INT8)
    assert y.dtype == i8 and y.tolist() == [-3, 3]
    with pytest.raises(OpError, match="output_dtype i8 differs from the zero point's type u8"):
        run("QuantizeLinear", x, f32(1), u8(0), output_dtype=TensorProto.INT8)
    with pytest.raises(OpError, match="cannot quantize to f32"):
        run("QuantizeLinear", x, f32(1), output_dtype=TensorProto.FLOAT)


def test_quantize_per_axis():
    x = np.array([[[2, 4], [3, 6], [10, -10]]], f32)    # [1, 3, 2]
    scale, zp = np.array([2, 3, 5], f32), np.array([1, 0, -1], i8)
    expected = [[[2, 3], [1, 2], [1, -3]]]
    np.testing.assert_array_equal(run("QuantizeLinear", x, scale, zp, axis=1), expected)
    np.testing.assert_array_equal(run("QuantizeLinear", x, scale, zp, axis=-2), expected)
    y = run("QuantizeLinear", x[0].T.copy(), np.array([2, 4], f32), np.array([0, 100], u8), axis=0)
    np.testing.assert_array_equal(y, [[1, 2, 5], [101, 102, 98]])      # -10 / 4 = -2.5 -> -2


def test_quantize_blocked():
    x = np.arange(10, dtype=f32).reshape(2, 5)            # blocks of 2 along axis 1: [0 1] [2 3] [4]
    scale = np.array([[1, 2, 4], [2, 4, 8]], f32)
    zp = np.array([[0, 10, -10], [1, 2, 3]], i8)
    y = run("QuantizeLinear", x, scale, zp, axis=1, block_size=2)
    np.testing.assert_array_equal(y, [[0, 1, 11, 12, -9], [3, 4, 4, 4, 4]])
    # row 1: 5/2 = 2.5 -> 2, +1; 6/2 = 3, +1; 7/4 = 1.75 -> 2, +2; 8/4 = 2, +2; 9/8 = 1.125 -> 1, +3


def test_quantize_int32_input_and_half_scales():
    y = run("QuantizeLinear", np.array([7, -9, 100000], np.int32), f32(2), i8(0))
    np.testing.assert_array_equal(y, [4, -4, 127])           # 3.5 -> 4, -4.5 -> -4
    h = np.array([1.5, 2.5, 70000], np.float16)
    np.testing.assert_array_equal(run("QuantizeLinear", h, np.float16(1), u8(0)), [2, 2, 255])


def test_quantize_precision_attribute_sets_the_division_type():
    x, zp = np.array([2048.9, 3.0], f32), np.uint16(0)
    assert run("QuantizeLinear", x, f32(1), zp).tolist() == [2049, 3]
    assert run("QuantizeLinear", x, f32(1), zp, precision=TensorProto.FLOAT16).tolist() == [2048, 3]  # f16 step 2


def test_quantize_rank_1_input_implies_axis_0():
    y = run("QuantizeLinear", np.array([4, 4], f32), np.array([1, 2], f32), axis=1)
    assert y.tolist() == [4, 2]


def test_kernels_are_generic_over_float8_and_int4_numpy_types():
    """The IR may not know these types yet: the kernels are called directly on ml_dtypes arrays."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    quantize, dequantize = get_op("QuantizeLinear").reference, get_op("DequantizeLinear").reference
    attrs = {"axis": 1, "block_size": 0, "output_dtype": 0, "saturate": 1, "precision": 0}
    x = np.array([0, 1, 2, 100000, 200, -np.inf], f32)
    e4m3 = np.zeros((), ml_dtypes.float8_e4m3fn)
    y = quantize(OpContext(None, attrs), x, f32(2), e4m3)
    assert y.dtype == e4m3.dtype and y.astype(f32).tolist() == [0, 0.5, 1, 448, 96, -448]
    y = quantize(OpContext(None, {**attrs, "saturate": 0}), x, f32(2), e4m3)
    assert np.isnan(y.astype(f32)[3])                                   # e4m3fn has no infinity
    y = quantize(OpContext(None, attrs), np.array([-30, 2.5, 30], f32), f32(2), np.ones((), ml_dtypes.int4))
    assert y.dtype == ml_dtypes.int4 and y.astype(int).tolist() == [-8, 2, 7]
    back = dequantize(OpContext(None, {"axis": 1, "block_size": 0, "output_dtype": 0}), y, f32(2),
                      np.ones((), ml_dtypes.int4))
    assert back.tolist() == [-18, 2, 12]


def test_quantize_nan_gives_the_lowest_value_and_zero_scale_saturates():
    y = run("QuantizeLinear", np.array([np.nan, 1, -1, 0], f32), f32(0), i8(0))
    np.testing.assert_array_equal(y, [-128, 127, -128, -128])


# ---- DequantizeLinear -------------------------------------------------------------------------------------
def test_dequantize_per_tensor_and_negative_zero_point():
    y = run("DequantizeLinear", np.array([-128, -3, 0, 127], i8), f32(0.5), i8(-3))
    assert y.dtype == f32 and y.tolist() == [-62.5, 0, 1.5, 65]
    y = run("DequantizeLinear", np.array([0, 255], u8), f32(2))
    assert y.tolist() == [0, 510]


def test_dequantize_int32_exact_difference():
    x = np.array([-2**31, 2**31 - 1, 7, -7], np.int32)
    y = run("DequantizeLinear", x, f32(0.5))
    np.testing.assert_array_equal(y, np.array([-2**30, 2**30, 3.5, -3.5], f32))
    y = run("DequantizeLinear", x, f32(1), np.int32(-2**31))     # x - zp does not wrap
    np.testing.assert_array_equal(y, np.array([0, 2**32 - 1, 2**31 + 7, 2**31 - 7], np.float64).astype(f32))


def test_dequantize_per_axis_and_blocked():
    x = np.array([[10, 20, 30], [-10, -20, -30]], i8)
    y = run("DequantizeLinear", x, np.array([1, 0.5], f32), np.array([10, -10], i8), axis=0)
    np.testing.assert_array_equal(y, [[0, 10, 20], [0, -5, -10]])
    y = run("DequantizeLinear", x, np.array([[1, 2], [3, 4]], f32), np.array([[0, 1], [2, 3]], i8),
            axis=1, block_size=2)
    np.testing.assert_array_equal(y, [[10, 20, 58], [-36, -66, -132]])


def test_dequantize_output_type():
    x = np.array([1, 2], u8)
    assert run("DequantizeLinear", x, np.float16(0.5)).dtype == np.float16
    y = run("DequantizeLinear", x, np.float16(0.5), output_dtype=TensorProto.FLOAT)
    assert y.dtype == f32 and y.tolist() == [0.5, 1.0]


def test_quantize_then_dequantize_is_within_half_a_step():
    x = rng.uniform(-1, 1, (3, 4, 5)).astype(f32)                 # inside every channel's range
    scale, zp = np.array([0.05, 0.1, 0.02, 0.04], f32), np.array([0, 5, -5, 1], i8)
    q = run("QuantizeLinear", x, scale, zp, axis=1)
    back = run("DequantizeLinear", q, scale, zp, axis=1)
    assert np.all(np.abs(back - x) <= scale[:, None] / 2 + 1e-6)


# ---- DynamicQuantizeLinear -----------------------------------------------------------------------------------
@pytest.mark.parametrize("x, scale, zero_point, y", [
    ([-55, 0, 200, 2.5, 3.5], 1, 55, [0, 55, 255, 57, 59]),          # range 255: scale 1; ties to even
    ([0.5, 255], 1, 0, [0, 255]),                                      # min widened to 0
    ([-255, -1.5], 1, 255, [0, 253]),                                  # max widened to 0
    ([-127.5, 127.5], 1, 128, [0, 255]),                               # zero point 127.5 -> 128
    ([0, 0], 1, 0, [0, 0]),                                            # empty range: scale 1
    ([np.nan, -1, 254], 1, 1, [0, 0, 255]),                            # NaN left out of the range
])
def test_dynamic_quantize(x, scale, zero_point, y):
    q, s, z = run("DynamicQuantizeLinear", np.array(x, f32), outputs=3)
    assert (q.dtype, s.dtype, z.dtype, s.shape, z.shape) == (u8, f32, u8, (), ())
    assert s == scale and z == zero_point
    np.testing.assert_array_equal(q, y)


def test_dynamic_quantize_scale_is_float32_arithmetic():
    x = np.array([-1, 3], f32)
    _, s, z = run("DynamicQuantizeLinear", x, outputs=3)
    assert s == f32(4) / f32(255) and z == 64                         # 1 / (4/255) = 63.75 -> 64


# ---- MatMulInteger -----------------------------------------------------------------------------------------
def loop_matmul(a, b):
    m, k = a.shape
    n = b.shape[1]
    return np.array([[sum(int(a[i, t]) * int(b[t, j]) for t in range(k)) for j in range(n)] for i in range(m)])


def test_matmul_integer_per_row_and_per_column_zero_points():
    a = rng.integers(0, 256, (3, 4), dtype=u8)
    b = rng.integers(-128, 128, (4, 5), dtype=i8)
    a_zp, b_zp = np.array([7, 100, 255], u8), rng.integers(-128, 128, 5, dtype=i8)
    y = run("MatMulInteger", a, b, a_zp, b_zp)
    expected = loop_matmul(a.astype(int) - a_zp[:, None], b.astype(int) - b_zp[None, :])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)


def test_matmul_integer_batched_zero_points_and_vectors():
    a = rng.integers(0, 256, (2, 3, 4), dtype=u8)
    b = rng.integers(0, 256, (2, 4, 5), dtype=u8)
    a_zp = rng.integers(0, 256, (2, 3, 1), dtype=u8)
    b_zp = rng.integers(0, 256, (2, 1, 5), dtype=u8)
    y = run("MatMulInteger", a, b, a_zp, b_zp)
    for n in range(2):
        np.testing.assert_array_equal(y[n], loop_matmul(a[n].astype(int) - a_zp[n], b[n].astype(int) - b_zp[n]))
    v = rng.integers(0, 256, 4, dtype=u8)
    np.testing.assert_array_equal(run("MatMulInteger", v, b[0], u8(3)), (v.astype(int) - 3) @ b[0].astype(int))
    np.testing.assert_array_equal(run("MatMulInteger", a[0], v), a[0].astype(int) @ v.astype(int))


def test_matmul_integer_wraps_like_an_int32_accumulator():
    k = 40000                                                          # 40000 * 255 * 255 > 2**31
    y = run("MatMulInteger", np.full((1, k), 255, u8), np.full((k, 1), 255, u8))
    assert y[0, 0] == k * 255 * 255 - 2**32


def test_integer_matmul_is_exact_beyond_float64():
    a = np.array([[2**40, 1]], np.int64)
    b = np.array([[2**20], [3]], np.int64)
    assert integer_matmul(a, b)[0, 0] == 2**60 + 3                    # 2**60 + 3 is not a float64


# ---- ConvInteger and QLinearConv ----------------------------------------------------------------------------
def loop_conv2d(x, w, pads=(0, 0, 0, 0), strides=(1, 1)):
    """Integer 2-D convolution (one group) by loops; x, w hold Python-int-valued arrays (already centered)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    padded = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), np.int64)
    padded[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh, ow = (padded.shape[2] - kh) // strides[0] + 1, (padded.shape[3] - kw) // strides[1] + 1
    y = np.zeros((n, m, oh, ow), np.int64)
    for b, o, i, j in itertools.product(range(n), range(m), range(oh), range(ow)):
        patch = padded[b, :, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
        y[b, o, i, j] = int((patch * w[o]).sum())
    return y


def test_conv_integer_hand_case_padding_reads_the_zero_point():
    x = np.arange(1, 10, dtype=u8).reshape(1, 1, 3, 3)
    w = np.ones((1, 1, 2, 2), u8)
    y = run("ConvInteger", x, w, u8(1), pads=[1, 1, 1, 1])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y[0, 0], [[0, 1, 3, 2], [3, 8, 12, 7], [9, 20, 24, 13], [6, 13, 15, 8]])


def test_conv_integer_per_channel_weight_zero_points_and_strides():
    x = rng.integers(0, 256, (2, 3, 5, 6), dtype=u8)
    w = rng.integers(-128, 128, (4, 3, 3, 2), dtype=i8)
    x_zp, w_zp = u8(17), rng.integers(-128, 128, 4, dtype=i8)
    y = run("ConvInteger", x, w, x_zp, w_zp, pads=[1, 0, 2, 1], strides=[2, 1])
    wc = w.astype(np.int64) - w_zp[:, None, None, None]
    expected = loop_conv2d(x.astype(np.int64) - 17, wc, pads=(1, 0, 2, 1), strides=(2, 1))
    np.testing.assert_array_equal(y, expected)


def test_conv_integer_groups():
    x = rng.integers(0, 256, (1, 4, 4, 4), dtype=u8)
    w = rng.integers(0, 256, (2, 2, 3, 3), dtype=u8)
    y = run("ConvInteger", x, w, u8(128), u8(3), group=2)
    xc, wc = x.astype(np.int64) - 128, w.astype(np.int64) - 3
    for g in range(2):
        np.testing.assert_array_equal(y[:, g:g + 1], loop_conv2d(xc[:, 2 * g:2 * g + 2], wc[g:g + 1]))


def real_qlinear_conv(x, sx, zx, w, sw, zw, sy, zy, bias, **conv):
    """QLinearConv by its definition in float64: dequantize, convolve, add the bias, quantize."""
    real = loop_conv2d((x.astype(np.int64) - zx), (w.astype(np.int64) - zw[:, None, None, None]), **conv)
    real = (real + bias[None, :, None, None]) * (np.float64(sx) * sw.astype(np.float64)[None, :, None, None])
    q = np.rint(real / np.float64(sy)) + int(zy)
    info = np.iinfo(zy.dtype)
    return np.clip(q, info.min, info.max).astype(zy.dtype)


@pytest.mark.parametrize("out_type", [u8, i8])
def test_qlinear_conv_per_channel_with_bias(out_type):
    x = rng.integers(0, 256, (1, 2, 4, 5), dtype=u8)
    w = rng.integers(-127, 128, (3, 2, 2, 2), dtype=i8)
    sw, zw = np.array([0.01, 0.02, 0.005], f32), np.zeros(3, i8)
    bias = np.array([100, -2000, 30000], np.int32)
    zy = out_type(120 if out_type == u8 else -5)
    args = (x, f32(0.02), u8(130), w, sw, zw, f32(0.05), zy, bias)
    y = run("QLinearConv", *args, pads=[0, 1, 0, 1])
    assert y.dtype == out_type
    np.testing.assert_array_equal(y, real_qlinear_conv(*args, pads=(0, 1, 0, 1)))


def test_qlinear_conv_rounds_ties_to_even():
    # each output is x * 0.5 * 1 / 1 with x - zp in {1, 3, 5}: 0.5, 1.5, 2.5 -> 0, 2, 2
    x = np.array([1, 3, 5], u8).reshape(1, 1, 1, 3)
    y = run("QLinearConv", x, f32(0.5), u8(0), np.ones((1, 1, 1, 1), i8), f32(1), i8(0), f32(1), u8(10))
    np.testing.assert_array_equal(y.reshape(-1), [10, 12, 12])


# ---- QLinearMatMul ----------------------------------------------------------------------------------------
def test_qlinear_matmul_hand_case_rounds_a_tie_to_even():
    # a - zp = [0, 2] -> [0, 1]; b - zp = [2, 4] -> [0.5, 1]; product 1.0 / 0.4 = 2.5 -> 2; + 10
    y = run("QLinearMatMul", np.array([[2, 4]], u8), f32(0.5), u8(2), np.array([[1], [3]], i8), f32(0.25),
            i8(-1), f32(0.4), u8(10))
    assert y.dtype == u8 and y.tolist() == [[12]]


def test_qlinear_matmul_per_row_and_per_column_against_float_definition():
    a = rng.integers(-128, 128, (2, 3, 4), dtype=i8)
    b = rng.integers(0, 256, (4, 5), dtype=u8)
    sa, za = np.array([0.1, 0.2, 0.05], f32), np.array([1, -2, 3], i8)
    sb, zb = rng.uniform(0.01, 0.03, 5).astype(f32), rng.integers(100, 150, 5, dtype=u8)
    sy, zy = f32(0.3), i8(-7)
    y = run("QLinearMatMul", a, sa, za, b, sb, zb, sy, zy)
    real = ((a.astype(np.float64) - za[:, None]) * sa.astype(np.float64)[:, None]) @ \
        ((b.astype(np.float64) - zb) * sb.astype(np.float64))
    np.testing.assert_array_equal(y, np.clip(np.rint(real / np.float64(sy)) + zy, -128, 127).astype(i8))


def test_qlinear_matmul_saturates():
    a = np.array([[255, 0]], u8)
    b = np.array([[255], [0]], u8)
    assert run("QLinearMatMul", a, f32(1), u8(0), b, f32(1), u8(0), f32(1), i8(0)).item() == 127
    assert run("QLinearMatMul", a, f32(1), u8(0), b, f32(1), u8(255), f32(1), u8(0)).item() == 0


# ---- inference ------------------------------------------------------------------------------------------------
INPUTS = ("x: f32[N,3,4], s3: f32[3], s4: f32[4], s: f32[], s1: f32[1], zu: u8[], zi: i8[], z3: u8[3], z4: u8[4], "
          "sb: f32[N,3,2], zb: u8[N,3,2], q: u8[N,3,4], qi: i8[N,3,4], q32: i32[N,3,4], h: f16[], "
          "a: u8[M,K], b: i8[K,5], azp: u8[M], bzp: i8[5], bzp4: i8[4], sa: f32[M], ib: i32[5], "
          "c: u8[3,4], img: u8[1,3,8,8], w: i8[6,3,3,3], w6: f32[6], wz6: i8[6], b6: i32[6], b5: i32[5], ws: f32[5]")


def types(body):
    return output_types(body, INPUTS)


@pytest.mark.parametrize("body, expected", [
    ("[y] = QuantizeLinear(x, s)", "u8[N,3,4]"),
    ("[y] = QuantizeLinear(x, s1, zi)", "i8[N,3,4]"),
    ("[y] = QuantizeLinear(x, s3, z3) {axis=1}", "u8[N,3,4]"),
    ("[y] = QuantizeLinear(x, s4) {axis=-1, output_dtype=3}", "i8[N,3,4]"),
    ("[y] = QuantizeLinear(x, sb, zb) {axis=2, block_size=2}", "u8[N,3,4]"),
    ("[y] = DequantizeLinear(q, s3, z3) {axis=1}", "f32[N,3,4]"),
    ("[y] = DequantizeLinear(q32, s)", "f32[N,3,4]"),
    ("[y] = DequantizeLinear(qi, h, zi)", "f16[N,3,4]"),
    ("[y] = DequantizeLinear(qi, s) {output_dtype=10}", "f16[N,3,4]"),
    ("[y, ys, yz] = DynamicQuantizeLinear(x)", "u8[N,3,4]; f32[]; u8[]"),
    ("[y] = MatMulInteger(a, b, azp, bzp)", "i32[M,5]"),
    ("[y] = QLinearMatMul(a, sa, azp, b, ws, bzp, s, zi)", "i8[M,5]"),
    ("[y] = ConvInteger(img, w, zu, wz6) {pads=[1, 1, 1, 1]}", "i32[1,6,8,8]"),
    ("[y] = QLinearConv(img, s, zu, w, w6, wz6, s, zi, b6) {strides=[2, 2]}", "i8[1,6,3,3]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert types(body) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = QuantizeLinear(x, s3, z4) {axis=1}", r"y_zero_point of shape \[4\] must have the shape of y_scale \[3\]"),
    ("[y] = QuantizeLinear(x, s3) {axis=2}", r"y_scale has 3 values but x of shape \[N,3,4\] has 4 along axis 2"),
    ("[y] = QuantizeLinear(x, s3) {axis=3}", "axis 3 is out of range for rank 3"),
    ("[y] = QuantizeLinear(x, sb, zb) {axis=2}", "must be a scalar or 1-D .per axis.; blocked quantization needs"),
    ("[y] = QuantizeLinear(x, sb, zb) {axis=2, block_size=4}", r"in blocks of 4 along axis 2: it must have shape"),
    ("[y] = QuantizeLinear(x, sb) {axis=2, block_size=-1}", "block_size must be positive"),
    ("[y] = QuantizeLinear(x, s, zi) {output_dtype=2}", "output_dtype u8 differs from the zero point's type i8"),
    ("[y] = QuantizeLinear(q, s)", "x must be"),
    ("[y] = QuantizeLinear(x, s, q32)", "cannot quantize to i32"),
    ("[y] = DequantizeLinear(q, s, zi)", "x_zero_point has dtype i8 but x has u8"),
    ("[y] = DequantizeLinear(x, s)", "x has dtype f32; DequantizeLinear takes"),
    ("[y] = DequantizeLinear(q, zu)", "x_scale must be"),
    ("[y] = DequantizeLinear(q, s) {output_dtype=6}", "output_dtype must be a float type, got i32"),
    ("[y, ys, yz] = DynamicQuantizeLinear(q)", "x must be float32, got u8"),
    ("[y] = MatMulInteger(a, b, azp, bzp4)", r"b_zero_point of shape \[4\] must be a scalar or have one value per "
                                             "column"),
    ("[y] = MatMulInteger(a, b, zu, zu)", "b_zero_point has dtype u8 but B has i8"),
    ("[y] = MatMulInteger(x, b)", "A must be uint8 or int8, got f32"),
    ("[y] = MatMulInteger(c, c)", "inner dimensions differ"),
    ("[y] = QLinearMatMul(a, sa, azp, b, ws, bzp, s3, zi)", r"y_scale must hold one value"),
    ("[y] = QLinearMatMul(a, h, zu, b, s, zi, s, zi)", "b_scale has dtype f32 but a_scale has f16"),
    ("[y] = QLinearMatMul(a, sa, zu, b, ws, bzp, s, zi)", r"a_zero_point of shape \[\] must have the shape of a_scale"),
    ("[y] = ConvInteger(img, w, z3)", "x_zero_point must hold one value"),
    ("[y] = ConvInteger(img, w, zu, bzp)", r"w_zero_point of shape \[5\] must be a scalar or 1-D with one value per "
                                           r"output channel \(6\)"),
    ("[y] = QLinearConv(img, s, zu, w, ws, wz6, s, zi)", r"w_scale of shape \[5\] must be a scalar or 1-D"),
    ("[y] = QLinearConv(img, s, zu, w, w6, wz6, s, zi, b5)", "bias of shape"),
    ("[y] = QLinearConv(img, s, zu, w, w6, wz6, s, zi, w6)", "B must be int32, got f32"),
    ("[y] = QLinearConv(img, s, zu, w, w6, wz6, s, zi) {group=2}", "input has 3 channels but weights expect"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body)


def test_kernel_errors_name_the_node():
    with pytest.raises(OpError, match=r"QuantizeLinear node .*y_scale has 2 values but x of shape \[3\]"):
        run("QuantizeLinear", np.zeros(3, f32), np.ones(2, f32), axis=0)
    with pytest.raises(OpError, match="one value per column"):
        run("MatMulInteger", np.zeros((2, 3), u8), np.zeros((3, 4), u8), None, np.zeros(3, u8))


def test_quantization_ops_are_never_fused_but_a_pair_becomes_fusable_arithmetic():
    g = snipjit.parse_graph("""graph(x: f32[2,8]) -> [y] {
        const s: f32[] = 0.5
        const z: i8[] = 3
        [q] = QuantizeLinear(x, s, z)
        [d] = DequantizeLinear(q, s, z)
        [y] = Relu(d)
    }""")
    assert not any(get_op(op).category.is_elementwise for op in QUANT_OPS)   # no layout or broadcast moves
    assert not any(is_supported(node) for node in g.nodes[:2])
    unfused = snipjit.compile(g, fuse=False)
    assert [n.op for n in unfused.graph.nodes][:2] == ["QuantizeLinear", "DequantizeLinear"]
    cm = snipjit.compile(g)   # the per-tensor pair becomes arithmetic (DecomposeFakeQuantize), fused with Relu
    assert [s.ops for s in cm.plan] == [["Div", "Round", "Clip", "Mul", "Relu"]]
    x = rng.standard_normal((2, 8)).astype(f32)
    expected = np.maximum((np.clip(np.rint(x / 0.5) + 3, -128, 127) - 3) * 0.5, 0)
    for model in (unfused, cm):
        np.testing.assert_array_equal(model.run({"x": x})[0], expected)


# ---- compiled ONNX models ---------------------------------------------------------------------------------------
def onnx_model(nodes, inputs, outputs, initializers=(), opset=21):
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi(n, t, s) for n, t, s in inputs], [vi(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
def test_compiled_quantize_dequantize_roundtrip(opset):
    per_axis = opset >= 13
    scale = np.array([0.1, 0.2, 0.4], f32) if per_axis else np.array(0.2, f32)
    zp = np.array([0, -3, 5], i8) if per_axis else np.array(-3, i8)
    model = onnx_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
                       [("x", TensorProto.FLOAT, [2, 3, 4])], [("q", TensorProto.INT8), ("y", TensorProto.FLOAT)],
                       [("s", scale), ("z", zp)], opset)
    x = rng.uniform(-30, 30, (2, 3, 4)).astype(f32)
    q, y = snipjit.compile(model).run({"x": x})
    s, z = (scale[:, None], zp[:, None].astype(int)) if per_axis else (scale, int(zp))
    np.testing.assert_array_equal(q, np.clip(np.rint(x / s) + z, -128, 127))
    np.testing.assert_array_equal(y, ((q.astype(np.int64) - z) * s).astype(f32))


def test_compiled_blocked_dequantize_of_weights_then_matmul():
    w = rng.integers(-8, 8, (6, 4), dtype=i8)
    scale = rng.uniform(0.1, 1, (2, 4)).astype(f32)                 # blocks of 3 rows
    model = onnx_model([helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=0, block_size=3),
                        helper.make_node("MatMul", ["x", "wf"], ["y"])],
                       [("x", TensorProto.FLOAT, [2, 6])], [("y", TensorProto.FLOAT)], [("w", w), ("s", scale)])
    x = rng.standard_normal((2, 6)).astype(f32)
    expected = x @ (w.astype(f32) * np.repeat(scale, 3, axis=0))
    np.testing.assert_allclose(snipjit.compile(model).run({"x": x})[0], expected, rtol=1e-5, atol=1e-5)


def test_compiled_integer_ops():
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=i8)
    wz = rng.integers(-5, 5, 4, dtype=i8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("ConvInteger", ["q", "w", "qz", "wz"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QLinearConv", ["q", "qs", "qz", "w", "ws", "wz", "ys", "yz"], ["qc"], pads=[1, 1, 1, 1]),
             helper.make_node("QLinearMatMul", ["q", "qs", "qz", "m", "ms", "mz", "ys", "yz"], ["qm"]),
             helper.make_node("MatMulInteger", ["q", "m", "qz", "mz"], ["mi"])]
    inits = [("w", w), ("wz", wz), ("ws", np.full(4, 0.01, f32)), ("ys", np.array(0.05, f32)),
             ("yz", np.array(100, u8)), ("m", rng.integers(0, 256, (5, 2), dtype=u8)), ("ms", np.array(0.02, f32)),
             ("mz", np.array(128, u8))]
    model = onnx_model(nodes, [("x", TensorProto.FLOAT, [1, 3, 4, 5])],
                       [(n, t) for n, t in [("q", TensorProto.UINT8), ("c", TensorProto.INT32),
                                            ("qc", TensorProto.UINT8), ("qm", TensorProto.UINT8),
                                            ("mi", TensorProto.INT32)]], inits)
    x = rng.standard_normal((1, 3, 4, 5)).astype(f32)
    got = snipjit.compile(model).run({"x": x})
    q, qs, qz = run("DynamicQuantizeLinear", x, outputs=3)
    consts = dict(inits)
    expected = [q, run("ConvInteger", q, w, qz, wz, pads=[1, 1, 1, 1]),
                run("QLinearConv", q, qs, qz, w, consts["ws"], wz, consts["ys"], consts["yz"], pads=[1, 1, 1, 1]),
                run("QLinearMatMul", q, qs, qz, consts["m"], consts["ms"], consts["mz"], consts["ys"], consts["yz"]),
                run("MatMulInteger", q, consts["m"], qz, consts["mz"])]
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


# ---- against onnxruntime.quantization ------------------------------------------------------------------------------
def float_model() -> onnx.ModelProto:
    """Conv (bias, stride 2, pads) -> Relu -> Reshape -> MatMul: what the quantizers rewrite."""
    inits = [("w1", rng.standard_normal((4, 3, 3, 3)).astype(f32) * 0.3), ("b1", rng.standard_normal(4).astype(f32)),
             ("w2", rng.standard_normal((64, 5)).astype(f32) * 0.2), ("shape", np.array([0, -1], np.int64))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "w2"], ["y"])]
    return onnx_model(nodes, [("x", TensorProto.FLOAT, [2, 3, 8, 8])], [("y", TensorProto.FLOAT)], inits, opset=17)


def with_outputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """The model with these intermediate values as extra graph outputs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    return model


def run_both(model: onnx.ModelProto, x: np.ndarray, fused: bool = True):
    """onnxruntime's outputs and snipjit's; `fused=False` keeps onnxruntime to the graph's own operators."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    if not fused:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x}), snipjit.compile(model).run({"x": x})


def test_static_qdq_per_channel_model_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((2, 3, 8, 8)).astype(f32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    onnx.save(float_model(), tmp_path / "float.onnx")
    quantize_static(tmp_path / "float.onnx", tmp_path / "qdq.onnx", Calibration(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    model = onnx.load(tmp_path / "qdq.onnx")
    ops = [n.op_type for n in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert any(consts[n.input[1]].size > 1 for n in model.graph.node if n.op_type == "DequantizeLinear")  # per channel
    last = next(n for n in model.graph.node if n.output[0] == "y")
    step = float(consts[last.input[1]])
    x = rng.standard_normal((2, 3, 8, 8)).astype(f32) * 1.5
    # Fused into QLinearConv, onnxruntime's u8s8 products saturate 16-bit pair sums on AVX2 without VNNI
    # (vpmaddubsw), several steps off; its unfused operators are exact.
    (expected,), (got,) = run_both(model, x, fused=False)
    assert np.max(np.abs(got - expected)) <= step * 1.0001


def test_dynamic_model_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(float_model(), tmp_path / "float.onnx")
    quantize_dynamic(tmp_path / "float.onnx", tmp_path / "dynamic.onnx", weight_type=QuantType.QInt8)
    model = onnx.load(tmp_path / "dynamic.onnx")
    integer_nodes = [n for n in model.graph.node if n.op_type in ("DynamicQuantizeLinear", "ConvInteger",
                                                                   "MatMulInteger")]
    assert {n.op_type for n in integer_nodes} == {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"}
    final = next(n for n in model.graph.node if n.output[0] == "y")
    assert final.op_type == "Mul"                                     # y = MatMulInteger's int32 result * step
    intermediates = [o for n in integer_nodes for o in n.output] + [final.input[1]]
    x = rng.standard_normal((2, 3, 8, 8)).astype(f32)
    expected, got = run_both(with_outputs(model, intermediates), x)
    for e, g in zip(expected[1:], got[1:]):                           # quantized values, scales, int32 products
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
    step = float(got[-1])
    assert np.max(np.abs(got[0] - expected[0])) <= step
    (plain,), _ = run_both(model, x)                                  # onnxruntime fusing as it likes
    assert np.max(np.abs(got[0] - plain)) <= step
