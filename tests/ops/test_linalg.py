"""Matrix products (MatMul/Gemm/Einsum/MatMulInteger) and Det: inference with dynamic dims, and kernels
against independent formulations (explicit sums, loops)."""
import itertools

import numpy as np
import pytest

import snipjit.ops.linalg  # noqa: F401  (registers the ops)
from snipjit import parse_graph
from snipjit.ops import OpError
from snipjit.ops.common import evaluate
from op_cases import output_types

INPUTS = ("x: f32[B,S,384], w: f32[384,1536], q: f32[B,12,S,32], k: f32[B,12,32,S], v: f32[384], "
          "a: f32[3,4], b: f32[5,4], c: f32[5], h: f16[2,3], u: f32[*], i: i32[2,3], ua: u8[M,K], sb: i8[K,N]")
rng = np.random.default_rng(0)


def types(body):
    g = parse_graph(f"graph({INPUTS}) -> [y] {{\n{body}\n}}")
    return str(g.outputs[0].type)


def run(op, *inputs, **attrs):
    return evaluate(op, inputs, attrs)[0]


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("body, expected", [
    ("[y] = MatMul(x, w)", "f32[B,S,1536]"),
    ("[y] = MatMul(q, k)", "f32[B,12,S,S]"),
    ("[y] = MatMul(x, v)", "f32[B,S]"),
    ("[y] = MatMul(v, w)", "f32[1536]"),
    ("[y] = MatMul(u, w)", "f32[*]"),
    ("[y] = Gemm(a, b) {transB=1}", "f32[3,5]"),
    ("[y] = Gemm(a, b, c) {transB=1, alpha=0.5}", "f32[3,5]"),
    ("[y] = Gemm(a, a) {transA=1}", "f32[4,4]"),
    ("[y] = Einsum(q, k) {equation=\"bhsd,bhdt->bhst\"}", "f32[B,12,S,S]"),
    ("[y] = Einsum(a, b) {equation=\"ij,kj\"}", "f32[3,5]"),
    ("[y] = Einsum(q) {equation=\"...ij->...ji\"}", "f32[B,12,32,S]"),
    ("[y] = Einsum(a) {equation=\"ij->\"}", "f32[]"),
    ("[y] = Einsum(x, v) {equation=\"...d, d\"}", "f32[B,S]"),
    ("[y] = MatMulInteger(ua, sb)", "i32[M,N]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert types(body) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = MatMul(x, a)", r"inner dimensions differ: \['B', 'S', 384\] @ \[3, 4\]"),
    ("[y] = MatMul(x, h)", "input 1 has dtype f16"),
    ("[y] = MatMul(i, i)", "inner dimensions differ"),
    ("[y] = Gemm(a, b)", r"inner dimensions differ: A' is \[3, 4\], B' is \[5, 4\]"),
    ("[y] = Gemm(x, w)", "A must have rank 2"),
    ("[y] = Gemm(a, b, a) {transB=1}", r"C of shape \[3,4\] does not broadcast to \[3,5\]"),
    ("[y] = Einsum(a, b) {equation=\"ij->i\"}", "2 inputs"),
    ("[y] = Einsum(a) {equation=\"i.j->i\"}", "not letters"),
    ("[y] = Einsum(a) {equation=\"ijk->i\"}", "does not fit an input of rank 2"),
    ("[y] = Einsum(a) {equation=\"ij->z\"}", "output labels must appear"),
    ("[y] = MatMulInteger(ua, sb, ua, ua)", "b_zero_point has dtype u8 but B has i8"),
    ("[y] = MatMulInteger(a, a)", "A must be uint8 or int8"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body)


def test_matmul_matches_explicit_sum():
    a, b = randn(2, 1, 3, 4), randn(5, 4, 2)
    expected = (a[:, :, :, :, None] * b[None, :, None, :, :]).sum(axis=3)     # [2, 5, 3, 2]
    np.testing.assert_allclose(run("MatMul", a, b), expected, rtol=1e-5, atol=1e-6)
    v = randn(4)
    np.testing.assert_allclose(run("MatMul", v, b), (v[None, :, None] * b).sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run("MatMul", a, v), (a * v).sum(axis=-1), rtol=1e-5, atol=1e-6)


def test_matmul_half_and_int():
    a, b = randn(3, 8, dtype=np.float16), randn(8, 2, dtype=np.float16)
    y = run("MatMul", a, b)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)
    i = np.arange(6, dtype=np.int64).reshape(2, 3)
    y = run("MatMul", i, i.T.copy())
    assert y.dtype == np.int64 and y.tolist() == [[5, 14], [14, 50]]


@pytest.mark.parametrize("trans_a, trans_b, c_shape", [(0, 0, (5,)), (1, 0, (3, 1)), (0, 1, ()), (1, 1, None)])
def test_gemm(trans_a, trans_b, c_shape):
    a0, b0 = randn(3, 4), randn(4, 5)
    a = a0.T.copy() if trans_a else a0
    b = b0.T.copy() if trans_b else b0
    inputs = [a, b] + ([] if c_shape is None else [randn(*c_shape)])
    y = run("Gemm", *inputs, alpha=0.5, beta=2.0, transA=trans_a, transB=trans_b)
    expected = 0.5 * np.einsum("ik,kj->ij", a0, b0) + (0 if c_shape is None else 2.0 * inputs[2])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_gemm_integer_keeps_integer_arithmetic():
    big = np.array([[2**40]], np.int64)
    y = run("Gemm", big, np.array([[3]], np.int64), np.array([1], np.int64), alpha=2.0)
    assert y.dtype == np.int64 and y[0, 0] == 6 * 2**40 + 1


def test_einsum_against_loops():
    a, b = randn(2, 3, 4), randn(4, 3)
    y = run("Einsum", a, b, equation="bij,ji->b")
    expected = [sum(a[n, i, j] * b[j, i] for i in range(3) for j in range(4)) for n in range(2)]
    np.testing.assert_allclose(y, expected, rtol=1e-5)
    m = randn(3, 3)
    assert run("Einsum", m, equation="ii").item() == pytest.approx(float(np.trace(m)), rel=1e-6)
    np.testing.assert_array_equal(run("Einsum", a, equation="...ij->...ji"), a.swapaxes(1, 2))


def test_matmul_integer_zero_points_against_loops():
    a = rng.integers(0, 256, (2, 3, 4), dtype=np.uint8)
    b = rng.integers(0, 256, (4, 5), dtype=np.uint8)
    a_zp, b_zp = np.array([7, 100, 200], np.uint8), np.array(128, np.uint8)
    y = run("MatMulInteger", a, b, a_zp, b_zp)
    expected = np.zeros((2, 3, 5), np.int64)
    for n, i, j, k in itertools.product(range(2), range(3), range(5), range(4)):
        expected[n, i, j] += (int(a[n, i, k]) - int(a_zp[i])) * (int(b[k, j]) - int(b_zp))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected)
    s = rng.integers(-128, 128, (4, 5), dtype=np.int8)
    zp = rng.integers(-128, 128, 5, dtype=np.int8)
    y = run("MatMulInteger", s.T.copy(), s, None, zp)
    np.testing.assert_array_equal(y, s.T.astype(np.int64) @ (s.astype(np.int64) - zp))
    with pytest.raises(OpError, match="one value per column"):
        run("MatMulInteger", a, b, None, np.zeros(4, np.uint8))


# ---- Det ---------------------------------------------------------------------------------------------------
DET_INPUTS = "m: f32[B,3,3], i: i32[5], g: f32[N,5,7,2]"


@pytest.mark.parametrize("body, expected", [
    ("[y] = Det(m)", "f32[B]"),
])
def test_det_inference(body, expected):
    assert output_types(body, DET_INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = Det(g)", "square matrices in its last two dims, got shape \\[N,5,7,2\\]"),
    ("[y] = Det(i)", "input 0 has dtype i32"),
])
def test_det_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, DET_INPUTS)


def test_det_of_a_batch_of_matrices():
    x = np.array([[[1, 2], [3, 4]], [[2, 0], [0, 3]], [[1, 2], [2, 4]]], np.float32)
    np.testing.assert_allclose(run("Det", x), [-2, 6, 0], atol=1e-6)
    assert run("Det", x[0].astype(np.float64)).shape == ()
    with pytest.raises(OpError, match="square matrices"):
        run("Det", np.zeros((2, 3), np.float32))
