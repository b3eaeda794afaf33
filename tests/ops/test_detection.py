"""Detection ops (RoiAlign, NonMaxSuppression): inference on IR text (dynamic dims, errors) and
reference kernels against hand-computed results."""

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from op_cases import output_types, run


INPUTS = "m: f32[B,3,3], img: f32[N,C,H,W], boxes: f32[1,6,4], scores: f32[1,2,6], rois: f32[R,4], bi: i64[R]"


@pytest.mark.parametrize("body, expected", [
    ("[y] = RoiAlign(img, rois, bi) {output_height=3, output_width=2}", "f32[R,C,3,2]"),
    ("[y] = NonMaxSuppression(boxes, scores)", "i64[?,3]"),
])
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = RoiAlign(img, rois, bi) {mode=\"sum\"}", "mode='sum'"),
    ("[y] = NonMaxSuppression(boxes, m)", "box counts of boxes and scores differ|batch sizes"),
])
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


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
