"""Channels-last convolutions on the implicit-GEMM microkernel against the ONNX reference Conv (NCHW,
float64) at every ISA level this host can execute: odd channel counts (panel tails), groups, strides,
dilations, asymmetric pads, 1x1 and 7x7 windows, images of one pixel, bias and clamp."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from snipjit.ops.common import evaluate
from snipjit.runtime.implementations import conv_launch, gemm_launch
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.gemm import DIMS

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


ACTIVATIONS = {"": lambda y: y, "silu": lambda y: y / (1 + np.exp(-y)),
               "hard_swish": lambda y: y * np.clip(y / 6 + 0.5, 0, 1)}


def reference(x_nhwc, w, bias, geometry: conv_launch.ConvGeometry, group: int) -> np.ndarray:
    top, left, bottom, right = geometry.pads
    attrs = {"strides": list(geometry.strides), "dilations": list(geometry.dilations),
             "pads": [top, left, bottom, right], "group": group}
    inputs = [x_nhwc.transpose(0, 3, 1, 2).astype(np.float64), w.astype(np.float64)]
    y = evaluate("Conv", inputs + ([bias.astype(np.float64)] if bias is not None else []), attrs)[0]
    return y.transpose(0, 2, 3, 1)


def check(rng, images, c, h, w, o, kernel, group=1, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
          bias=False, clamp=None, planar=False, activation="", taps_per_k_block=None, residual=False,
          scaled=False, k_block=None):
    x = rng.standard_normal((images, h, w, c), dtype=np.float32)
    weights = rng.standard_normal((o, c // group, *kernel), dtype=np.float32)
    b = rng.standard_normal(o, dtype=np.float32) if bias else None
    scale = rng.uniform(-2, 2, (images, 1, 1, c)).astype(np.float32) if scaled else None
    geometry = conv_launch.ConvGeometry(kernel, strides, pads, dilations)
    want = reference(x if scale is None else x.astype(np.float64) * scale, weights, b, geometry, group)
    extra = rng.standard_normal(want.shape, dtype=np.float32) if residual else None
    want = ACTIVATIONS[activation](want if extra is None else want + extra)
    if clamp is not None:
        want = np.clip(want, *clamp)
    packed = conv_launch.pack_conv(weights, group)
    assert packed.kernel.shape.conv and packed.kernel.shape.lanes == jit.host().level.f32_lanes
    out = np.full(want.shape, np.nan, np.float32)
    image = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if planar else x
    launch = conv_launch.prepare_conv(image, packed, out, geometry, b, clamp, planar=planar, activation=activation,
                                      residual=extra, scale=scale)
    if taps_per_k_block or k_block:
        launch.dims[DIMS.index("kc")] = k_block or taps_per_k_block * (c // group)
    launch.run()
    depth = c // group * kernel[0] * kernel[1]
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-5 * depth ** 0.5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("case", [
    dict(images=1, c=8, h=9, w=7, o=16, kernel=(3, 3), pads=(1, 1, 1, 1)),
    dict(images=2, c=3, h=17, w=13, o=37, kernel=(7, 7), strides=(2, 2), pads=(3, 3, 3, 3), bias=True),
    dict(images=1, c=32, h=10, w=10, o=48, kernel=(3, 3), group=4, strides=(2, 2), pads=(0, 1, 1, 0),
         dilations=(2, 2), bias=True),
    dict(images=1, c=16, h=8, w=8, o=20, kernel=(1, 1), strides=(2, 2)),
    dict(images=3, c=5, h=6, w=5, o=70, kernel=(2, 3), strides=(1, 2), pads=(1, 0, 2, 1), dilations=(1, 2)),
    dict(images=1, c=64, h=1, w=1, o=33, kernel=(3, 3), pads=(1, 1, 1, 1), bias=True),
    dict(images=2, c=6, h=5, w=4, o=6, kernel=(3, 3), group=3, pads=(1, 1, 1, 1), clamp=(0.0, np.inf)),
    dict(images=1, c=130, h=12, w=11, o=129, kernel=(3, 3), pads=(1, 1, 1, 1), bias=True, clamp=(-0.5, 0.5)),
    # wide rows: most row blocks lie inside the columns (their rows' addresses a stride apart)
    dict(images=2, c=16, h=5, w=41, o=16, kernel=(3, 3), group=2, strides=(2, 2), pads=(1, 1, 1, 1), bias=True),
    dict(images=1, c=8, h=4, w=33, o=24, kernel=(2, 3), strides=(1, 3), pads=(0, 2, 1, 0), dilations=(2, 2)),
])
def test_convolutions(level, case):
    check(np.random.default_rng(len(str(case))), **case)


@pytest.mark.parametrize("case", [
    dict(images=2, c=16, h=9, w=7, o=96, kernel=(1, 1), bias=True, clamp=(0.0, 6.0)),
    dict(images=1, c=68, h=5, w=5, o=68, kernel=(1, 1), group=4, bias=True, residual=True),
    dict(images=1, c=24, h=4, w=6, o=37, kernel=(1, 1), activation="silu", taps_per_k_block=None),
    dict(images=1, c=300, h=3, w=3, o=19, kernel=(1, 1), activation="hard_swish", clamp=(-1.0, 1.0)),
])
def test_pointwise_convolutions_are_plain_products(level, case):
    """1x1, stride 1, no padding: the plain GEMM kernel with the convolution's epilogue (bias, residual,
    activation, clamp), groups as batch entries."""
    packed = conv_launch.pack_conv(np.zeros((case["o"], case["c"] // case.get("group", 1), 1, 1), np.float32),
                                   case.get("group", 1))
    x = np.zeros((1, case["h"], case["w"], case["c"]), np.float32)
    out = np.zeros((1, case["h"], case["w"], case["o"]), np.float32)
    launch = conv_launch.prepare_conv(x, packed, out, conv_launch.ConvGeometry((1, 1)))
    assert not launch.kernel.shape.conv and launch.kernel.shape.epilogue
    check(np.random.default_rng(len(str(case))), **case)


@pytest.mark.parametrize("case", [
    dict(images=2, c=16, h=9, w=7, o=96, bias=True, clamp=(0.0, 6.0)),
    dict(images=3, c=144, h=5, w=6, o=24, residual=True),     # EfficientNet's projection: 24 channels out
    dict(images=1, c=37, h=4, w=4, o=70, activation="silu", k_block=16),   # K blocks reload the sums
    dict(images=2, c=300, h=3, w=3, o=19, bias=True),
    dict(images=2, c=5, h=1, w=1, o=3),
])
def test_an_input_scale_per_image_scales_the_weights(level, case):
    """conv(x · scale[image]) for a 1x1 convolution: each work item copies its panel of weights scaled by its
    image's channel factors (a batch entry an image)."""
    check(np.random.default_rng(len(str(case))), kernel=(1, 1), scaled=True, **case)


def test_an_input_scale_needs_a_pointwise_convolution_of_one_group():
    x = np.zeros((2, 4, 4, 8), np.float32)
    scale = np.ones((2, 1, 1, 8), np.float32)
    out = np.zeros((2, 4, 4, 8), np.float32)
    pointwise = conv_launch.ConvGeometry((1, 1))
    with pytest.raises(ValueError, match=r"must be float32 \[2, 1, 1, 8\]"):
        conv_launch.prepare_conv(x, conv_launch.pack_conv(np.ones((8, 8, 1, 1), np.float32), 1), out, pointwise,
                                 scale=scale[:1])
    with pytest.raises(ValueError, match="of one group"):
        conv_launch.prepare_conv(x, conv_launch.pack_conv(np.ones((8, 4, 1, 1), np.float32), 2), out, pointwise,
                                 scale=scale)
    window = conv_launch.ConvGeometry((3, 3), pads=(1, 1, 1, 1))
    assert conv_launch.prepare_conv(x, conv_launch.pack_conv(np.ones((8, 8, 3, 3), np.float32), 1), out, window,
                                    scale=scale) is None   # (the caller's reference does it)


@pytest.mark.parametrize("scaled", [False, True])
def test_a_pointwise_convolution_into_a_channel_slice(scaled):
    """The output a slice of a wider tensor's channels (a Concat's, written in place): rows ldc apart (with an
    input scale, images a batch entry apart)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 4, 12), dtype=np.float32)
    scale = rng.standard_normal((2, 1, 1, 12), dtype=np.float32) if scaled else None
    weights = rng.standard_normal((20, 12, 1, 1), dtype=np.float32)
    whole = np.full((2, 5, 4, 50), np.nan, np.float32)
    out = whole[..., 10:30]
    conv_launch.prepare_conv(x, conv_launch.pack_conv(weights, 1), out, conv_launch.ConvGeometry((1, 1)),
                             scale=scale).run()
    want = reference(x if scale is None else x * scale, weights, None, conv_launch.ConvGeometry((1, 1)), 1)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-4)
    assert np.isnan(whole[..., :10]).all() and np.isnan(whole[..., 30:]).all()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(images=st.integers(1, 2), c=st.integers(1, 20), h=st.integers(1, 9), w=st.integers(1, 40), o=st.integers(1, 40),
       k=st.integers(1, 4), s=st.integers(1, 3), pad=st.integers(0, 2), group=st.sampled_from([1, 2]),
       dw=st.sampled_from([1, 1, 2]), k_block=st.sampled_from([None, 1, 2, 3]), seed=st.integers(0, 2**16))
def test_random_geometries(level, images, c, h, w, o, k, s, pad, group, dw, k_block, seed):
    """Wide images put most row blocks inside the columns: one group without dilation along the rows
    (of up to 32 channels) runs along kernel rows, the others tap by tap; K blocks of 1-3 taps split kernel
    rows."""
    if h + 2 * pad < k or w + 2 * pad < (k - 1) * dw + 1:
        return
    check(np.random.default_rng(seed), images, c * group, h, w, o * group, (k, k), group, (s, s),
          (pad, pad, pad, pad), (1, dw), bias=bool(seed & 1), clamp=(0.0, np.inf) if seed & 2 else None,
          taps_per_k_block=k_block)


@pytest.mark.parametrize("case", [
    dict(images=1, c=3, h=31, w=29, o=24, kernel=(7, 7), strides=(2, 2), pads=(3, 3, 3, 3), bias=True,
         clamp=(0.0, np.inf)),
    dict(images=2, c=4, h=9, w=8, o=8, kernel=(3, 3), group=2, pads=(1, 0, 1, 2), dilations=(2, 1)),
    # wide rows: groups and unequal strides, dilations and pads on the blocks inside the columns
    dict(images=2, c=4, h=7, w=45, o=40, kernel=(3, 2), group=2, strides=(1, 2), pads=(2, 0, 1, 1),
         dilations=(2, 3), bias=True),
    dict(images=1, c=2, h=5, w=60, o=9, kernel=(2, 13), strides=(2, 1), pads=(0, 6, 1, 6)),   # wider than unrolled
])
def test_an_nchw_input_is_read_in_place(level, case):
    check(np.random.default_rng(7), planar=True, **case)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(images=st.integers(1, 2), c=st.sampled_from([1, 3, 4]), h=st.integers(1, 10), w=st.integers(1, 40),
       o=st.integers(1, 40), kh=st.integers(1, 4), kw=st.sampled_from([1, 3, 7]), sh=st.integers(1, 3),
       sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2), pad=st.integers(0, 3),
       k_block=st.sampled_from([None, 1, 2, 3]), seed=st.integers(0, 2**16))
def test_random_nchw_geometries(level, images, c, h, w, o, kh, kw, sh, sw, dh, dw, pad, k_block, seed):
    """A planar image: blocks inside the columns run along kernel rows (a kernel per width and channel
    count), the others tap by tap; K blocks of 1-2 kernel rows, or of 3 taps (splitting kernel rows)."""
    top, left = pad, (pad + seed) % 3
    if h + top + pad + 1 < (kh - 1) * dh + 1 or w + left + pad < (kw - 1) * dw + 1:
        return
    check(np.random.default_rng(seed), images, c, h, w, o, (kh, kw), strides=(sh, sw), pads=(top, left, pad + 1, pad),
          dilations=(dh, dw), bias=bool(seed & 1), planar=True,
          taps_per_k_block=k_block and (3 if k_block == 3 else k_block * kw))


@pytest.mark.parametrize("activation", ["silu", "hard_swish"])
def test_an_activation_before_the_store(level, activation):
    check(np.random.default_rng(3), 2, 20, 6, 7, 37, (3, 3), pads=(1, 1, 1, 1), bias=True, activation=activation)
    check(np.random.default_rng(4), 1, 64, 9, 9, 70, (3, 3), pads=(1, 1, 1, 1), activation=activation,
          clamp=(-0.2, 3.0), taps_per_k_block=2)   # K blocks: only the last block's sums are final


def test_a_residual_added_before_the_activation_and_clamp(level):
    check(np.random.default_rng(8), 2, 12, 7, 6, 45, (3, 3), pads=(1, 1, 1, 1), bias=True, clamp=(0.0, np.inf),
          residual=True)
    check(np.random.default_rng(9), 1, 64, 9, 9, 70, (3, 3), pads=(1, 1, 1, 1), clamp=(-0.2, 3.0),
          residual=True, activation="silu", taps_per_k_block=2)
    check(np.random.default_rng(10), 1, 16, 5, 5, 24, (1, 1), group=4, residual=True)


def test_nan_passes_the_clamp(level):
    x = np.full((1, 2, 2, 4), np.nan, np.float32)
    packed = conv_launch.pack_conv(np.ones((5, 4, 1, 1), np.float32), 1)
    out = np.zeros((1, 2, 2, 5), np.float32)
    conv_launch.prepare_conv(x, packed, out, conv_launch.ConvGeometry((1, 1)), clamp=(0.0, 6.0)).run()
    assert np.isnan(out).all()


def test_shapes_that_do_not_fit_are_refused():
    packed = conv_launch.pack_conv(np.ones((8, 4, 3, 3), np.float32), 1)
    x = np.zeros((1, 5, 5, 4), np.float32)
    with pytest.raises(ValueError, match=r"gives \(1, 3, 3, 8\)"):
        conv_launch.prepare_conv(x, packed, np.zeros((1, 5, 5, 8), np.float32), conv_launch.ConvGeometry((3, 3)))
    with pytest.raises(ValueError, match="input channels"):
        conv_launch.prepare_conv(np.zeros((1, 5, 5, 3), np.float32), packed, np.zeros((1, 3, 3, 8), np.float32),
                                 conv_launch.ConvGeometry((3, 3)))
    with pytest.raises(ValueError, match="do not split"):
        conv_launch.pack_conv(np.ones((7, 2, 1, 1), np.float32), 2)
