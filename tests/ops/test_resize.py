"""Resize: inference on IR text (constant and run-time scales or sizes, errors) and the reference
kernel against hand-computed nearest, linear and cubic results."""
import itertools

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from op_cases import i64, output_types, run


INPUTS = "s4: f32[2,3,4], k: i64[3], im: f32[N,8,H,W], d: f32[N,C,6,?]"


@pytest.mark.parametrize("body, expected", [
    # Resize: constant scales/sizes give static dims where the input dim is static
    ("const sc: f32[4] = [1.0, 1.0, 2.0, 0.5]\n[y] = Resize(d, _, sc)", "f32[N,C,12,?]"),
    ("const sz: i64[2] = [10, 20]\n[y] = Resize(im, _, _, sz) {axes=[2, 3]}", "f32[N,8,10,20]"),
    ("const sz: i64[2] = [5, 4]\n[y] = Resize(s4, _, _, sz) {axes=[1, 2], keep_aspect_ratio_policy=\"not_larger\"}",
     "f32[2,3,4]"),
    ("[y] = Resize(im, _, _, k)", "f32[?,?,?,?]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = Resize(s4)", "exactly one of scales and sizes"),
    ("const sc: f32[3] = [1.0, 1.0, 2.0]\n[y] = Resize(s4, _, sc) {mode=\"bicubic\"}", "must be one of"),
    ("const sc: f32[2] = [1.0, 2.0]\n[y] = Resize(s4, _, sc)", "2 values for 3 axes"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


def test_resize_nearest_and_linear():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    y = run("Resize", x, None, np.array([1, 1, 2, 2], np.float32), coordinate_transformation_mode="asymmetric")
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3))
    # half_pixel linear downscale by 2 averages neighbour pairs
    row = np.array([[0, 2, 4, 8]], np.float32)
    y = run("Resize", row, None, np.array([1, 0.5], np.float32), mode="linear")
    assert y.tolist() == [[1, 6]]
    # align_corners: the ends map onto the ends
    y = run("Resize", np.array([0, 3], np.float32), None, None, i64(4), mode="linear",
            coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(y, [0, 1, 2, 3])


def test_resize_cubic_hand_computed():
    x = np.array([0, 1, 4, 9, 16, 25], np.float64)
    y = run("Resize", x, None, np.array([2], np.float32), mode="cubic", coordinate_transformation_mode="asymmetric")
    # output 5 samples x = 2.5: Keys weights (a=-0.75) -0.09375, 0.59375, 0.59375, -0.09375 on x[1..4]
    assert y.shape == (12,) and y[5] == pytest.approx(6.125)


def test_resize_integer_dtype_rounds_and_crop_extrapolates():
    x = np.array([0, 255], np.uint8)
    y = run("Resize", x, None, None, i64(3), mode="linear", coordinate_transformation_mode="align_corners")
    assert y.dtype == np.uint8 and y.tolist() == [0, 128, 255]
    y = run("Resize", np.array([1, 2, 3], np.float32), np.array([-1, 1], np.float32), None, i64(3),
            mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0)
    np.testing.assert_allclose(y, [-7, 1, 3])    # samples x = -2 (outside: extrapolated), 0 and 2
