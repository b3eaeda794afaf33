"""Elementwise ops: inference on IR text (broadcasting, dtypes, errors) and reference kernels against
hand-computed or independently computed results."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import snipjit.ops.elementwise  # noqa: F401  (registers the ops)
from snipjit import parse_graph
from snipjit.ops import OpError
from snipjit.ops.common import evaluate
from op_cases import output_types


def run(op, *inputs, **attrs):
    """The single output of `op` on constant inputs (None: missing optional input)."""
    return evaluate(op, inputs, attrs)[0]


def a(values, dt="float32"):
    return np.array(values, dtype=dt)


def types(text):
    g = parse_graph(text)
    return [str(v.type) for v in g.outputs]


# ---- inference -----------------------------------------------------------------------------------
def test_broadcasting_keeps_named_dims_and_dtypes():
    assert types("""graph(x: f32[batch,1,384], y: f32[seq,1], c: bool[batch,seq,1], i: i32[*]) -> [s, t, w, u, n] {
        [s] = Add(x, y)
        [t] = Less(x, y)
        [w] = Where(c, x, y)
        [u] = Neg(i)
        [n] = IsNaN(x)
    }""") == ["f32[batch,seq,384]", "bool[batch,seq,384]", "f32[batch,seq,384]", "i32[*]", "bool[batch,1,384]"]


def test_variadic_ops_broadcast_all_inputs():
    assert types("""graph(x: f32[3,1], y: f32[4], z: f32[1,1]) -> [m, s] {
        [m] = Max(x, y, z)
        [s] = Mean(x)
    }""") == ["f32[3,4]", "f32[3,1]"]


def test_pow_output_has_the_base_dtype_and_cast_the_target_dtype():
    assert types("""graph(x: f16[2,?], e: i64[1], like: i8[0]) -> [p, c, n, l] {
        [p] = Pow(x, e)
        [c] = Cast(x) {to=6}
        [n] = Cast(x) {to="bool"}
        [l] = CastLike(x, like)
    }""") == ["f16[2,?]", "i32[2,?]", "bool[2,?]", "i8[2,?]"]


@pytest.mark.parametrize("text, message", [
    ("[y] = Add(x, i)", "input 1 has dtype i32 but input 0 has f32"),
    ("[y] = Sqrt(i)", "input 0 has dtype i32; Sqrt takes bf16, f16, f32, f64"),
    ("[y] = Not(x)", "takes bool"),
    ("[y] = Neg(u)", "input 0 has dtype u8"),
    ("[y] = Add(x, w)", "3 and 5 do not broadcast"),
    ("[y] = Where(x, x, x)", "input 0 has dtype f32; Where takes bool"),
    ("[y] = Clip(x, x)", "min must be a scalar"),
    ("[y] = PRelu(s, x)", r"slope of shape \[2,3\] does not broadcast to \[3\]"),
    ("[y] = BitShift(i, i) {direction=\"UP\"}", "direction='UP' must be one of"),
    ("[y] = BitShift(i, i)", "required attribute 'direction'"),
    ("[y] = Gelu(x) {approximate=\"fast\"}", "approximate='fast'"),
    ("[y] = Mod(i, i) {fmod=2}", "fmod=2"),
    ("[y] = Cast(x) {to=99}", "to=99"),
    ("[y] = Relu(x) {alpha=1.0}", "unknown attribute"),
])
def test_inference_errors_name_the_node(text, message):
    header = "graph(x: f32[2,3], s: f32[3], w: f32[5], i: i32[2,3], u: u8[3]) -> [y] {"
    with pytest.raises(OpError, match=rf"node producing 'y': .*{message}"):
        parse_graph(f"{header}\n{text}\n}}")


# ---- arithmetic ----------------------------------------------------------------------------------
def test_integer_division_truncates_toward_zero():
    x, y = a([7, -7, 7, -7, 6, -1], "int32"), a([2, 2, -2, -2, 3, 5], "int32")
    np.testing.assert_array_equal(run("Div", x, y), [3, -3, -3, 3, 2, 0])
    assert run("Div", x, y).dtype == np.int32
    np.testing.assert_array_equal(run("Div", a([255, 7], "uint8"), a([2, 8], "uint8")), [127, 0])


def test_integer_division_by_zero_is_an_error():
    with pytest.raises(OpError, match="integer division by zero"):
        run("Div", a([1, 2], "int64"), a([1, 0], "int64"))
    with pytest.raises(OpError, match="integer modulo by zero"):
        run("Mod", a([1, 2], "int64"), a([0, 1], "int64"))


def test_float_division_by_zero_follows_ieee():
    np.testing.assert_array_equal(run("Div", a([1, -1, 0]), a([0, 0, 0])), [np.inf, -np.inf, np.nan])


def test_mod_sign_follows_the_divisor_or_with_fmod_the_dividend():
    x, y = a([-4, 7, 5, 4, -7], "int32"), a([3, -3, 2, -3, -2], "int32")
    np.testing.assert_array_equal(run("Mod", x, y), [2, -2, 1, -2, -1])
    np.testing.assert_array_equal(run("Mod", x, y, fmod=1), [-1, 1, 1, 1, -1])
    np.testing.assert_array_equal(run("Mod", a([-4.5, 7.5]), a([2, -2]), fmod=1), [-0.5, 1.5])
    np.testing.assert_array_equal(run("Mod", a([-4.5, 7.5]), a([2, -2])), [1.5, -0.5])


@given(hnp.arrays(np.int32, 6, elements=st.integers(-1000, 1000)),
       hnp.arrays(np.int32, 6, elements=st.integers(-50, 50).filter(bool)))
@settings(max_examples=50, deadline=None)
def test_div_and_fmod_satisfy_the_c_identity(x, y):
    q, r = run("Div", x, y), run("Mod", x, y, fmod=1)
    np.testing.assert_array_equal(q * y + r, x)
    assert np.all(np.abs(r) < np.abs(y)) and np.all((r == 0) | (np.sign(r) == np.sign(x)))


@given(st.lists(st.integers(1, 3), min_size=0, max_size=3), st.lists(st.integers(1, 3), min_size=0, max_size=3),
       st.lists(st.booleans(), min_size=3, max_size=3))
@settings(max_examples=40, deadline=None)
def test_broadcast_result_matches_numpy(shape_a, shape_b, ones):
    shape_b = [1 if one else d for d, one in zip(shape_b, ones)]  # often broadcastable, sometimes not
    x = np.arange(int(np.prod(shape_a)), dtype=np.float32).reshape(shape_a)
    y = np.ones(shape_b, np.float32)
    try:
        expected = x + y
    except ValueError:
        with pytest.raises(OpError, match="do not broadcast"):
            run("Sub", x, y)
        return
    np.testing.assert_array_equal(run("Sub", x, y), expected - 2 * y)


def test_pow_mixes_dtypes_and_keeps_the_base_dtype():
    np.testing.assert_array_equal(run("Pow", a([1, 2, 3], "int32"), a([4, 5, 6], "float32")), [1, 32, 729])
    np.testing.assert_array_equal(run("Pow", a([2, 3], "int64"), a([-1, 2], "int64")), [0, 9])
    y = run("Pow", a([2, 4], "float16"), a([0.5, 2], "float64"))
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, [math.sqrt(2), 16], rtol=1e-3)


def test_variadic_sum_mean_max_min():
    x, y, z = a([[1], [4]]), a([2, 0, -3]), a(6)
    np.testing.assert_array_equal(run("Sum", x, y, z), [[9, 7, 4], [12, 10, 7]])
    np.testing.assert_array_equal(run("Mean", x, y, z), np.array([[9, 7, 4], [12, 10, 7]], np.float32) / 3)
    np.testing.assert_array_equal(run("Max", x, y), [[2, 1, 1], [4, 4, 4]])
    np.testing.assert_array_equal(run("Min", a([5, 1], "uint8")), [5, 1])
    np.testing.assert_array_equal(run("Min", x, y, z), [[1, 0, -3], [2, 0, -3]])


# ---- math functions ------------------------------------------------------------------------------
def test_round_is_half_to_even_and_floor_ceil():
    x = a([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6])
    np.testing.assert_array_equal(run("Round", x), [0, 2, 2, -0, -2, 2, -3])
    np.testing.assert_array_equal(run("Floor", x), [0, 1, 2, -1, -2, 2, -3])
    np.testing.assert_array_equal(run("Ceil", x), [1, 2, 3, -0, -1, 3, -2])


_MATH = {"Sqrt": math.sqrt, "Exp": math.exp, "Log": math.log, "Erf": math.erf, "Sin": math.sin,
         "Cos": math.cos, "Tan": math.tan, "Asin": math.asin, "Acos": math.acos, "Atan": math.atan,
         "Sinh": math.sinh, "Cosh": math.cosh, "Tanh": math.tanh, "Asinh": math.asinh,
         "Acosh": math.acosh, "Atanh": math.atanh, "Reciprocal": lambda v: 1 / v,
         "Sigmoid": lambda v: 1 / (1 + math.exp(-v)), "Softplus": lambda v: math.log1p(math.exp(v)),
         "Softsign": lambda v: v / (1 + abs(v)), "Mish": lambda v: v * math.tanh(math.log1p(math.exp(v))),
         "HardSwish": lambda v: v * min(1, max(0, v / 6 + 0.5)),
         "Gelu": lambda v: v / 2 * (1 + math.erf(v / math.sqrt(2)))}


_DOMAIN = {"Acosh": [1.05, 1.3, 1.7, 2.5], "Sqrt": [0.05, 0.5, 2.0, 7.5], "Log": [0.05, 0.5, 2.0, 7.5]}


@pytest.mark.parametrize("op", sorted(_MATH))
@pytest.mark.parametrize("dt, rtol", [("float32", 1e-6), ("float64", 1e-13), ("float16", 1e-3)])
def test_float_functions_match_the_math_module(op, dt, rtol):
    x = a(_DOMAIN.get(op, [-0.9, -0.3, 0.05, 0.6, 0.95]), dt)
    y = run(op, x)
    assert y.dtype == np.dtype(dt)
    expected = [_MATH[op](v) for v in x.tolist()]
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=rtol, atol=rtol * 1e-3)


def test_functions_give_ieee_specials():
    assert np.isnan(run("Sqrt", a([-1]))).all()
    np.testing.assert_array_equal(run("Log", a([0])), [-np.inf])
    np.testing.assert_array_equal(run("Sigmoid", a([-1000, 1000])), [0, 1])
    np.testing.assert_array_equal(run("Softplus", a([1000, -1000])), [1000, 0])


@pytest.mark.parametrize("op, attrs", [("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("HardSwish", {}),
                                       ("Mish", {})])
def test_gated_activations_reach_their_limit_at_minus_inf(op, attrs):
    """x · gate(x) with gate(-inf) = 0 is -0 there (the generated kernels agree), not inf · 0 = NaN."""
    y = run(op, a([-np.inf, -0.0, np.inf, np.nan]), **attrs)
    np.testing.assert_array_equal(np.signbit(y[:2]), [True, True])
    np.testing.assert_array_equal(y[:3], [0, 0, np.inf])
    assert np.isnan(y[3])


def test_is_inf_detects_the_chosen_signs():
    x = a([np.inf, -np.inf, np.nan, 1])
    np.testing.assert_array_equal(run("IsInf", x), [True, True, False, False])
    np.testing.assert_array_equal(run("IsInf", x, detect_negative=0), [True, False, False, False])
    np.testing.assert_array_equal(run("IsInf", x, detect_positive=0), [False, True, False, False])
    np.testing.assert_array_equal(run("IsNaN", x), [False, False, True, False])


def test_sign_abs_neg_on_integers():
    np.testing.assert_array_equal(run("Sign", a([-5, 0, 3], "int8")), [-1, 0, 1])
    np.testing.assert_array_equal(run("Abs", a([-5, 0, 3], "int16")), [5, 0, 3])
    np.testing.assert_array_equal(run("Neg", a([-5, 0, 3], "int64")), [5, 0, -3])


# ---- activations ---------------------------------------------------------------------------------
def test_parametrised_activations_by_hand():
    x = a([-2, -0.5, 0, 0.5, 2])
    e = math.e
    cases = {
        ("Relu", ()): [0, 0, 0, 0.5, 2],
        ("LeakyRelu", (("alpha", 0.1),)): [-0.2, -0.05, 0, 0.5, 2],
        ("Elu", (("alpha", 2.0),)): [2 * (e ** -2 - 1), 2 * (e ** -0.5 - 1), 0, 0.5, 2],
        ("Selu", (("alpha", 2.0), ("gamma", 3.0))): [6 * (e ** -2 - 1), 6 * (e ** -0.5 - 1), 0, 1.5, 6],
        ("Celu", (("alpha", 2.0),)): [2 * (e ** -1 - 1), 2 * (e ** -0.25 - 1), 0, 0.5, 2],
        ("HardSigmoid", (("alpha", 0.5), ("beta", 0.6))): [0, 0.35, 0.6, 0.85, 1],
        ("ThresholdedRelu", (("alpha", 0.5),)): [0, 0, 0, 0, 2],
        ("Shrink", (("bias", 0.25), ("lambd", 0.5))): [-1.75, 0, 0, 0, 1.75],
    }
    for (op, attrs), expected in cases.items():
        np.testing.assert_allclose(run(op, x, **dict(attrs)), expected, rtol=1e-6, err_msg=op)


def test_gelu_tanh_approximation():
    x = a([-1.5, 0.3, 2])
    c = math.sqrt(2 / math.pi)
    expected = [v / 2 * (1 + math.tanh(c * (v + 0.044715 * v ** 3))) for v in x.tolist()]
    np.testing.assert_allclose(run("Gelu", x, approximate="tanh"), expected, rtol=1e-6)


def test_prelu_slope_broadcasts_per_channel():
    x = a([[[-1, 2]], [[-3, -4]]])  # [2,1,2]
    slope = a([[0.5], ])            # [1,1] -> broadcast to [2,1,2]
    np.testing.assert_array_equal(run("PRelu", x, slope), [[[-0.5, 2]], [[-1.5, -2]]])
    np.testing.assert_array_equal(run("PRelu", a([-2, 3], "int32"), a([3, 3], "int32")), [-6, 3])


def test_shrink_on_integers():
    np.testing.assert_array_equal(run("Shrink", a([-3, 0, 3], "int32"), bias=1.0, lambd=1.5), [-2, 0, 2])


# ---- comparisons, logic, bits --------------------------------------------------------------------
def test_comparisons_and_logic():
    x, y = a([1, 2, 3]), a([2, 2, 2])
    assert run("Less", x, y).tolist() == [True, False, False]
    assert run("LessOrEqual", x, y).tolist() == [True, True, False]
    assert run("GreaterOrEqual", x, y).tolist() == [False, True, True]
    assert run("Equal", np.array(["a", "b"]), np.array(["a", "c"])).tolist() == [True, False]
    p, q = a([True, True, False, False], "bool"), a([True, False, True, False], "bool")
    assert run("And", p, q).tolist() == [True, False, False, False]
    assert run("Or", p, q).tolist() == [True, True, True, False]
    assert run("Xor", p, q).tolist() == [False, True, True, False]
    assert run("Not", p).tolist() == [False, False, True, True]


def test_bitwise_ops():
    x, y = a([0b1100, 0b1010], "uint8"), a([0b1010, 0b0110], "uint8")
    assert run("BitwiseAnd", x, y).tolist() == [0b1000, 0b0010]
    assert run("BitwiseOr", x, y).tolist() == [0b1110, 0b1110]
    assert run("BitwiseXor", x, y).tolist() == [0b0110, 0b1100]
    assert run("BitwiseNot", a([0, -1], "int8")).tolist() == [-1, 0]


def test_bit_shift_amounts_out_of_range_leave_the_sign_fill():
    assert run("BitShift", a([1, 2, 255], "uint8"), a([1, 2, 8], "uint8"), direction="LEFT").tolist() == [2, 8, 0]
    assert run("BitShift", a([16, 255], "uint8"), a([2, 9], "uint8"), direction="RIGHT").tolist() == [4, 0]
    x = a([-16, -16, 16, 64], "int8")
    assert run("BitShift", x, a([2, 8, -1, 1], "int8"), direction="RIGHT").tolist() == [-4, -1, 0, 32]
    assert run("BitShift", x, a([1, 8, 1, 1], "int8"), direction="LEFT").tolist() == [-32, 0, 32, -128]


# ---- Where, Clip, Cast ---------------------------------------------------------------------------
def test_where_broadcasts_its_three_inputs():
    c = a([[True], [False]], "bool")
    np.testing.assert_array_equal(run("Where", c, a([1, 2]), a(9)), [[1, 2], [9, 9]])


def test_clip_with_optional_bounds():
    x = a([-5, 0, 5], "int32")
    assert run("Clip", x, a(-1, "int32"), a(2, "int32")).tolist() == [-1, 0, 2]
    assert run("Clip", x, None, a(2, "int32")).tolist() == [-5, 0, 2]
    assert run("Clip", x, a(-1, "int32")).tolist() == [-1, 0, 5]
    assert run("Clip", x).tolist() == [-5, 0, 5]
    assert run("Clip", x, a(3, "int32"), a(1, "int32")).tolist() == [1, 1, 1]  # min > max gives max


def test_cast_truncates_floats_and_handles_bool_and_strings():
    x = a([-2.7, -0.5, 0, 0.5, 2.7])
    assert run("Cast", x, to=7).tolist() == [-2, 0, 0, 0, 2]
    assert run("Cast", x, to=9).tolist() == [True, True, False, True, True]
    assert run("Cast", a([True, False], "bool"), to="f32").tolist() == [1.0, 0.0]
    assert run("Cast", a([300], "int32"), to="u8").tolist() == [44]
    y = run("Cast", np.array(["1.5", "-INF", "+inf", "1e-3"]), to=1)
    np.testing.assert_array_equal(y, a([1.5, -np.inf, np.inf, 1e-3]))
    assert np.isnan(run("Cast", np.array(["NaN"]), to=11)).all()
    assert run("Cast", a([1.5, -2]), to=8).tolist() == ["1.5", "-2.0"]
    assert run("Cast", a([1.5]), to="f16", saturate=0).dtype == np.float16
    with pytest.raises(OpError, match="cannot convert to f32"):
        run("Cast", np.array(["hello"]), to=1)


def test_cast_like_takes_the_dtype_of_its_second_input():
    y = run("CastLike", a([1.7, -1.7], "float64"), np.zeros(0, np.int16))
    assert y.dtype == np.int16 and y.tolist() == [1, -1]


# ---- half precision ------------------------------------------------------------------------------
def test_half_floats_are_computed_in_f32_and_returned_as_half():
    x = np.linspace(-4, 4, 101).astype(np.float16)
    y = run("Sigmoid", x)
    assert y.dtype == np.float16
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert np.max(np.abs(y - exact)) <= np.max(np.spacing(exact.astype(np.float16)))  # within an f16 ulp
    assert run("Add", a([1, 2], "float32"), a([1, 2], "float32")).dtype == np.float32
    bf = run("Mul", a([1.5], "float32").astype("bfloat16"), a([2], "float32").astype("bfloat16"))
    assert str(bf.dtype) == "bfloat16" and bf.astype(np.float32).tolist() == [3.0]


# ---- BitCast -----------------------------------------------------------------------------------------------
BITCAST_INPUTS = "i: i32[5], u: f32[*]"


@pytest.mark.parametrize("body, expected", [
    ("[y] = BitCast(i) {to=1}", "f32[5]"),
    ("[y] = BitCast(u) {to=6}", "i32[*]"),
])
def test_bitcast_inference(body, expected):
    assert output_types(body, BITCAST_INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = BitCast(i) {to=7}", "cannot reinterpret i32 \\(32 bits\\) as i64"),
    ("[y] = BitCast(i) {to=8}", "string"),
])
def test_bitcast_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, BITCAST_INPUTS)


def test_bitcast_keeps_the_bits():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    y = run("BitCast", x, to=6)
    assert y.dtype == np.int32 and y.tolist() == [0x3F800000, -0x3FE00000, 0x7F800000]
    assert run("BitCast", np.array([-1, 5], np.int8), to=2).tolist() == [255, 5]
    assert run("BitCast", np.array([0, 1], np.uint8), to=9).tolist() == [False, True]
    with pytest.raises(OpError, match="not a boolean"):
        run("BitCast", np.array([2], np.uint8), to=9)
