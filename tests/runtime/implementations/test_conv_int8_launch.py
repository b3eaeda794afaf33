"""The int8 convolution (quantize the image, then integer dot products over the window) against an exact
reference, at every ISA level this host can execute: odd sizes, strides 1–3, dilation, asymmetric pads,
channels not a multiple of the vector, batches, uint8 and int8 activations, bias, residual, activation,
clamp, an output that is a channel slice of a wider tensor; and the weights it refuses."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from snipjit.ops.int8 import StaticQuantization
from snipjit.runtime.implementations import gemm_launch
from snipjit.runtime.implementations.conv_int8_launch import exact_int8_levels, pack_int8_conv, prepare_int8_conv
from snipjit.runtime.implementations.conv_launch import ConvGeometry

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


def fake_quantized(rng, shape, quantization):
    """An image of values DequantizeLinear(QuantizeLinear(·)) gives: (q - z) · s."""
    q = rng.integers(quantization.low, quantization.high + 1, shape)
    return ((q - quantization.zero).astype(np.float32) * np.float32(quantization.scale)), q - quantization.zero


def reference(centered, w, geometry, scale, bias):
    """conv(centered integers, int8 weights) exactly, then · scale + bias in float32 (NHWC)."""
    images, h, width, c = centered.shape
    (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right) = (geometry.kernel, geometry.strides,
                                                                geometry.dilations, geometry.pads)
    padded = np.zeros((images, h + top + bottom, width + left + right, c), np.int64)
    padded[:, top:top + h, left:left + width] = centered
    oh, ow = geometry.output_size(h, width)
    sums = np.zeros((images, oh, ow, w.shape[0]), np.int64)
    for i in range(kh):
        for j in range(kw):
            window = padded[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            sums += window @ w[:, :, i, j].T.astype(np.int64)
    return sums.astype(np.float32) * scale + bias


def run(rng, images, h, width, c, o, geometry, quantization, residual=False, clamp=None, activation=""):
    x, centered = fake_quantized(rng, (images, h, width, c), quantization)
    w = rng.integers(-128, 128, (o, c, *geometry.kernel)).astype(np.int8)
    weight_scales = (rng.random(o) * 0.02 + 0.001).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    oh, ow = geometry.output_size(h, width)
    out = np.full((images, oh, ow, o), np.nan, np.float32)
    extra = rng.standard_normal(out.shape).astype(np.float32) if residual else None
    quantization = StaticQuantization(quantization.scale, quantization.zero, quantization.low, quantization.high,
                                      tuple(map(float, weight_scales)))
    launch = prepare_int8_conv(x, pack_int8_conv(w, weight_scales), out, geometry, quantization, bias, clamp,
                               activation, extra)
    assert launch is not None
    launch.run()
    expected = reference(centered, w, geometry, weight_scales * np.float32(quantization.scale), bias)
    if residual:
        expected = expected + extra
    if activation == "silu":
        expected = (expected / (1 + np.exp(-expected.astype(np.float64)))).astype(np.float32)
    if clamp is not None:
        expected = np.clip(expected, *clamp)
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-5 * np.abs(expected).max())
    return out


UINT8 = StaticQuantization(0.05, 3, 0, 255, ())
INT8 = StaticQuantization(0.02, -5, -128, 127, ())


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(images=st.integers(1, 2), h=st.integers(1, 11), width=st.integers(1, 11), c=st.integers(1, 40),
       o=st.integers(1, 70), kernel=st.sampled_from([(1, 1), (3, 3), (2, 3), (5, 1)]),
       stride=st.integers(1, 3), dilation=st.integers(1, 2), pads=st.tuples(*[st.integers(0, 2)] * 4),
       signed=st.booleans(), seed=st.integers(0, 2**16))
def test_odd_geometries(level, images, h, width, c, o, kernel, stride, dilation, pads, signed, seed):
    geometry = ConvGeometry(kernel, (stride, stride), pads, (dilation, dilation))
    if min(geometry.output_size(h, width)) < 1:
        return
    run(np.random.default_rng(seed), images, h, width, c, o, geometry, INT8 if signed else UINT8)


def test_resnet_shapes_with_epilogues(level):
    rng = np.random.default_rng(0)
    run(rng, 1, 14, 14, 64, 64, ConvGeometry((3, 3), (1, 1), (1, 1, 1, 1)), UINT8, residual=True,
        clamp=(0.0, np.inf))
    run(rng, 1, 7, 7, 256, 96, ConvGeometry((1, 1)), INT8, activation="silu")
    run(rng, 2, 9, 9, 32, 20, ConvGeometry((3, 3), (2, 2), (0, 1, 1, 0)), UINT8, clamp=(-1.0, 2.0))


def test_long_sums_with_a_large_zero_point(level):
    rng = np.random.default_rng(1)
    quantization = StaticQuantization(0.01, 250, 0, 255, ())
    run(rng, 1, 5, 5, 512, 33, ConvGeometry((3, 3), (1, 1), (1, 1, 1, 1)), quantization)


def test_writes_a_channel_slice(level):
    rng = np.random.default_rng(2)
    x, centered = fake_quantized(rng, (1, 6, 6, 16), UINT8)
    w = rng.integers(-128, 128, (8, 16, 3, 3)).astype(np.int8)
    scales = np.full(8, 0.01, np.float32)
    wide = np.full((1, 6, 6, 20), 7.0, np.float32)
    geometry = ConvGeometry((3, 3), (1, 1), (1, 1, 1, 1))
    quantization = StaticQuantization(UINT8.scale, UINT8.zero, 0, 255, tuple(map(float, scales)))
    prepare_int8_conv(x, pack_int8_conv(w, scales), wide[..., 4:12], geometry, quantization).run()
    np.testing.assert_allclose(wide[..., 4:12], reference(centered, w, geometry, scales * np.float32(0.05), 0),
                               rtol=2e-6, atol=1e-5)
    assert np.all(wide[..., :4] == 7) and np.all(wide[..., 12:] == 7)


def test_int8_weights_are_recovered_only_from_exact_products():
    rng = np.random.default_rng(3)
    q = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    scales = np.array([0.1, 0.02, 0.003, 1.5], np.float32)
    w = q.astype(np.float32) * scales.reshape(-1, 1, 1, 1)
    np.testing.assert_array_equal(exact_int8_levels(w, scales), q)
    assert exact_int8_levels(w * np.float32(1.001), scales) is None      # rescaled after dequantization
    assert exact_int8_levels(w, scales[:2]) is None                       # scales for other channels
    assert exact_int8_levels(w * 200, scales) is None                     # out of the int8 range
    np.testing.assert_array_equal(exact_int8_levels(q.astype(np.float32) * np.float32(0.5), np.float32(0.5)), q)


def test_layouts_not_taken():
    q = np.ones((8, 16, 1, 1), np.int8)
    packed = pack_int8_conv(q, np.ones(8, np.float32))
    geometry, quantization = ConvGeometry((1, 1)), StaticQuantization(1.0, 0, 0, 255, (1.0,))
    x = np.ones((1, 4, 4, 16), np.float32)
    assert prepare_int8_conv(x, packed, np.empty((1, 4, 4, 8), np.float64), geometry, quantization) is None
    assert prepare_int8_conv(np.ones((1, 4, 4, 32), np.float32)[..., ::2], packed, np.empty((1, 4, 4, 8), np.float32),
                             geometry, quantization) is None
    assert prepare_int8_conv(x, packed, np.empty((1, 4, 4, 9), np.float32), geometry, quantization) is None
