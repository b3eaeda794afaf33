"""The public window helpers: window geometry from attributes (explicit and automatic padding, bad
attributes), the strided window view against direct indexing, and im2col + conv_output against Conv."""
import itertools

import numpy as np
import pytest

from snipjit.ops import OpContext, OpError
from snipjit.ops.windows import conv_output, im2col, place_window, window_from_attrs, window_view
from op_cases import run


def ctx(**attrs):
    return OpContext(None, attrs)


@pytest.mark.parametrize("attrs, size, out, begin, end", [
    ({}, 5, (3,), (0,), (0,)),
    ({"pads": [1, 2]}, 5, (6,), (1,), (2,)),
    ({"strides": [2], "auto_pad": "SAME_UPPER"}, 5, (3,), (1,), (1,)),
    ({"strides": [2], "auto_pad": "SAME_UPPER"}, 6, (3,), (0,), (1,)),   # odd total padding: the extra one last
    ({"strides": [2], "auto_pad": "SAME_LOWER"}, 6, (3,), (1,), (0,)),   # ... or first
    ({"dilations": [2], "auto_pad": "VALID", "pads": [4, 4]}, 7, (3,), (0,), (0,)),
    ({"strides": [2], "ceil_mode": 1}, 6, (3,), (0,), (0,)),
])
def test_window_placement(attrs, size, out, begin, end):
    p = place_window(ctx(**attrs), window_from_attrs(ctx(**attrs), (3,)), (size,))
    assert (p.out, p.begin, p.end) == (out, begin, end)


@pytest.mark.parametrize("attrs, message", [
    ({"pads": [1, 1, 1]}, "pads has 3 values but 4 are needed for 2 spatial dims"),
    ({"strides": [0, 1]}, "must be positive"),
    ({"auto_pad": "SAME"}, "auto_pad must be one of"),
])
def test_bad_window_attributes_fail(attrs, message):
    with pytest.raises(OpError, match=message):
        window_from_attrs(ctx(**attrs), (3, 3))


def test_a_window_larger_than_the_input_fails():
    c = ctx()
    with pytest.raises(OpError, match="smaller than the window extent 3"):
        place_window(c, window_from_attrs(c, (3,)), (2,))


def test_window_view_reads_the_padded_input():
    x = np.arange(2 * 3 * 7, dtype=np.float32).reshape(2, 3, 7)
    c = ctx(strides=[2], dilations=[2], pads=[2, 1])
    win = window_from_attrs(c, (3,))
    p = place_window(c, win, (7,))
    view = window_view(x, win, p, fill=-1)
    assert view.shape == (2, 3) + p.out + (3,) and not view.flags.writeable
    for o, k in itertools.product(range(p.out[0]), range(3)):
        pos = o * 2 - 2 + k * 2
        expected = x[:, :, pos] if 0 <= pos < 7 else np.full((2, 3), -1)
        np.testing.assert_array_equal(view[:, :, o, k], expected)


def test_im2col_products_are_the_convolution():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((6, 2, 3, 2))
    attrs = {"strides": [2, 1], "pads": [1, 0, 1, 1], "group": 2}
    c = ctx(**attrs)
    weights, cols, spatial = im2col(c, x, w, window_from_attrs(c, (3, 2)), group=2)
    assert weights.shape == (2, 3, 2 * 3 * 2) and cols.shape == (2, 2 * 3 * 2, 2 * np.prod(spatial))
    y = conv_output(np.matmul(weights, cols), 2, spatial)
    np.testing.assert_allclose(y, run("Conv", x, w, **attrs), rtol=1e-12)
