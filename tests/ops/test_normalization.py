"""Normalisations: inference (statistics outputs, channel checks, errors) and kernels against
independent float64 computations."""
import math

import numpy as np
import pytest

import snipjit.ops.normalization  # noqa: F401  (registers the ops)
from snipjit import parse_graph
from snipjit.ops import OpError, get_op
from snipjit.ops.common import evaluate

rng = np.random.default_rng(7)


def run(op, *inputs, outputs=1, **attrs):
    results = evaluate(op, inputs, attrs, outputs=outputs)
    return results[0] if outputs == 1 else results


def types(body, inputs):
    g = parse_graph(f"graph({inputs}) -> [y] {{\n{body}\n}}")
    return [str(o.type) for n in g.nodes for o in n.outputs]


# ---- inference -----------------------------------------------------------------------------------
def test_layer_norm_statistics_keep_the_leading_dims_in_the_stash_type():
    assert types("[y, m, r] = LayerNormalization(x, s, b)", "x: f16[batch,seq,384], s: f16[384], b: f16[384]") == \
        ["f16[batch,seq,384]", "f32[batch,seq,1]", "f32[batch,seq,1]"]
    assert types("[y, m] = LayerNormalization(x, s) {axis=1, stash_type=11}", "x: f32[2,?,4], s: f32[?,4]") == \
        ["f32[2,?,4]", "f64[2,1,1]"]
    assert types("[y, m] = LayerNormalization(x, s)", "x: f32[*], s: f32[4]") == ["f32[*]", "f32[*]"]


def test_other_normalisations_keep_the_input_type():
    inputs = "x: f32[n,4,h,w], c: f32[4], v: bf16[?]"
    assert types("[y] = Softmax(x) {axis=1}", inputs) == ["f32[n,4,h,w]"]
    assert types("[y, rm, rv] = BatchNormalization(x, c, c, c, c) {training_mode=1}", inputs) == \
        ["f32[n,4,h,w]", "f32[4]", "f32[4]"]
    assert types("[y] = GroupNormalization(x, c, c) {num_groups=2}", inputs) == ["f32[n,4,h,w]"]
    assert types("[y] = MeanVarianceNormalization(v)", "v: bf16[*]") == ["bf16[*]"]


@pytest.mark.parametrize("body, message", [
    ("[y] = Softmax(x) {axis=4}", "axis 4 is out of range for rank 4"),
    ("[y] = LogSoftmax(i)", "input 0 has dtype i32"),
    ("[y] = LpNormalization(x) {p=3}", "p=3 must be one of"),
    ("[y, m] = LayerNormalization(r, w)", r"Scale of shape \[5\] does not broadcast to \[2,4\]"),
    ("[y] = LayerNormalization(x, c) {stash_type=7}", "stash_type=7 is not a floating-point"),
    ("[y] = LayerNormalization(x, h)", "Scale has dtype f16 but X has f32"),
    ("[y] = BatchNormalization(x, c, c, w, c)", "input_mean has 5 values but X has 4 channels"),
    ("[y] = BatchNormalization(x, c, c, c, h)", "inputs 3 and 4 must have one dtype"),
    ("[y, m, v] = BatchNormalization(x, c, c, c, c)", "exist only with training_mode=1"),
    ("[y] = InstanceNormalization(r, c, c)", r"rank 3 or more, got shape \[2,4\]"),
    ("[y] = InstanceNormalization(x, x, c)", "scale must be 1-D"),
    ("[y] = GroupNormalization(x, c, c) {num_groups=3}", "4 channels do not split into num_groups=3"),
    ("[y] = GroupNormalization(x, c, c)", "required attribute 'num_groups'"),
    ("[y] = LRN(x) {size=0}", "size=0 must be a positive integer"),
    ("[y] = MeanVarianceNormalization(r)", "axes entry 2 is out of range for rank 2"),
    ("[y] = MeanVarianceNormalization(x) {axes=[1, -3]}", r"axes \[1, -3\] repeat an axis"),
])
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body, "x: f32[n,4,h,w], c: f32[4], w: f32[5], h: f16[4], r: f32[2,4], i: i32[3]")


# ---- along one axis ------------------------------------------------------------------------------
def _softmax64(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_and_log_softmax(axis):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    expected = _softmax64(x.astype(np.float64), axis)
    np.testing.assert_allclose(run("Softmax", x, axis=axis), expected, rtol=1e-6)
    np.testing.assert_allclose(run("LogSoftmax", x, axis=axis), np.log(expected), rtol=1e-5, atol=1e-6)


def test_softmax_is_stable_for_large_inputs_and_half_floats():
    x = np.array([[1000, 1001, 1002], [-1000, -1000, -1000]], np.float32)
    expected = [[math.exp(-2), math.exp(-1), 1], [1, 1, 1]]
    expected = np.array(expected) / np.sum(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(run("Softmax", x), expected, rtol=1e-6)
    np.testing.assert_allclose(run("LogSoftmax", x), np.log(expected), rtol=1e-6)
    y = run("Softmax", x.astype(np.float16) / np.float16(100))
    assert y.dtype == np.float16 and np.allclose(y.astype(np.float32).sum(axis=1), 1, atol=2e-3)


def test_hardmax_marks_the_first_maximum():
    x = np.array([[3, 1, 3], [0, 2, 1]], np.float32)
    np.testing.assert_array_equal(run("Hardmax", x), [[1, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(run("Hardmax", x, axis=0), [[1, 0, 1], [0, 1, 0]])
    assert run("Hardmax", np.zeros((2, 0), np.float32)).shape == (2, 0)


def test_lp_normalization_and_zero_vectors():
    x = np.array([[3, -4], [0, 0]], np.float32)
    np.testing.assert_allclose(run("LpNormalization", x), [[0.6, -0.8], [0, 0]])
    np.testing.assert_allclose(run("LpNormalization", x, p=1), [[3 / 7, -4 / 7], [0, 0]])
    np.testing.assert_allclose(run("LpNormalization", x, axis=0), [[1, -1], [0, 0]])


# ---- LayerNormalization --------------------------------------------------------------------------
def test_layer_normalization_with_statistics():
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    scale, bias = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    y, mean, inv_std = run("LayerNormalization", x, scale, bias, outputs=3, epsilon=1e-3)
    x64 = x.astype(np.float64)
    m = x64.mean(axis=-1, keepdims=True)
    r = 1 / np.sqrt(((x64 - m) ** 2).mean(axis=-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv_std, r, rtol=1e-5)
    np.testing.assert_allclose(y, (x64 - m) * r * scale + bias, rtol=1e-5, atol=1e-5)


def test_layer_normalization_over_several_axes_in_half_precision():
    x = rng.standard_normal((2, 3, 4)).astype(np.float16)
    scale = np.full((3, 4), 2, np.float16)
    y, mean = run("LayerNormalization", x, scale, axis=1, outputs=2)
    assert y.dtype == np.float16 and mean.dtype == np.float32 and mean.shape == (2, 1, 1)
    x64 = x.astype(np.float64)
    m = x64.mean(axis=(1, 2), keepdims=True)
    expected = 2 * (x64 - m) / np.sqrt(x64.var(axis=(1, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2e-3, atol=2e-3)


# ---- per-channel normalisations ------------------------------------------------------------------
def _channels(n, dt=np.float32):
    return [rng.uniform(0.5, 2, n).astype(dt) for _ in range(4)]


def test_batch_normalization_inference():
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    s, b, m, v = _channels(3)
    c = (slice(None), None, None)
    expected = s[c] * (x - m[c]) / np.sqrt(v[c] + 1e-5) + b[c]
    np.testing.assert_allclose(run("BatchNormalization", x, s, b, m, v), expected, rtol=1e-5, atol=1e-6)


def test_batch_normalization_training_updates_running_statistics():
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    s, b, m, v = _channels(2)
    y, rm, rv = run("BatchNormalization", x, s, b, m, v, outputs=3, training_mode=1, momentum=0.8)
    x64 = x.astype(np.float64)
    bm, bv = x64.mean(axis=(0, 2)), x64.var(axis=(0, 2))
    np.testing.assert_allclose(rm, 0.8 * m + 0.2 * bm, rtol=1e-6)
    np.testing.assert_allclose(rv, 0.8 * v + 0.2 * bv, rtol=1e-6)
    expected = s[:, None] * (x64 - bm[:, None]) / np.sqrt(bv[:, None] + 1e-5) + b[:, None]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_instance_normalization():
    x = rng.standard_normal((2, 3, 5)).astype(np.float64)
    s, b, _, _ = _channels(3, np.float64)
    m, v = x.mean(axis=2, keepdims=True), x.var(axis=2, keepdims=True)
    expected = s[:, None] * (x - m) / np.sqrt(v + 1e-5) + b[:, None]
    np.testing.assert_allclose(run("InstanceNormalization", x, s, b), expected, rtol=1e-12)


def test_group_normalization_normalises_each_group_of_channels():
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    s, b, _, _ = _channels(6)
    y = run("GroupNormalization", x, s, b, num_groups=3, epsilon=1e-4)
    for n in range(2):
        for g in range(3):
            block = x[n, 2 * g:2 * g + 2].astype(np.float64)
            normed = (block - block.mean()) / math.sqrt(block.var() + 1e-4)
            expected = normed * s[2 * g:2 * g + 2, None] + b[2 * g:2 * g + 2, None]
            np.testing.assert_allclose(y[n, 2 * g:2 * g + 2], expected, rtol=1e-5, atol=1e-6)


def test_channel_parameters_are_checked_at_run_time():
    g = parse_graph("graph(x: f32[1,?,2], s: f32[?]) -> [y] { [y] = InstanceNormalization(x, s, s) }")
    opdef = get_op("InstanceNormalization")
    ctx = opdef.context(g.nodes[0], with_values=False)
    with pytest.raises(OpError, match=r"InstanceNormalization node .*scale must have shape \[3\]"):
        opdef.run(ctx, [np.zeros((1, 3, 2), np.float32), np.ones(2, np.float32), np.ones(2, np.float32)])


# ---- LRN and MeanVarianceNormalization -----------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_lrn_sums_squares_over_a_channel_window(size):
    x = rng.standard_normal((1, 5, 2, 2)).astype(np.float64)
    alpha, beta, bias = 0.1, 0.6, 1.5
    expected = np.empty_like(x)
    for c in range(5):
        lo, hi = max(0, c - (size - 1) // 2), min(4, c + math.ceil((size - 1) / 2))
        square_sum = (x[:, lo:hi + 1] ** 2).sum(axis=1)
        expected[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    y = run("LRN", x, size=size, alpha=alpha, beta=beta, bias=bias)
    np.testing.assert_allclose(y, expected, rtol=1e-12)


def test_mean_variance_normalization():
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    x64 = x.astype(np.float64)
    m, sd = x64.mean(axis=(0, 2, 3), keepdims=True), x64.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(run("MeanVarianceNormalization", x), (x64 - m) / (sd + 1e-9), rtol=1e-5, atol=1e-6)
    m, sd = x64.mean(axis=-1, keepdims=True), x64.std(axis=-1, keepdims=True)
    np.testing.assert_allclose(run("MeanVarianceNormalization", x, axes=[-1]), (x64 - m) / (sd + 1e-9),
                               rtol=1e-5, atol=1e-5)
