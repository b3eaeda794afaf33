"""NHWC grouped convolutions of L channels per group (as many in as out) on the window kernel's grouped
variant, against a float64 NumPy reference at every ISA level this host can execute: L from 4 to the
level's vector width, 2×2 to 7×7 and non-square kernels, column strides 1 and 2, row strides and
dilations, asymmetric pads wider than the window's half, maps narrower than a register block, H or W of
1, batches, bias, clamps and an activation, an output slice of wider channels, the work split over the
native pool, the weights' packing round trip and the refusals."""
import numpy as np
import pytest

from snipjit.runtime.implementations import window_launch as wl
from snipjit.runtime.implementations.gemm_launch import available

pytestmark = pytest.mark.skipif(not available(), reason="no LLVM JIT")


def reference(x, weights, window, bias=None, clamp=None):
    """Grouped convolution in float64: weights [C, L, KH, KW], C / L groups."""
    n, h, w, c = x.shape
    group, (kh, kw) = weights.shape[1], weights.shape[2:]
    (sh, sw), (dh, dw), (top, left, bottom, right) = window.strides, window.dilations, window.pads
    oh, ow = window.output_size(h, w)
    padded = np.zeros((n, h + top + bottom, w + left + right, c))
    padded[:, top:top + h, left:left + w] = x
    per_group = weights.astype(np.float64).reshape(c // group, group, group, kh, kw)   # [g, o, i, kh, kw]
    y = np.zeros((n, oh, ow, c // group, group))
    for i in range(kh):
        for j in range(kw):
            tap = padded[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            y += np.einsum("nhwgi,goi->nhwgo", tap.reshape(n, oh, ow, c // group, group), per_group[..., i, j])
    y = y.reshape(n, oh, ow, c) + (0 if bias is None else bias)
    return y if clamp is None else np.clip(y, *clamp)


def check(out, ref, scale=None):
    """Within f32 rounding of sums as large as `scale` (by default the largest of `ref`; a clamped result
    needs the sums' own: a value clamped to 0.5 may come of sums of 20 whose last bits differ)."""
    scale = np.abs(ref).max() if scale is None else scale
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * max(1.0, scale))


def run(x, weights, window, bias=None, clamp=None, out=None, activation=""):
    oh, ow = window.output_size(*x.shape[1:3])
    out = np.full((x.shape[0], oh, ow, x.shape[3]), np.nan, np.float32) if out is None else out
    launch = wl.prepare_grouped(x, wl.pack_grouped(weights), bias, clamp, out, window, activation=activation)
    assert launch.kernel.shape.grouped and launch.kernel.shape.step == weights.shape[1]
    launch.run()
    return out


# (N, H, W, groups), kernel, strides, dilations, pads (top, left, bottom, right)
CASES = [
    ((1, 9, 11, 2), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ((2, 13, 17, 3), (3, 3), (2, 2), (1, 1), (1, 0, 2, 1)),      # batch, asymmetric pads
    ((1, 20, 30, 2), (5, 5), (1, 1), (2, 1), (2, 3, 1, 0)),      # row dilation 2
    ((1, 16, 23, 1), (7, 7), (2, 1), (1, 1), (3, 3, 3, 3)),      # 7×7, one group
    ((1, 8, 9, 2), (2, 2), (1, 2), (1, 1), (0, 0, 1, 1)),        # even kernel, column stride 2
    ((1, 7, 12, 3), (3, 5), (1, 1), (1, 1), (1, 2, 1, 2)),       # non-square
    ((1, 1, 19, 2), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),       # H = 1
    ((1, 12, 1, 2), (3, 3), (1, 2), (1, 1), (1, 1, 1, 1)),       # W = 1: every column clipped
    ((1, 5, 6, 2), (3, 3), (1, 1), (1, 1), (2, 2, 2, 2)),        # pads wider than half the window
    ((1, 14, 14, 5), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),      # 7 output columns: one clipped block
    ((1, 30, 30, 13), (3, 3), (1, 1), (1, 1), (0, 0, 0, 0)),     # interior blocks only, split over threads
    ((2, 7, 7, 55), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),       # many groups, split by rows
]
EPILOGUES = [(False, None), (True, (0.0, float("inf"))), (True, (0.0, 6.0)), (False, (-0.5, 0.5))]


def widths(level):
    """Channels per group: one vector of 4 to the level's lanes, or two vectors."""
    return [width for width in (4, 8, 16, 32) if width <= 2 * level.f32_lanes]


@pytest.mark.parametrize("case", CASES, ids=lambda case: "x".join(map(str, case[0])) + f"k{case[1][0]}{case[1][1]}")
def test_grouped(level, case):
    (n, h, w, groups), kernel, strides, dilations, pads = case
    window = wl.Window(kernel, strides, pads, dilations)
    for group in widths(level):
        c = groups * group
        rng = np.random.default_rng(h * w + c)
        x = rng.standard_normal((n, h, w, c), dtype=np.float32)
        weights = rng.standard_normal((c, group, *kernel), dtype=np.float32)
        bias = rng.standard_normal(c, dtype=np.float32)
        taken = wl.grouped_width(weights.shape, groups, window)
        if group > level.f32_lanes and not taken:   # two vectors: where their register blocks fit
            assert kernel[1] > 3 or not level.fused_multiply_add
            continue
        assert taken == group
        for with_bias, clamp in EPILOGUES:
            b = bias if with_bias else None
            sums = np.abs(reference(x, weights, window, b)).max()
            check(run(x, weights, window, b, clamp), reference(x, weights, window, b, clamp), sums)


def test_packing_round_trip_and_layout():
    weights = np.random.default_rng(1).standard_normal((24, 8, 3, 5), dtype=np.float32)
    packed = wl.pack_grouped(weights)
    assert packed.data.shape == (3, 3 * 5 * 8, 8) and packed.group == 8 and packed.channels == 24
    np.testing.assert_array_equal(packed.unpack(), weights)
    # group 1, tap (kh 2, kw 4), input channel 5: its 8 outputs' weights
    np.testing.assert_array_equal(packed.data[1, (2 * 5 + 4) * 8 + 5], weights[8:16, 5, 2, 4])


def widest(level, h: int, w: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """x [1, h, w, C] and 3×3 weights of `groups` groups as wide as the level's vectors."""
    group = level.f32_lanes
    rng = np.random.default_rng(h * w)
    x = rng.standard_normal((1, h, w, groups * group), dtype=np.float32)
    return x, rng.standard_normal((groups * group, group, 3, 3), dtype=np.float32)


def test_activation_before_the_clamp(level):
    window = wl.Window((3, 3), (1, 1), (1, 1, 1, 1))
    x, weights = widest(level, 6, 10, 2)
    y = reference(x, weights, window)
    check(run(x, weights, window, clamp=(-1.0, 2.0), activation="silu"), np.clip(y / (1 + np.exp(-y)), -1.0, 2.0))


def test_output_into_a_slice_of_wider_channels(level):
    window = wl.Window((3, 3), (2, 2), (1, 1, 1, 1))
    x, weights = widest(level, 11, 9, 3)
    c = x.shape[3]
    wide = np.full((1, 6, 5, c + 7), -7.0, np.float32)
    run(x, weights, window, out=wide[..., 4:4 + c])
    check(wide[..., 4:4 + c], reference(x, weights, window))
    assert (wide[..., :4] == -7).all() and (wide[..., 4 + c:] == -7).all()


@pytest.mark.parametrize("weights_shape, groups, window, why", [
    ((24, 8, 3, 3), 2, wl.Window((3, 3)), "fewer outputs than groups × inputs per group"),
    ((24, 3, 3, 3), 8, wl.Window((3, 3)), "3 channels per group"),
    ((64, 64, 3, 3), 1, wl.Window((3, 3)), "wider groups than two vectors"),
    ((48, 24, 3, 3), 2, wl.Window((3, 3)), "24 channels per group"),
    ((16, 8, 3, 3), 2, wl.Window((3, 3), (1, 3)), "column stride 3"),
    ((16, 8, 3, 3), 2, wl.Window((3, 3), dilations=(1, 2)), "column dilation 2"),
    ((16, 8, 3, 9), 2, wl.Window((3, 9)), "kernel width 9"),
])
def test_convolutions_the_grouped_kernel_does_not_take(weights_shape, groups, window, why):
    assert wl.grouped_width(weights_shape, groups, window) == 0, why


def test_mismatched_arguments_are_named():
    x = np.zeros((1, 5, 5, 16), np.float32)
    out = np.zeros((1, 5, 5, 16), np.float32)
    window = wl.Window((3, 3), (1, 1), (1, 1, 1, 1))
    packed = wl.pack_grouped(np.zeros((16, 4, 3, 3), np.float32))
    with pytest.raises(ValueError, match="pack_grouped"):
        wl.prepare_grouped(x, wl.pack_depthwise(np.zeros((16, 1, 3, 3), np.float32)), None, None, out, window)
    with pytest.raises(ValueError, match="x has 8"):
        wl.prepare_grouped(x[..., :8], packed, None, None, out[..., :8], window)
    with pytest.raises(ValueError, match="5×5"):
        wl.prepare_grouped(x, packed, None, None, out, wl.Window((5, 5), (1, 1), (2, 2, 2, 2)))
    with pytest.raises(ValueError, match="bias has 3 values"):
        wl.prepare_grouped(x, packed, np.zeros(3, np.float32), None, out, window)
    with pytest.raises(ValueError, match="column stride|no grouped window kernel"):
        wl.prepare_grouped(x, packed, None, None, np.zeros((1, 5, 2, 16), np.float32), wl.Window((3, 3), (1, 3),
                                                                                               (1, 1, 1, 1)))
    with pytest.raises(ValueError, match="multiple of L"):
        wl.pack_grouped(np.zeros((10, 4, 3, 3), np.float32))
