"""Object-detection ops: RoiAlign (pools regions of interest by bilinear sampling) and NonMaxSuppression
(greedy selection of boxes per batch and class).
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import i64
from ..ir.graph import TensorType
from ..ir.shape import shape_str
from ._indexing import require_rank, same_dim, scalar_of, tensor
from .common import FLOATS, check_dtypes, one_of, upcast
from .registry import Category, OpContext, register

H = Category.HEAVY


# ---- RoiAlign ------------------------------------------------------------------------------------
def _infer_roi_align(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [0, 1])
    check_dtypes(ctx, {i64}, [2])
    one_of("mode", ("avg", "max"))(ctx)
    one_of("coordinate_transformation_mode", ("half_pixel", "output_half_pixel"))(ctx)
    x, rois, idx = ctx.in_types
    require_rank(ctx, x.shape, 4, what="X")
    require_rank(ctx, rois.shape, 2, what="rois")
    require_rank(ctx, idx.shape, 1, what="batch_indices")
    if rois.shape is not None and isinstance(rois.shape[1], int) and rois.shape[1] != 4:
        raise ctx.fail(f"rois must have shape [num_rois, 4], got {shape_str(rois.shape)}")
    count = same_dim(ctx, [s[0] for s in (rois.shape, idx.shape) if s is not None], "numbers of rois")
    channels = None if x.shape is None else x.shape[1]
    return [tensor(x.dtype, [count, channels, ctx.attrs["output_height"], ctx.attrs["output_width"]])]


def _roi_samples(start: float, size: float, bins: int, per_bin: int, limit: int):
    """Bilinear taps of the sample points along one axis of a roi: (low, high, low weight, high weight),
    each [bins, per_bin]; points more than one pixel outside the input get zero weights."""
    step = size / bins
    pos = start + np.arange(bins)[:, None] * step + (np.arange(per_bin)[None, :] + 0.5) * (step / per_bin)
    outside = (pos < -1.0) | (pos > limit)
    pos = np.maximum(pos, 0)
    low = np.minimum(pos.astype(np.int64), limit - 1)
    at_end = low >= limit - 1
    high = np.where(at_end, low, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    keep = ~outside
    return low, high, (1 - frac) * keep, frac * keep


@register("RoiAlign", H, infer=_infer_roi_align, inputs=3,
          attrs={"coordinate_transformation_mode": "half_pixel", "mode": "avg", "output_height": 1,
                 "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0})
def roi_align(ctx: OpContext, x, rois, batch_indices):
    """Pool each region of interest (x1, y1, x2, y2 in input coordinates times spatial_scale) of image
    batch_indices[r] into output_height x output_width bins, averaging (or taking the maximum of) a
    grid of bilinear samples per bin (sampling_ratio per side, else ceil(bin size))."""
    a = ctx.attrs
    oh, ow, ratio = a["output_height"], a["output_width"], a["sampling_ratio"]
    if rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape != (rois.shape[0],):
        raise ctx.fail(f"rois {shape_str(rois.shape)} and batch_indices {shape_str(batch_indices.shape)} must be "
                       "[num_rois, 4] and [num_rois]")
    if oh < 1 or ow < 1 or ratio < 0:
        raise ctx.fail(f"output size {oh} x {ow} must be positive and sampling_ratio {ratio} non-negative")
    n, c, height, width = x.shape
    half_pixel = a["coordinate_transformation_mode"] == "half_pixel"
    data = upcast(x)
    y = np.zeros((rois.shape[0], c, oh, ow), np.float64)
    for r, (box, b) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        if not 0 <= b < n:
            raise ctx.fail(f"roi {r} refers to image {int(b)} of a batch of {n}")
        x1, y1, x2, y2 = box * a["spatial_scale"] - (0.5 if half_pixel else 0.0)
        roi_w, roi_h = (x2 - x1, y2 - y1) if half_pixel else (max(x2 - x1, 1.0), max(y2 - y1, 1.0))
        gh = ratio or int(np.ceil(roi_h / oh))
        gw = ratio or int(np.ceil(roi_w / ow))
        if gh <= 0 or gw <= 0:  # an empty roi: no samples
            continue
        ys, xs = _roi_samples(y1, roi_h, oh, gh, height), _roi_samples(x1, roi_w, ow, gw, width)
        image = data[int(b)]
        corners = [wy[:, :, None, None] * wx[None, None] * image[:, iy[:, :, None, None], ix[None, None]]
                   for iy, wy in ((ys[0], ys[2]), (ys[1], ys[3])) for ix, wx in ((xs[0], xs[2]), (xs[1], xs[3]))]
        if a["mode"] == "avg":
            y[r] = sum(corners).sum(axis=(2, 4)) / (gh * gw)
        else:
            y[r] = np.max(corners, axis=0).max(axis=(2, 4))
    return y.astype(x.dtype)


# ---- NonMaxSuppression ---------------------------------------------------------------------------
def _infer_nms(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, [0, 1, 3, 4])
    check_dtypes(ctx, {i64}, [2])
    one_of("center_point_box", (0, 1))(ctx)
    boxes, scores = ctx.in_types[:2]
    require_rank(ctx, boxes.shape, 3, what="boxes")
    require_rank(ctx, scores.shape, 3, what="scores")
    if boxes.shape is not None and scores.shape is not None:
        same_dim(ctx, (boxes.shape[0], scores.shape[0]), "batch sizes of boxes and scores")
        same_dim(ctx, (boxes.shape[1], scores.shape[2]), "box counts of boxes and scores")
    return [tensor(i64, [None, 3])]


def _corners(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of boxes [n, 4], given as corners (either diagonal) or, with center,
    as (x_center, y_center, width, height)."""
    if center:
        xc, yc, w, h = boxes.T
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _iou(boxes: np.ndarray, center: bool) -> np.ndarray:
    """Pairwise intersection over union [n, n]; 0 where boxes do not overlap or one is empty."""
    y0, x0, y1, x1 = _corners(boxes.astype(np.float64), center)
    ih = np.minimum(y1[:, None], y1[None]) - np.maximum(y0[:, None], y0[None])
    iw = np.minimum(x1[:, None], x1[None]) - np.maximum(x0[:, None], x0[None])
    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
    area = (y1 - y0) * (x1 - x0)
    union = area[:, None] + area[None] - inter
    valid = (inter > 0) & (area[:, None] > 0) & (area[None] > 0) & (union > 0)
    return np.where(valid, inter / np.where(valid, union, 1), 0.0)


def _optional_scalar(ctx: OpContext, a: np.ndarray | None, what: str, default):
    return default if a is None or a.size == 0 else scalar_of(ctx, a, what)


@register("NonMaxSuppression", H, infer=_infer_nms, attrs={"center_point_box": 0}, inputs=(2, 5))
def non_max_suppression(ctx: OpContext, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None):
    """Per batch and class, greedily keep the highest-scoring boxes (ties: the lower index) that overlap
    no kept box by an IoU above iou_threshold, at most max_output_boxes_per_class (default 0) of them,
    skipping scores not above score_threshold. Rows [batch, class, box] in that order."""
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
            (scores.shape[0], scores.shape[2]) != boxes.shape[:2]:
        raise ctx.fail(f"boxes {shape_str(boxes.shape)} and scores {shape_str(scores.shape)} must be "
                       "[batch, boxes, 4] and [batch, classes, boxes]")
    limit = int(_optional_scalar(ctx, max_output_boxes_per_class, "max_output_boxes_per_class", 0))
    iou_max = float(_optional_scalar(ctx, iou_threshold, "iou_threshold", 0.0))
    score_min = _optional_scalar(ctx, score_threshold, "score_threshold", None)
    selected = []
    for b in range(boxes.shape[0]):
        iou = _iou(boxes[b], bool(ctx.attrs["center_point_box"]))
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = np.argsort(-s.astype(np.float64), kind="stable")
            if score_min is not None:
                order = order[s[order] > score_min]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not kept or iou[i, kept].max() <= iou_max:
                    kept.append(int(i))
            selected += [(b, c, i) for i in kept]
    return np.array(selected, np.int64).reshape(-1, 3)
