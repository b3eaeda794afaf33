"""Reductions: Reduce* inference with constant, run-time and missing axes; kernels against independent
NumPy formulas; ArgMax/ArgMin, CumSum and CumProd."""
import numpy as np
import pytest

import snipjit.ops.reduce  # noqa: F401  (registers the ops)
from snipjit import parse_graph
from snipjit.ops import OpError
from snipjit.ops.common import evaluate
from op_cases import output_types


def run(op, *inputs, **attrs):
    return evaluate(op, inputs, attrs)[0]


def axes(*values):
    return np.array(values, np.int64)


def types(body, inputs="x: f32[batch,?,4,1], r: i64[2], n: i64[k], e: i64[0], u: f16[*]"):
    g = parse_graph(f"graph({inputs}) -> [y] {{\n{body}\n}}")
    return str(g.outputs[0].type)


# ---- inference -----------------------------------------------------------------------------------
@pytest.mark.parametrize("body, expected", [
    ("const a: i64[1] = [-2]\n[y] = ReduceSum(x, a)", "f32[batch,?,1,1]"),
    ("const a: i64[2] = [0, 2]\n[y] = ReduceMax(x, a) {keepdims=0}", "f32[?,1]"),
    ("[y] = ReduceMean(x)", "f32[1,1,1,1]"),
    ("[y] = ReduceMean(x) {keepdims=0}", "f32[]"),
    ("[y] = ReduceL2(x) {noop_with_empty_axes=1}", "f32[batch,?,4,1]"),
    ("const a: i64[0] = []\n[y] = ReduceProd(x, a) {noop_with_empty_axes=1, keepdims=0}", "f32[batch,?,4,1]"),
    # axes known only at run time: the rank is known when keepdims=1 or when the number of axes is
    ("[y] = ReduceSum(x, r)", "f32[?,?,?,1]"),
    ("[y] = ReduceSum(x, r) {keepdims=0}", "f32[?,?]"),
    ("[y] = ReduceSum(x, n) {keepdims=0}", "f32[*]"),
    ("[y] = ReduceSum(x, e) {keepdims=0}", "f32[]"),
    ("[y] = ReduceSum(x, e) {keepdims=0, noop_with_empty_axes=1}", "f32[batch,?,4,1]"),
    # unknown rank
    ("[y] = ReduceLogSumExp(u) {keepdims=0}", "f16[]"),
    ("[y] = ReduceLogSumExp(u, r) {keepdims=0}", "f16[*]"),
    ("[y] = ArgMax(x) {axis=-2}", "i64[batch,?,1,1]"),
    ("[y] = ArgMin(x) {axis=1, keepdims=0}", "i64[batch,4,1]"),
    ("const a: i32[] = 1\n[y] = CumSum(x, a)", "f32[batch,?,4,1]"),
])
def test_inference(body, expected):
    assert types(body) == expected


@pytest.mark.parametrize("body, message", [
    ("const a: i64[1] = [4]\n[y] = ReduceSum(x, a)", "reduction axis 4 is out of range for rank 4"),
    ("const a: i64[2] = [1, -3]\n[y] = ReduceSum(x, a)", r"axes \[1, -3\] repeat an axis"),
    ("const a: i32[1] = [1]\n[y] = ReduceSum(x, a)", "input 1 has dtype i32"),
    ("[y] = ReduceSum(x, r) {keepdims=2}", "keepdims=2"),
    ("[y] = ReduceLogSum(i)", "input 0 has dtype i32"),
    ("[y] = ArgMax(x) {axis=4}", "axis 4 is out of range"),
    ("[y] = ArgMax(z)", "axis 0 of size 0"),
    ("const a: i64[2] = [0, 1]\n[y] = CumSum(x, a)", "axis must be a scalar"),
    ("const a: i64[] = 7\n[y] = CumSum(x, a)", "axis 7 is out of range"),
])
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body, "x: f32[batch,?,4,1], r: i64[2], i: i32[3], z: f32[0,2]")


def test_more_runtime_axes_than_dims_is_an_error():
    with pytest.raises(OpError, match="5 axes to reduce but the input has rank 4"):
        types("[y] = ReduceSum(x, a) {keepdims=0}", "x: f32[1,2,3,4], a: i64[5]")


# ---- Reduce* kernels -----------------------------------------------------------------------------
X = np.array([[[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]],
              [[2.0, 2.0, -0.5], [1.5, -3.0, 1.0]]], np.float32)  # [2,2,3]

_EXPECTED = {
    "ReduceSum": lambda x, a: np.add.reduce(x, axis=a, keepdims=True),
    "ReduceMean": lambda x, a: np.add.reduce(x, axis=a, keepdims=True) / np.prod([x.shape[i] for i in a]),
    "ReduceProd": lambda x, a: np.multiply.reduce(x, axis=a, keepdims=True),
    "ReduceMax": lambda x, a: np.maximum.reduce(x, axis=a, keepdims=True),
    "ReduceMin": lambda x, a: np.minimum.reduce(x, axis=a, keepdims=True),
    "ReduceL1": lambda x, a: np.add.reduce(abs(x), axis=a, keepdims=True),
    "ReduceL2": lambda x, a: np.add.reduce(x * x, axis=a, keepdims=True) ** 0.5,
    "ReduceSumSquare": lambda x, a: np.add.reduce(x * x, axis=a, keepdims=True),
    "ReduceLogSum": lambda x, a: np.log(np.add.reduce(abs(x), axis=a, keepdims=True)),
    "ReduceLogSumExp": lambda x, a: np.log(np.add.reduce(np.exp(x), axis=a, keepdims=True)),
}


@pytest.mark.parametrize("op", sorted(_EXPECTED))
@pytest.mark.parametrize("ax", [(0,), (1, 2), (-1,), (0, 1, 2)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_match_numpy(op, ax, keepdims):
    x = np.abs(X) if op == "ReduceLogSum" else X
    expected = _EXPECTED[op](x.astype(np.float64), tuple(a % 3 for a in ax))
    if not keepdims:
        expected = expected.reshape([d for i, d in enumerate(expected.shape) if i not in [a % 3 for a in ax]])
    y = run(op, x, axes(*ax), keepdims=keepdims)
    assert y.dtype == np.float32 and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_missing_axes_reduce_everything_unless_noop():
    assert run("ReduceSum", X).shape == (1, 1, 1)
    assert run("ReduceSum", X, axes()).tolist() == [[[8.5]]]
    np.testing.assert_array_equal(run("ReduceSum", X, None, noop_with_empty_axes=1), X)
    # a no-op reduction still "reduces" each element alone
    np.testing.assert_array_equal(run("ReduceSumSquare", X, axes(), noop_with_empty_axes=1), X * X)
    np.testing.assert_array_equal(run("ReduceL1", X, noop_with_empty_axes=1), np.abs(X))


def test_empty_sets_reduce_to_the_identity():
    empty = np.zeros((2, 0, 3), np.float32)
    for op, value in [("ReduceSum", 0), ("ReduceProd", 1), ("ReduceMax", -np.inf), ("ReduceMin", np.inf),
                      ("ReduceLogSumExp", -np.inf), ("ReduceLogSum", -np.inf), ("ReduceL2", 0)]:
        y = run(op, empty, axes(1))
        assert y.shape == (2, 1, 3) and np.all(y == value), op
    assert run("ReduceMax", np.zeros((0, 2), np.int32), axes(0)).tolist() == [[np.iinfo(np.int32).min] * 2]
    assert run("ReduceMin", np.zeros((0,), bool), axes(0), keepdims=0).item() is True


def test_integer_and_bool_reductions_keep_their_dtype():
    x = np.array([[-3, -4], [2**30, 2**30]], np.int32)
    assert run("ReduceMean", x, axes(1)).tolist() == [[-3], [2**30]]  # -3.5 truncates toward zero
    assert run("ReduceSum", x, axes(1), keepdims=0).tolist() == [-7, -2**31]  # wraps like int32
    assert run("ReduceL2", np.array([3, 4], np.uint32)).tolist() == [5]
    b = np.array([[True, False], [False, False]])
    assert run("ReduceMax", b, axes(1), keepdims=0).tolist() == [True, False]
    assert run("ReduceMin", b, axes(0), keepdims=0).tolist() == [False, False]


def test_log_sum_exp_does_not_overflow():
    x = np.array([1000.0, 1000.0], np.float32)
    np.testing.assert_allclose(run("ReduceLogSumExp", x), [1000 + np.log(2)], rtol=1e-6)
    np.testing.assert_array_equal(run("ReduceLogSumExp", np.full(3, -np.inf, np.float32)), [-np.inf])


def test_half_floats_accumulate_in_f32():
    x = np.full(4096, 0.1, np.float16)
    y = run("ReduceSum", x, keepdims=0)
    assert y.dtype == np.float16
    assert y == np.float16(4096 * np.float32(np.float16(0.1)))
    assert np.float16(np.cumsum(x)[-1]) != y  # accumulating in f16 would stall far below


def test_runtime_axes_errors():
    with pytest.raises(OpError, match="reduction axis -4 is out of range for rank 3"):
        run("ReduceSum", X, axes(-4))
    with pytest.raises(OpError, match="repeat an axis"):
        run("ReduceMax", X, axes(2, -1))


# ---- ArgMax / ArgMin -----------------------------------------------------------------------------
def test_arg_extremes_pick_the_first_or_last_tie():
    x = np.array([[1, 5, 5, 0], [7, 7, -1, -1]], np.int32)
    assert run("ArgMax", x, axis=1).tolist() == [[1], [0]]
    assert run("ArgMax", x, axis=1, select_last_index=1).tolist() == [[2], [1]]
    assert run("ArgMin", x, axis=-1, keepdims=0).tolist() == [3, 2]
    assert run("ArgMin", x, axis=1, keepdims=0, select_last_index=1).tolist() == [3, 3]
    assert run("ArgMax", x, axis=0, keepdims=0).tolist() == [1, 1, 0, 0]
    assert run("ArgMax", x).dtype == np.int64


# ---- CumSum --------------------------------------------------------------------------------------
@pytest.mark.parametrize("exclusive, reverse, expected", [
    (0, 0, [1, 3, 6, 10]), (1, 0, [0, 1, 3, 6]), (0, 1, [10, 9, 7, 4]), (1, 1, [9, 7, 4, 0]),
])
def test_cumsum_modes(exclusive, reverse, expected):
    x = np.array([1, 2, 3, 4], np.int32)
    y = run("CumSum", x, np.array(0, np.int32), exclusive=exclusive, reverse=reverse)
    assert y.dtype == np.int32 and y.tolist() == expected


def test_cumsum_along_an_inner_axis():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(run("CumSum", x, np.array([-1], np.int64)), [[0, 1, 3], [3, 7, 12]])
    np.testing.assert_array_equal(run("CumSum", x, np.array(0, np.int64), exclusive=1), [[0, 0, 0], [0, 1, 2]])
    assert run("CumSum", np.zeros((2, 0)), np.array(1, np.int64), exclusive=1).shape == (2, 0)


# ---- CumProd -----------------------------------------------------------------------------------------------
CUMPROD_INPUTS = "x: f32[B,S,4]"


rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("body, expected", [
    ("const a: i64[] = -1\n[y] = CumProd(x, a) {exclusive=1}", "f32[B,S,4]"),
])
def test_cumprod_inference(body, expected):
    assert output_types(body, CUMPROD_INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("const a: i64[2] = [0, 1]\n[y] = CumProd(x, a)", "axis must be a scalar"),
])
def test_cumprod_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, CUMPROD_INPUTS)


@pytest.mark.parametrize("exclusive, reverse, expected", [
    (0, 0, [1, 2, 6, 24]), (1, 0, [1, 1, 2, 6]), (0, 1, [24, 24, 12, 4]), (1, 1, [24, 12, 4, 1])])
def test_cumprod_attributes(exclusive, reverse, expected):
    x = np.array([1, 2, 3, 4], np.int32)
    y = run("CumProd", x, np.array(0), exclusive=exclusive, reverse=reverse)
    assert y.dtype == np.int32 and y.tolist() == expected


def test_cumprod_along_an_axis_in_half_precision():
    x = randn(3, 4, dtype=np.float16)
    y = run("CumProd", x, np.array([-2], np.int64))
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, np.cumprod(x.astype(np.float32), axis=0), rtol=2e-3)
    assert run("CumProd", np.zeros((2, 0), np.float32), np.array(1), exclusive=1).shape == (2, 0)
    with pytest.raises(OpError, match="axis 2 is out of range"):
        run("CumProd", x, np.array(2))
