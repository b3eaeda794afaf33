"""The less common ops of snipjit.ops.extra: inference on IR text (dynamic dims, constant shape inputs,
errors) and reference kernels against hand-computed results, independent NumPy formulas and direct loop
definitions."""
import itertools

import numpy as np
import pytest


import snipjit.ops.nn  # noqa: F401  (MaxPool, Conv: independent ops some tests compare with)
from snipjit import parse_graph
from snipjit.ops import OpError
from snipjit.ops.common import evaluate

INPUTS = ("x: f32[B,S,4], m: f32[B,3,3], i: i32[5], img: f32[N,C,H,W], g: f32[N,5,7,2], v: f32[1,2,4,4,4], "
          "gv: f32[1,3,3,3,3], th: f32[N,2,3], sz: i64[4], cols: f32[N,12,L], idx: i64[N,C,2,2], "
          "pool: f32[N,C,2,2], cache: f16[B,8,16,64], upd: f16[B,8,S,64], wi: i64[B], boxes: f32[1,6,4], "
          "upd2: f16[B,4,S,64], scores: f32[1,2,6], rois: f32[R,4], bi: i64[R], w: f32[4,2,3,3], "
          "off: f32[N,18,5,5], u: f32[*], q: f16[B,T,64], kv: f16[B,T,32], st: f32[B,2,16,16], dec: f16[B,T,2]")
rng = np.random.default_rng(0)


def types(body):
    outs = body.strip().splitlines()[-1].split("]")[0].lstrip("[")
    g = parse_graph(f"graph({INPUTS}) -> [{outs}] {{\n{body}\n}}")
    return "; ".join(str(v.type) for v in g.outputs)


def run(op, *inputs, outputs=1, **attrs):
    res = evaluate(op, inputs, attrs, outputs=outputs)
    return res[0] if outputs == 1 else res


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- inference ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body, expected", [
    ("const a: i64[] = -1\n[y] = CumProd(x, a) {exclusive=1}", "f32[B,S,4]"),
    ("[y] = Det(m)", "f32[B]"),
    ("[y] = BitCast(i) {to=1}", "f32[5]"),
    ("[y] = BitCast(u) {to=6}", "i32[*]"),
    ("[y, first, inverse, counts] = Unique(x)", "f32[?]; i64[?]; i64[?]; i64[?]"),
    ("[y, first, inverse, counts] = Unique(i)", "i32[?]; i64[?]; i64[5]; i64[?]"),
    ("[y, first, inverse] = Unique(x) {axis=-1, sorted=0}", "f32[B,S,?]; i64[?]; i64[4]"),
    ("const c: i64[5] = [3, 1, 3, 2, 1]\n[y, first, inverse, counts] = Unique(c)", "i64[3]; i64[3]; i64[5]; i64[3]"),
    ("[y] = TensorScatter(cache, upd, wi) {mode=\"circular\"}", "f16[B,8,16,64]"),
    ("const s: i64[2] = [5, 5]\nconst k: i64[2] = [2, 2]\n[y] = Col2Im(cols, s, k)", "f32[N,3,5,5]"),
    ("const k: i64[2] = [2, 2]\n[y] = Col2Im(cols, sz, k)", "f32[N,3,?,?,?,?]"),
    ("[y] = Col2Im(cols, wi, wi)", "f32[*]"),
    ("[y] = MaxUnpool(pool, idx) {kernel_shape=[2, 2], strides=[2, 2]}", "f32[N,C,4,4]"),
    ("[y] = MaxUnpool(img, idx) {kernel_shape=[3, 3], pads=[1, 1, 1, 1]}", "f32[N,C,H,W]"),
    ("[y] = MaxUnpool(img, idx) {kernel_shape=[3, 3], strides=[2, 2]}", "f32[N,C,?,?]"),
    ("const s: i64[4] = [1, 1, 5, 5]\n[y] = MaxUnpool(pool, idx, s) {kernel_shape=[2, 2], strides=[2, 2]}",
     "f32[1,1,5,5]"),
    ("[y] = MaxUnpool(pool, idx, sz) {kernel_shape=[2, 2]}", "f32[?,?,?,?]"),
    ("[y] = GridSample(img, g) {mode=\"cubic\"}", "f32[N,C,5,7]"),
    ("[y] = GridSample(v, gv) {padding_mode=\"reflection\"}", "f32[1,2,3,3,3]"),
    ("[y] = AffineGrid(th, sz)", "f32[N,?,?,2]"),
    ("const s: i64[4] = [2, 3, 6, 7]\n[y] = AffineGrid(th, s)", "f32[N,6,7,2]"),
    ("[y] = DeformConv(img, w, off) {pads=[1, 1, 1, 1]}", "f32[N,4,H,W]"),
    ("[y] = DeformConv(img, w, off) {strides=[2, 2]}", "f32[N,4,?,?]"),
    ("[y] = RoiAlign(img, rois, bi) {output_height=3, output_width=2}", "f32[R,C,3,2]"),
    ("[y] = NonMaxSuppression(boxes, scores)", "i64[?,3]"),
    ("[y, s] = LinearAttention(q, kv, kv) {q_num_heads=4, kv_num_heads=2, update_rule=\"linear\"}",
     "f16[B,T,64]; f16[B,2,16,16]"),
    ("[y, s] = LinearAttention(q, kv, kv, st, dec, dec) {q_num_heads=4, kv_num_heads=2}",
     "f16[B,T,64]; f32[B,2,16,16]"),
])
def test_inference(body, expected):
    assert types(body) == expected


@pytest.mark.parametrize("body, message", [
    ("const a: i64[2] = [0, 1]\n[y] = CumProd(x, a)", "axis must be a scalar"),
    ("[y] = Det(g)", "square matrices in its last two dims, got shape \\[N,5,7,2\\]"),
    ("[y] = Det(i)", "input 0 has dtype i32"),
    ("[y] = BitCast(i) {to=7}", "cannot reinterpret i32 \\(32 bits\\) as i64"),
    ("[y] = BitCast(i) {to=8}", "string"),
    ("[y] = Unique(x) {axis=3}", "axis 3 is out of range"),
    ("[y] = TensorScatter(cache, upd) {axis=0}", "cannot be the batch axis"),
    ("[y] = TensorScatter(cache, upd2)", "dims 1 of past_cache and update differ"),
    ("[y] = TensorScatter(cache, upd) {mode=\"ring\"}", "mode='ring'"),
    ("const s: i64[2] = [5, 5]\nconst k: i64[2] = [5, 5]\n[y] = Col2Im(cols, s, k)", "not a multiple"),
    ("[y] = MaxUnpool(pool, idx) {kernel_shape=[2]}", "2 spatial dims but kernel_shape has 1"),
    ("[y] = GridSample(img, gv)", "grid .* must have shape"),
    ("[y] = GridSample(img, g) {mode=\"bilinear\"}", "mode='bilinear'"),
    ("const s: i64[3] = [1, 6, 7]\n[y] = AffineGrid(th, s)", "4 or 5 entries"),
    ("const s: i64[5] = [1, 1, 6, 7, 8]\n[y] = AffineGrid(th, s)", "must have shape \\[N, 3, 4\\]"),
    ("[y] = RoiAlign(img, rois, bi) {mode=\"sum\"}", "mode='sum'"),
    ("[y] = NonMaxSuppression(boxes, m)", "box counts of boxes and scores differ|batch sizes"),
    ("[y, s] = LinearAttention(q, kv, kv) {q_num_heads=3, kv_num_heads=2}", "positive multiple"),
    ("[y, s] = LinearAttention(q, kv, kv) {q_num_heads=4, kv_num_heads=2}", "'gated_delta' needs decay"),
    ("[y, s] = LinearAttention(q, kv, kv, _, dec) {q_num_heads=4, kv_num_heads=2, update_rule=\"delta\"}",
     "'delta' takes no decay"),
])
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body)


# ---- CumProd, Det, BitCast ---------------------------------------------------------------------------------
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


def test_det_of_a_batch_of_matrices():
    x = np.array([[[1, 2], [3, 4]], [[2, 0], [0, 3]], [[1, 2], [2, 4]]], np.float32)
    np.testing.assert_allclose(run("Det", x), [-2, 6, 0], atol=1e-6)
    assert run("Det", x[0].astype(np.float64)).shape == ()
    with pytest.raises(OpError, match="square matrices"):
        run("Det", np.zeros((2, 3), np.float32))


def test_bitcast_keeps_the_bits():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    y = run("BitCast", x, to=6)
    assert y.dtype == np.int32 and y.tolist() == [0x3F800000, -0x3FE00000, 0x7F800000]
    assert run("BitCast", np.array([-1, 5], np.int8), to=2).tolist() == [255, 5]
    assert run("BitCast", np.array([0, 1], np.uint8), to=9).tolist() == [False, True]
    with pytest.raises(OpError, match="not a boolean"):
        run("BitCast", np.array([2], np.uint8), to=9)


# ---- Unique ------------------------------------------------------------------------------------------------
def test_unique_flattened_sorted_and_in_order_of_appearance():
    x = np.array([2, 1, 1, 3, 4, 3], np.int64)
    y, first, inverse, counts = run("Unique", x, outputs=4, sorted=0)
    assert (y.tolist(), first.tolist(), inverse.tolist(), counts.tolist()) == \
        ([2, 1, 3, 4], [0, 1, 3, 4], [0, 1, 1, 2, 3, 2], [1, 2, 2, 1])
    y, first, inverse, counts = run("Unique", np.array([[1, 3], [2, 3]], np.float32), outputs=4)
    assert (y.tolist(), first.tolist(), inverse.tolist(), counts.tolist()) == \
        ([1, 2, 3], [0, 2, 1], [0, 2, 1, 2], [1, 1, 2])


@pytest.mark.parametrize("sort", [0, 1])
def test_unique_slices_along_an_axis(sort):
    x = np.array([[[1, 1], [0, 1], [2, 1], [0, 1]]] * 2, np.float32)  # [2, 4, 2]; slices along axis 1
    y, first, inverse, counts = run("Unique", x, outputs=4, axis=-2, sorted=sort)
    # distinct slices: [1, 1] first at 0, [0, 1] at 1 (and 3), [2, 1] at 2
    order = [1, 0, 2] if sort else [0, 1, 2]
    np.testing.assert_array_equal(y, x[:, order])
    assert first.tolist() == order
    np.testing.assert_array_equal(y[:, inverse], x)  # every slice maps back to its value
    assert counts.tolist() == [[1, 2, 1][o] for o in order]


def test_unique_of_bfloat16_sorts_by_value():
    import ml_dtypes
    x = np.array([3.5, -1, 3.5, 0.25], ml_dtypes.bfloat16)
    y, counts = (run("Unique", x, outputs=4)[k] for k in (0, 3))
    assert y.dtype == x.dtype and y.astype(np.float32).tolist() == [-1, 0.25, 3.5] and counts.tolist() == [1, 1, 2]


# ---- TensorScatter -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, start, expected", [
    ("linear", [0, 2], [[7, 8, 0, 0, 0], [0, 0, 7, 8, 0]]),
    ("circular", [4, 1], [[8, 0, 0, 0, 7], [0, 7, 8, 0, 0]])])
def test_tensor_scatter_writes_each_batch_row_at_its_index(mode, start, expected):
    past = np.zeros((2, 5, 1), np.int32)
    update = np.array([[[7], [8]], [[7], [8]]], np.int32)
    y = run("TensorScatter", past, update, np.array(start, np.int64), axis=1, mode=mode)
    assert y[..., 0].tolist() == expected and past.sum() == 0
    with pytest.raises(OpError, match="overruns"):
        run("TensorScatter", past, update, np.array([4, 0], np.int64), axis=1)


def test_tensor_scatter_default_axis_and_indices():
    past, update = randn(1, 2, 6, 3), randn(1, 2, 4, 3)
    y = run("TensorScatter", past, update)
    np.testing.assert_array_equal(y[:, :, :4], update)
    np.testing.assert_array_equal(y[:, :, 4:], past[:, :, 4:])


# ---- Col2Im, MaxUnpool -------------------------------------------------------------------------------------
def naive_col2im(cols, image, block, strides, dilations, pads):
    n, c = cols.shape[0], cols.shape[1] // int(np.prod(block))
    out = [(i + pads[k] + pads[k + len(image)] - (block[k] - 1) * dilations[k] - 1) // strides[k] + 1
           for k, i in enumerate(image)]
    y = np.zeros((n, c, *image))
    cols = cols.reshape(n, c, *block, *out)
    for k in itertools.product(*map(range, block)):
        for o in itertools.product(*map(range, out)):
            pos = tuple(oi * s - p + ki * d for oi, s, p, ki, d in zip(o, strides, pads, k, dilations))
            if all(0 <= q < dim for q, dim in zip(pos, image)):
                y[(slice(None), slice(None)) + pos] += cols[(slice(None), slice(None)) + k + o]
    return y


@pytest.mark.parametrize("image, block, attrs", [
    ([5, 5], [2, 2], {}),
    ([5, 6], [2, 3], {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 2]}),
    ([3, 4, 4], [1, 2, 2], {"strides": [1, 2, 2]}),
])
def test_col2im_sums_blocks_into_the_image(image, block, attrs):
    strides, dilations = attrs.get("strides", [1] * len(image)), attrs.get("dilations", [1] * len(image))
    pads = attrs.get("pads", [0] * 2 * len(image))
    out = [(i + pads[k] + pads[k + len(image)] - (block[k] - 1) * dilations[k] - 1) // strides[k] + 1
           for k, i in enumerate(image)]
    cols = randn(2, 2 * int(np.prod(block)), int(np.prod(out)))
    y = run("Col2Im", cols, np.array(image, np.int64), np.array(block, np.int64), **attrs)
    np.testing.assert_allclose(y, naive_col2im(cols, image, block, strides, dilations, pads), rtol=1e-5, atol=1e-6)


def test_col2im_checks_the_number_of_blocks():
    with pytest.raises(OpError, match="input has 3 blocks"):
        run("Col2Im", randn(1, 4, 3), np.array([3, 3], np.int64), np.array([2, 2], np.int64))


def test_max_unpool_puts_values_back_at_their_pooled_positions():
    x = randn(1, 2, 4, 4)
    pooled, indices = evaluate("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, outputs=2)
    y = run("MaxUnpool", pooled, indices, kernel_shape=[2, 2], strides=[2, 2])
    expected = np.where(x == np.repeat(np.repeat(pooled, 2, axis=2), 2, axis=3), x, 0)
    np.testing.assert_array_equal(y, expected)
    bigger = run("MaxUnpool", pooled, indices, np.array([1, 2, 5, 6], np.int64), kernel_shape=[2, 2], strides=[2, 2])
    assert bigger.shape == (1, 2, 5, 6)
    np.testing.assert_array_equal(bigger[:, :, :4, :4], expected)
    assert not bigger[:, :, 4:].any() and not bigger[:, :, :, 4:].any()
    with pytest.raises(OpError, match="outside the unpooled tensor"):
        run("MaxUnpool", pooled, indices + 100, kernel_shape=[2, 2], strides=[2, 2])


# ---- GridSample, AffineGrid --------------------------------------------------------------------------------
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


# ---- DeformConv --------------------------------------------------------------------------------------------
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


# ---- RoiAlign ----------------------------------------------------------------------------------------------
def test_roi_align_of_a_linear_ramp_gives_the_bin_centres():
    x = np.tile(np.arange(8, dtype=np.float32), (1, 2, 8, 1))  # value = column
    rois = np.array([[1, 1, 5, 3], [0, 0, 10, 8]], np.float32)
    y = run("RoiAlign", x, rois, np.array([0, 0], np.int64), output_height=2, output_width=4, sampling_ratio=2)
    # half_pixel: roi x from 0.5 to 4.5, four bins of width 1: centres 1, 2, 3, 4
    np.testing.assert_allclose(y[0, 0, 0], [1, 2, 3, 4], atol=1e-6)
    assert y.shape == (2, 2, 2, 4)
    # the second roi spans x from -0.5 to 9.5: bins of 2.5, samples 1.25 apart; in the last bin the
    # sample at 7.625 is clamped to the last column and the one at 8.875 (beyond 8) reads zero
    np.testing.assert_allclose(y[1, 1, 1], [0.75, 3.25, 5.75, 3.5], atol=1e-6)


def test_roi_align_max_and_output_half_pixel():
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = 4.0
    rois = np.array([[0, 0, 2, 2]], np.float32)
    avg = run("RoiAlign", x, rois, np.array([0], np.int64), coordinate_transformation_mode="output_half_pixel",
              sampling_ratio=2)
    mx = run("RoiAlign", x, rois, np.array([0], np.int64), coordinate_transformation_mode="output_half_pixel",
             sampling_ratio=2, mode="max")
    # samples at 0.5 and 1.5 per axis; each reads the peak with weight 1/4 (avg of 4 samples: 1, max: 1)
    assert avg[0, 0, 0, 0] == pytest.approx(1.0) and mx[0, 0, 0, 0] == pytest.approx(1.0)
    with pytest.raises(OpError, match="refers to image 3"):
        run("RoiAlign", x, rois, np.array([3], np.int64))


# ---- NonMaxSuppression -------------------------------------------------------------------------------------
BOXES = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                   [0, 100, 1, 101]]], np.float32)
SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]], np.float32)


def nms(*inputs, **attrs):
    return run("NonMaxSuppression", BOXES, SCORES, *inputs, **attrs).tolist()


def test_nms_greedy_selection_per_class():
    limit, iou = np.array([3], np.int64), np.array([0.5], np.float32)
    assert nms(limit, iou) == [[0, 0, 3], [0, 0, 0], [0, 0, 5], [0, 1, 5], [0, 1, 4], [0, 1, 2]]
    assert nms(limit, iou, np.array([0.4], np.float32)) == [[0, 0, 3], [0, 0, 0], [0, 1, 5], [0, 1, 4]]
    assert nms(np.array([1], np.int64), iou) == [[0, 0, 3], [0, 1, 5]]
    assert nms() == []


def test_nms_center_point_boxes_and_ties():
    boxes = np.array([[[0.5, 0.5, 1, 1], [0.5, 0.5, 1, 1], [5, 5, 1, 1]]], np.float32)
    scores = np.array([[[0.5, 0.5, 0.5]]], np.float32)
    out = run("NonMaxSuppression", boxes, scores, np.array([5], np.int64), np.array([0.5], np.float32),
              center_point_box=1)
    assert out.tolist() == [[0, 0, 0], [0, 0, 2]]  # equal scores: the lower index first; box 1 is box 0


# ---- LinearAttention --------------------------------------------------------------------------------------
def naive_linear_attention(q, k, v, hq, hkv, rule, past=None, decay=None, beta=None, scale=0.0):
    """The recurrence of the definition, one batch row, head and step at a time."""
    b, steps = q.shape[:2]
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    state = np.zeros((b, hkv, dk, dv)) if past is None else past.astype(np.float64).copy()
    out = np.zeros((b, steps, hq * dv))
    scale = scale or 1 / np.sqrt(dk)
    for n, t, h in itertools.product(range(b), range(steps), range(hkv)):
        kt, vt = k[n, t, h * dk:(h + 1) * dk], v[n, t, h * dv:(h + 1) * dv]
        s = state[n, h]
        if rule in ("gated", "gated_delta"):
            g = decay[n, t, h] if decay.shape[2] == hkv else decay[n, t, h * dk:(h + 1) * dk, None]
            s = np.exp(g) * s
        if rule in ("delta", "gated_delta"):
            vt = beta[n, t, h if beta.shape[2] > 1 else 0] * (vt - s.T @ kt)
        state[n, h] = s + np.outer(kt, vt)
        for j in range(hq // hkv):  # the query heads reading this state
            qh = h * (hq // hkv) + j
            out[n, t, qh * dv:(qh + 1) * dv] = scale * q[n, t, qh * dk:(qh + 1) * dk] @ state[n, h]
    return out, state


@pytest.mark.parametrize("rule, hq, per_key_decay, scalar_beta", [
    ("linear", 2, False, False), ("gated", 4, True, False), ("delta", 2, False, True),
    ("gated_delta", 4, False, False)])
def test_linear_attention_recurrence(rule, hq, per_key_decay, scalar_beta):
    b, steps, hkv, dk, dv = 2, 3, 2, 4, 3
    q, k, v = randn(b, steps, hq * dk), randn(b, steps, hkv * dk) / 2, randn(b, steps, hkv * dv)
    past = randn(b, hkv, dk, dv)
    decay = -np.abs(randn(b, steps, hkv * dk if per_key_decay else hkv)) if "gated" in rule else None
    beta = rng.uniform(0, 1, (b, steps, 1 if scalar_beta else hkv)).astype(np.float32) if "delta" in rule else None
    y, state = run("LinearAttention", q, k, v, past, decay, beta, outputs=2, q_num_heads=hq, kv_num_heads=hkv,
                   update_rule=rule, scale=0.0 if rule != "delta" else 0.25)
    ey, es = naive_linear_attention(q, k, v, hq, hkv, rule, past, decay, beta, 0.0 if rule != "delta" else 0.25)
    np.testing.assert_allclose(y, ey, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, es, rtol=1e-4, atol=1e-5)


def test_linear_attention_without_past_in_half_precision():
    q, k, v = randn(1, 4, 8, dtype=np.float16), randn(1, 4, 4, dtype=np.float16), randn(1, 4, 8, dtype=np.float16)
    y, state = run("LinearAttention", q, k, v, outputs=2, q_num_heads=2, kv_num_heads=1, update_rule="linear")
    assert y.dtype == state.dtype == np.float16 and y.shape == (1, 4, 16) and state.shape == (1, 1, 4, 8)
    ey, es = naive_linear_attention(*(a.astype(np.float32) for a in (q, k, v)), 2, 1, "linear")
    np.testing.assert_allclose(y, ey, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(state, es, rtol=1e-2, atol=1e-2)
