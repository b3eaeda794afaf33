"""Sampling ops (GridSample, AffineGrid, DeformConv): inference on IR text (dynamic dims, constant shape
inputs, errors) and reference kernels against hand-computed samples and independent ops (Conv)."""

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from snipjit.ops.common import evaluate
from op_cases import output_types, run


INPUTS = ("img: f32[N,C,H,W], g: f32[N,5,7,2], v: f32[1,2,4,4,4], gv: f32[1,3,3,3,3], th: f32[N,2,3], sz: i64[4], "
          "w: f32[4,2,3,3], off: f32[N,18,5,5]")


rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("body, expected", [
    ("[y] = GridSample(img, g) {mode=\"cubic\"}", "f32[N,C,5,7]"),
    ("[y] = GridSample(v, gv) {padding_mode=\"reflection\"}", "f32[1,2,3,3,3]"),
    ("[y] = AffineGrid(th, sz)", "f32[N,?,?,2]"),
    ("const s: i64[4] = [2, 3, 6, 7]\n[y] = AffineGrid(th, s)", "f32[N,6,7,2]"),
    ("[y] = DeformConv(img, w, off) {pads=[1, 1, 1, 1]}", "f32[N,4,H,W]"),
    ("[y] = DeformConv(img, w, off) {strides=[2, 2]}", "f32[N,4,?,?]"),
])
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = GridSample(img, gv)", "grid .* must have shape"),
    ("[y] = GridSample(img, g) {mode=\"bilinear\"}", "mode='bilinear'"),
    ("const s: i64[3] = [1, 6, 7]\n[y] = AffineGrid(th, s)", "4 or 5 entries"),
    ("const s: i64[5] = [1, 1, 6, 7, 8]\n[y] = AffineGrid(th, s)", "must have shape \\[N, 3, 4\\]"),
])
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


def pixel_grid(h, w, align):
    """The normalised grid [1, h, w, 2] whose points are the input's pixel centres."""
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    if align:
        gx, gy = xs / (w - 1) * 2 - 1, ys / (h - 1) * 2 - 1
    else:
        gx, gy = (2 * xs + 1) / w - 1, (2 * ys + 1) / h - 1
    return np.stack([gx, gy], -1)[None].astype(np.float32)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_at_pixel_centres_is_the_identity(mode, align):
    x = randn(2, 3, 4, 5)
    grid = np.repeat(pixel_grid(4, 5, align), 2, axis=0)
    y = run("GridSample", x, grid, mode=mode, align_corners=align)
    np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)


def test_grid_sample_linear_between_pixels_and_the_padding_modes():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)  # one row 0 1 2 3, pixel edges at x = -1 ... 1
    # points at pixel coordinates 0.5, 3.25 (past the last centre), -1.0 (outside the input), 4.5
    px = np.array([0.5, 3.25, -1.0, 4.5])
    grid = np.stack([(2 * px + 1) / 4 - 1, np.zeros(4)], -1).reshape(1, 1, 4, 2).astype(np.float32)
    zeros = run("GridSample", x, grid)
    np.testing.assert_allclose(zeros[0, 0, 0], [0.5, 0.75 * 3, 0, 0], atol=1e-6)
    border = run("GridSample", x, grid, padding_mode="border")
    np.testing.assert_allclose(border[0, 0, 0], [0.5, 3, 0, 3], atol=1e-6)
    # reflection about the outer edges (-0.5, 3.5): -1.0 -> 0.0, 4.5 -> 2.5
    reflection = run("GridSample", x, grid, padding_mode="reflection")
    np.testing.assert_allclose(reflection[0, 0, 0], [0.5, 3, 0, 2.5], atol=1e-6)


def test_grid_sample_volumetric_nearest_picks_the_voxel():
    x = randn(1, 2, 3, 4, 5)
    z, y, w = 2, 1, 3  # voxel to read; grid order is (x, y, z)
    point = [(2 * w + 1) / 5 - 1, (2 * y + 1) / 4 - 1, (2 * z + 1) / 3 - 1]
    grid = np.array(point, np.float32).reshape(1, 1, 1, 1, 3)
    out = run("GridSample", x, grid, mode="nearest")
    np.testing.assert_array_equal(out[0, :, 0, 0, 0], x[0, :, z, y, w])


def test_affine_grid_identity_and_translation():
    theta = np.array([[[1, 0, 0], [0, 1, 0]], [[1, 0, 0.5], [0, 2, 0]]], np.float32)
    grid = run("AffineGrid", theta, np.array([2, 1, 3, 4], np.int64), align_corners=0)
    assert grid.shape == (2, 3, 4, 2) and grid.dtype == np.float32
    xs, ys = (2 * np.arange(4) + 1) / 4 - 1, (2 * np.arange(3) + 1) / 3 - 1
    np.testing.assert_allclose(grid[0, 1, :, 0], xs, atol=1e-6)
    np.testing.assert_allclose(grid[0, :, 2, 1], ys, atol=1e-6)
    np.testing.assert_allclose(grid[1, 1, :, 0], xs + 0.5, atol=1e-6)
    np.testing.assert_allclose(grid[1, :, 2, 1], 2 * ys, atol=1e-6)
    aligned = run("AffineGrid", theta[:1], np.array([1, 1, 3, 4], np.int64), align_corners=1)
    np.testing.assert_allclose(aligned[0, 0, :, 0], np.linspace(-1, 1, 4), atol=1e-6)
    # with GridSample: the identity transform reproduces the input
    x = randn(1, 2, 3, 4)
    np.testing.assert_allclose(run("GridSample", x, grid[:1]), x, rtol=1e-5, atol=1e-6)


def test_affine_grid_3d():
    theta = np.array([[[0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0]]], np.float64)  # swaps x and z
    grid = run("AffineGrid", theta, np.array([1, 1, 2, 3, 4], np.int64), align_corners=1)
    assert grid.shape == (1, 2, 3, 4, 3)
    np.testing.assert_allclose(grid[0, :, 0, 0, 0], [-1, 1])   # x' = z
    np.testing.assert_allclose(grid[0, 0, 0, :, 2], np.linspace(-1, 1, 4))  # z' = x


def test_deform_conv_without_offsets_is_conv():
    x, w, b = randn(2, 4, 6, 7), randn(6, 2, 3, 3), randn(6)
    attrs = {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 2}
    expected = evaluate("Conv", [x, w, b], attrs)[0]
    offset = np.zeros((2, 2 * 9 * 2, *expected.shape[2:]), np.float32)
    y = run("DeformConv", x, w, offset, b, offset_group=2, **attrs)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_deform_conv_integer_offsets_and_mask():
    """Every tap moved one pixel right reads the input shifted left (zeros past the edge); the mask
    scales each tap."""
    x, w = randn(1, 2, 5, 5), randn(3, 2, 2, 2)
    offset = np.zeros((1, 2 * 4, 4, 4), np.float32)
    offset[:, 1::2] = 1.0  # (dy, dx) pairs per tap: dx = 1
    shifted = np.concatenate([x[..., 1:], np.zeros((1, 2, 5, 1), np.float32)], axis=-1)
    y = run("DeformConv", x, w, offset)
    np.testing.assert_allclose(y, evaluate("Conv", [shifted, w], {})[0], rtol=1e-5, atol=1e-5)
    mask = np.full((1, 4, 4, 4), 0.5, np.float32)
    np.testing.assert_allclose(run("DeformConv", x, w, offset, None, mask), y / 2, rtol=1e-5, atol=1e-5)


def test_deform_conv_half_pixel_offset_interpolates():
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    w = np.ones((1, 1, 1, 1), np.float32)
    offset = np.full((1, 2, 3, 3), 0.5, np.float32)  # every read at (i + 0.5, j + 0.5)
    y = run("DeformConv", x, w, offset)
    inside = (x[0, 0, :-1, :-1] + x[0, 0, 1:, :-1] + x[0, 0, :-1, 1:] + x[0, 0, 1:, 1:]) / 4
    np.testing.assert_allclose(y[0, 0, :2, :2], inside)
    assert y[0, 0, 2, 2] == pytest.approx(x[0, 0, 2, 2] / 4)  # three of four neighbours are outside
    with pytest.raises(OpError, match="offset has shape"):
        run("DeformConv", x, w, offset[:, :1])
