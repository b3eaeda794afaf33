"""The channels-last Conv's optional inputs: a residual of the output's shape added before the activation, and an
input scale [N, 1, 1, C] multiplying the input's channels per image; shapes that do not fit are refused."""
import numpy as np
import pytest

from snipjit.ops import OpError
from snipjit.ops.channels_last import DOMAIN, TO_NCHW, TO_NHWC
from snipjit.ops.common import evaluate

rng = np.random.default_rng(0)


def conv(*inputs, **attrs):
    return evaluate("Conv", list(inputs), attrs, domain=DOMAIN)[0]


def onnx_conv(x_nhwc, w, **attrs):
    return evaluate("Conv", [np.transpose(x_nhwc, TO_NCHW), w], attrs)[0].transpose(TO_NHWC)


def test_the_input_scale_multiplies_each_image_s_channels_first():
    x = rng.standard_normal((2, 4, 5, 6), dtype=np.float32)
    w = rng.standard_normal((3, 6, 1, 1), dtype=np.float32)
    scale = rng.standard_normal((2, 1, 1, 6), dtype=np.float32)
    residual = rng.standard_normal((2, 4, 5, 3), dtype=np.float32)
    got = conv(x, w, None, residual, scale, activation="sigmoid")
    want = 1 / (1 + np.exp(-(onnx_conv(x * scale, w) + residual)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale, attrs, message", [
    ((1, 1, 1, 6), {}, r"the input scale \[1, 1, 1, 6\] must be \[N, 1, 1, C\] of the input \[2, 4, 5, 6\]"),
    ((2, 1, 1, 5), {}, r"must be \[N, 1, 1, C\]"),
    ((2, 4, 5, 6), {}, r"must be \[N, 1, 1, C\]"),
    ((2, 1, 1, 6), {"input_layout": "NCHW"}, "an input scale needs an NHWC input"),
])
def test_a_scale_that_does_not_fit_is_refused(scale, attrs, message):
    x = np.zeros((2, 4, 5, 6), np.float32)
    if attrs:
        x = np.zeros((2, 6, 4, 5), np.float32)
    with pytest.raises(OpError, match=message):
        conv(x, np.zeros((3, 6, 1, 1), np.float32), None, None, np.ones(scale, np.float32), **attrs)


def test_a_residual_of_another_shape_is_refused():
    with pytest.raises(OpError, match=r"the residual \[2, 4, 5, 4\] must have the output's shape \[2, 4, 5, 3\]"):
        conv(np.zeros((2, 4, 5, 6), np.float32), np.zeros((3, 6, 1, 1), np.float32), None,
             np.zeros((2, 4, 5, 4), np.float32))
