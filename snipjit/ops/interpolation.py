"""The interpolation the sampling ops share: Keys' cubic kernel (Resize and GridSample both use it) and
`sample`, which reads X [N, C, *spatial] at real-valued pixel coordinates (one array per spatial dim,
shaped [N, *points]) with nearest, linear or cubic interpolation, taps outside the input being zero, the
nearest border pixel, or reflected back inside.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .common import compute_dtype

SAMPLE_MODES = ("nearest", "linear", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75   # the Keys parameter of GridSample, and Resize's default cubic_coeff_a


def keys_cubic(distance: np.ndarray, a: float = CUBIC_A) -> np.ndarray:
    """Keys' cubic convolution kernel: the weight of a tap `distance` pixels from the sampled point
    (either sign). It is 1 at distance 0, 0 at every other integer distance and from distance 2 on;
    a = -0.5 reproduces quadratics exactly, -0.75 matches a sharper (OpenCV-style) filter."""
    t = np.abs(distance)
    near = ((a + 2) * t - (a + 3)) * t * t + 1          # |t| <= 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a     # 1 < |t| < 2
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


@dataclass(frozen=True)
class Sampling:
    """How `sample` reads between and outside pixels. `bounds` are the reflection borders per spatial
    dim (GridSample reflects about the outer pixel edges, or the pixel centres with align_corners)."""
    mode: str
    padding: str
    bounds: tuple[tuple[float, float], ...]


def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """x mirrored at lo and hi (repeatedly) until it lies in [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, dist = x < lo, np.where(x < lo, lo - x, x - hi)
    folds = np.floor(dist / span)
    rest = dist - folds * span
    even = folds % 2 == 0
    inside = np.where(below, np.where(even, lo + rest, hi - rest), np.where(even, hi - rest, lo + rest))
    return np.where((x < lo) | (x > hi), inside, x)


def _taps(c: np.ndarray, mode: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(index, weight) pairs interpolating at coordinates c along one dim."""
    if mode == "nearest":
        return [(np.trunc(c).astype(np.int64), np.ones_like(c))]
    base = np.floor(c)
    t = c - base
    base = base.astype(np.int64)
    if mode == "linear":
        return [(base, 1 - t), (base + 1, t)]
    return [(base + j, keys_cubic(t - j)) for j in (-1, 0, 1, 2)]


def sample(x: np.ndarray, coords: list[np.ndarray], how: Sampling) -> np.ndarray:
    """x [N, C, *spatial] read at pixel coordinates `coords` (one [N, *points] array per spatial dim):
    [N, C, *points], in the compute dtype of x and the coordinates."""
    dims = x.shape[2:]
    dt = np.result_type(compute_dtype(x.dtype), coords[0].dtype)
    data = x.astype(dt, copy=False)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (coords[0].ndim - 1))
    out = np.zeros(coords[0].shape[:1] + (x.shape[1],) + coords[0].shape[1:], dt)
    if 0 in dims:  # nothing to read: every tap is outside
        return out
    per_dim = [_taps(c, how.mode) for c in coords]
    for combo in itertools.product(*per_dim):
        weight = math.prod(w for _, w in combo)
        index, inside = [], True
        for (i, _), d, (lo, hi) in zip(combo, dims, how.bounds):
            if how.padding == "zeros":
                inside = inside & (i >= 0) & (i < d)
                i = np.clip(i, 0, d - 1)
            elif how.padding == "border":
                i = np.clip(i, 0, d - 1)
            else:
                i = np.clip(np.trunc(reflect(i.astype(np.float64), lo, hi)).astype(np.int64), 0, d - 1)
            index.append(i)
        values = data[(batch, slice(None), *index)]  # [N, *points, C]: advanced indices go first
        out += np.moveaxis(values * (weight * inside)[..., None], -1, 1)
    return out
