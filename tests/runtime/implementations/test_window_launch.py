"""NHWC depthwise convolution and pools on the generated window kernel, against a float64 NumPy reference
(itself checked against the ONNX reference kernels), at every ISA level this host can execute: channel
tails and C below the vector width, 1×1 to 7×7 kernels, strides, dilations, asymmetric pads, H or W of
1, batches, bias and clamps, count_include_pad both ways, outputs written into a slice of
wider channels, prepared repeated launches and work split over the native pool."""
import numpy as np
import pytest

from snipjit.ops.common import evaluate
from snipjit.runtime.implementations import window_launch as wl
from snipjit.runtime.implementations.gemm_launch import available

pytestmark = pytest.mark.skipif(not available(), reason="no LLVM JIT")


def reference(x, kind, window, weights=None, bias=None, clamp=None, include_pad=False):
    """kind: "madd" (depthwise, weights [C, 1, KH, KW]), "max" or "avg"; float64."""
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (dh, dw) = window.kernel, window.strides, window.dilations
    top, left, bottom, right = window.pads
    oh, ow = window.output_size(h, w)
    padded = np.full((n, h + top + bottom, w + left + right, c), np.nan)
    padded[:, top:top + h, left:left + w] = x
    total = np.zeros((n, oh, ow, c))
    count = np.zeros((n, oh, ow, 1))
    peak = np.full((n, oh, ow, c), -np.inf)
    for i in range(kh):
        for j in range(kw):
            tap = padded[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            inside = ~np.isnan(tap)
            values = np.where(inside, tap, 0.0)
            total += values * (weights[:, 0, i, j] if kind == "madd" else 1.0)
            count += inside[..., :1]
            peak = np.maximum(peak, np.where(inside, tap, -np.inf))
    if kind == "max":
        return peak
    if kind == "avg":
        return total / (kh * kw if include_pad else count)
    y = total + (0 if bias is None else bias)
    return y if clamp is None else np.clip(y, *clamp)


def nhwc(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def check(out, ref):
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(ref).max()))


# (N, H, W, C), kernel, strides, dilations, pads (top, left, bottom, right)
CASES = [
    ((1, 9, 11, 5), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),       # C below the vector width
    ((2, 13, 17, 37), (3, 3), (2, 2), (1, 1), (1, 0, 2, 1)),     # batch, tail, asymmetric pads
    ((1, 20, 30, 64), (5, 5), (1, 1), (2, 2), (2, 3, 1, 0)),     # dilation 2
    ((1, 4, 6, 3), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),        # 1×1
    ((1, 16, 23, 33), (7, 7), (2, 1), (1, 1), (3, 3, 3, 3)),     # 7×7, mixed strides
    ((1, 1, 19, 24), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),      # H = 1
    ((1, 12, 1, 20), (3, 3), (1, 2), (1, 1), (1, 1, 1, 1)),      # W = 1
    ((1, 40, 40, 48), (3, 3), (2, 2), (1, 1), (0, 0, 1, 1)),     # TF "SAME" stride 2
    ((1, 5, 6, 9), (3, 3), (1, 1), (1, 2), (2, 2, 2, 2)),        # pads wider than half the window
    ((2, 7, 7, 200), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),      # split by rows over threads
    ((1, 1, 40, 200), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),     # one row: split by channels over threads
]
EPILOGUES = [(False, None), (True, (0.0, float("inf"))), (True, (0.0, 6.0)), (False, (-0.5, 0.5))]


@pytest.mark.parametrize("case", CASES, ids=lambda case: "x".join(map(str, case[0])) + f"k{case[1][0]}{case[1][1]}")
def test_depthwise(level, case):
    shape, kernel, strides, dilations, pads = case
    window = wl.Window(kernel, strides, pads, dilations)
    rng = np.random.default_rng(sum(shape))
    x, weights, bias = nhwc(rng, *shape), nhwc(rng, shape[3], 1, *kernel), nhwc(rng, shape[3])
    packed = wl.pack_depthwise(weights)
    assert packed.lanes == level.f32_lanes and packed.data.shape[0] * packed.lanes >= shape[3]
    np.testing.assert_array_equal(packed.unpack(), weights)
    for with_bias, clamp in EPILOGUES:
        b = bias if with_bias else None
        ref = reference(x, "madd", window, weights, b, clamp)
        out = np.full(ref.shape, np.nan, np.float32)
        wl.prepare_depthwise(x, packed, b, clamp, out, window).run()
        check(out, ref)


@pytest.mark.parametrize("activation, fn", [("silu", lambda y: y / (1 + np.exp(-y))),
                                            ("hard_swish", lambda y: y * np.clip(y / 6 + 0.5, 0, 1))])
def test_depthwise_activation_before_the_clamp(level, activation, fn):
    rng = np.random.default_rng(5)
    window = wl.Window((3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    x, weights, bias = nhwc(rng, 2, 9, 11, 37), nhwc(rng, 37, 1, 3, 3), nhwc(rng, 37)
    packed = wl.pack_depthwise(weights)
    for clamp in (None, (-0.1, 1.5)):
        ref = fn(reference(x, "madd", window, weights, bias))
        ref = ref if clamp is None else np.clip(ref, *clamp)
        out = np.full(ref.shape, np.nan, np.float32)
        wl.prepare_depthwise(x, packed, bias, clamp, out, window, activation=activation).run()
        check(out, ref)


# (N, H, W, C), kernel, pads: stride and dilation 1, the kernel widths with a variant reusing inputs
REUSE_CASES = [
    ((2, 9, 30, 37), (3, 3), (1, 1, 1, 1)),     # batch, odd C: whole blocks, half blocks, the tail
    ((1, 6, 7, 19), (3, 3), (1, 1, 1, 1)),      # 5 interior columns: half a block and single pixels
    ((1, 5, 4, 5), (3, 3), (1, 1, 1, 1)),       # narrower than a block, C below the vector width
    ((1, 1, 26, 33), (3, 3), (1, 1, 1, 1)),     # H = 1
    ((2, 11, 29, 45), (5, 5), (2, 2, 2, 2)),
    ((1, 7, 9, 3), (5, 5), (0, 2, 1, 0)),       # asymmetric pads
    ((1, 1, 21, 64), (3, 5), (1, 2, 1, 2)),     # H = 1, KH != KW
    ((1, 12, 40, 160), (5, 3), (2, 1, 2, 1)),
    ((1, 14, 14, 40), (7, 7), (3, 3, 3, 3)),    # 7×7: edge blocks, an overlapping last block
    ((2, 7, 7, 19), (7, 7), (3, 3, 3, 3)),      # 7×7 on a 7×7 image: every block clipped, the tail per pixel
    ((1, 9, 23, 50), (7, 5), (3, 2, 3, 2)),
    ((1, 6, 3, 17), (5, 5), (2, 2, 2, 2)),      # narrower than half a block
    ((1, 5, 37, 9), (2, 2), (1, 0, 0, 1)),      # even width, one-sided pads
    ((1, 4, 67, 21), (3, 3), (0, 0, 0, 0)),     # no pads: the whole row one run of blocks, then the overlapping one
    ((1, 9, 45, 24), (7, 7), (3, 3, 3, 3)),     # 7×7 on a wide map: runs of the widest blocks (16 on AVX-512)
    ((1, 6, 70, 33), (5, 5), (0, 0, 0, 0)),     # 5×5, no pads: whole widest blocks, then the overlapping one
]
STRIDED_REUSE_CASES = [   # column stride 2, or a row stride or dilation other than 1
    ((1, 11, 20, 24), (3, 3), (1, 1), (2, 1), (2, 1, 2, 1)),      # row dilation 2: one output row at a time
    ((1, 10, 19, 13), (5, 3), (2, 1), (1, 1), (2, 1, 2, 1)),      # row stride 2, KH != KW
    ((1, 28, 28, 48), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),      # EfficientNet's 5×5 stride 2
    ((2, 13, 29, 37), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),      # batch, odd width, tail
    ((1, 9, 40, 24), (3, 3), (1, 2), (2, 1), (0, 0, 1, 1)),       # TF "SAME", row dilation 2
    ((1, 7, 7, 96), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),
    ((1, 3, 6, 5), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),         # C below the vector width
    ((1, 5, 71, 35), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),       # a long run of blocks, the tail per block
]


@pytest.mark.parametrize("case", REUSE_CASES,
                         ids=lambda case: "x".join(map(str, case[0])) + f"k{case[1][0]}{case[1][1]}")
def test_depthwise_reusing_inputs_across_pixels(level, case):
    shape, kernel, pads = case
    check_reuse(shape, wl.Window(kernel, (1, 1), pads))


@pytest.mark.parametrize("case", STRIDED_REUSE_CASES, ids=lambda case: "x".join(map(str, case[0])) +
                         f"k{case[1][0]}{case[1][1]}s{case[2][0]}{case[2][1]}")
def test_depthwise_reusing_inputs_at_column_stride_2(level, case):
    shape, kernel, strides, dilations, pads = case
    check_reuse(shape, wl.Window(kernel, strides, pads, dilations))


def check_reuse(shape, window):
    kernel = window.kernel
    rng = np.random.default_rng(sum(shape) + kernel[1])
    x, weights, bias = nhwc(rng, *shape), nhwc(rng, shape[3], 1, *kernel), nhwc(rng, shape[3])
    packed = wl.pack_depthwise(weights)
    silu = ("silu", lambda y: y / (1 + np.exp(-y)))
    for (with_bias, clamp), (activation, fn) in [(e, a) for e in EPILOGUES for a in (("", None), silu)]:
        b = bias if with_bias else None
        ref = reference(x, "madd", window, weights, b)
        ref = ref if fn is None else fn(ref)
        ref = ref if clamp is None else np.clip(ref, *clamp)
        out = np.full(ref.shape, np.nan, np.float32)
        launch = wl.prepare_depthwise(x, packed, b, clamp, out, window, activation=activation)
        assert (launch.kernel.shape.kw, launch.kernel.shape.sw) == (kernel[1], window.strides[1])
        rows = shape[0] * out.shape[1]
        paired = wl.pairs(kernel[1], window.strides[0], rows, launch.threads) and window.dilations[0] == 1
        assert launch.kernel.shape.rows == (2 if paired else 1)
        launch.run()
        check(out, ref)


# two output rows at once: odd and even heights, rows whose kernel rows leave the input (top, bottom, H = 2)
PAIRED_CASES = [((1, 2, 9, 16), (1, 1, 1, 1)), ((2, 4, 10, 21), (0, 1, 0, 1)), ((1, 11, 16, 40), (1, 1, 1, 1)),
                ((1, 7, 7, 33), (2, 1, 0, 1)), ((1, 3, 5, 7), (0, 0, 0, 0))]


@pytest.mark.parametrize("case", PAIRED_CASES, ids=lambda case: "x".join(map(str, case[0])))
def test_depthwise_computing_two_rows_at_once(level, monkeypatch, case):
    monkeypatch.setattr(wl, "MIN_PAIRS_PER_THREAD", 0)   # (these few rows would run one at a time)
    shape, pads = case
    check_reuse(shape, wl.Window((3, 3), (1, 1), pads))


def test_rows_are_paired_at_row_stride_1_only_where_each_thread_has_enough_pairs(level):
    if not wl.pairs(3, 1):
        pytest.skip(f"no paired 3x3 kernel at {level}")
    assert wl.pairs(3, 1, 28, 2) and wl.pairs(3, 1, 14, 1) and wl.pairs(3, 1, None, 16)
    assert wl.pairs(3, 1, 7, 1) and not wl.pairs(3, 1, 6, 1)
    assert not wl.pairs(3, 1, 14, 2) and not wl.pairs(3, 1, 7, 2)
    assert wl.pairs(5, 2, 7, 2) == wl.pairs(5, 2)   # at row stride 2: by the registers alone


# at row stride 2 (3×3, and 5×5 where the level's registers hold two rows' blocks): odd and even output heights,
# kernel rows leaving the input at the top or bottom, a channel tail, a batch
STRIDE_2_PAIRED_CASES = [((3, 3), (1, 9, 9, 16), (1, 1, 1, 1)), ((3, 3), (2, 12, 11, 21), (0, 1, 1, 0)),
                         ((3, 3), (1, 4, 6, 40), (0, 0, 0, 0)), ((5, 5), (1, 14, 14, 33), (2, 2, 2, 2)),
                         ((5, 5), (2, 11, 13, 16), (1, 2, 2, 1)), ((5, 5), (1, 9, 8, 7), (0, 0, 0, 0)),
                         ((5, 3), (1, 13, 10, 24), (2, 1, 2, 1))]


@pytest.mark.parametrize("case", STRIDE_2_PAIRED_CASES, ids=lambda case: "x".join(map(str, case[0] + case[1])))
def test_depthwise_computing_two_rows_at_once_at_row_stride_2(level, case):
    kernel, shape, pads = case
    check_reuse(shape, wl.Window(kernel, (2, 2), pads))


@pytest.mark.parametrize("strides, dilations, paired_at", [((2, 1), (1, 1), 1), ((1, 1), (2, 1), 1),
                                                         ((2, 2), (1, 1), 1), ((1, 1), (1, 1), 2),
                                                         ((2, 2), (2, 1), 2), ((3, 1), (1, 1), 2)])
def test_a_kernel_for_two_rows_computes_them_apart_at_other_row_strides(level, monkeypatch, strides, dilations,
                                                                        paired_at):
    """The launch pairs rows only at the row stride the kernel was made for (`paired_at`) and dilation 1; the
    kernel checks it too (at other ones, a work item's two rows are computed one at a time)."""
    chosen = wl.kernel_for
    monkeypatch.setattr(wl, "kernel_for", lambda combine, activation="", kw=0, sw=1, rows=1, group=0, kh=0, sh=1:
                        chosen(combine, activation, kw, sw, 2 if kw else rows, group, kh, paired_at))
    window = wl.Window((3, 3), strides, (1, 1, 1, 1), dilations)
    rng = np.random.default_rng(3)
    x, weights, bias = nhwc(rng, 1, 11, 13, 24), nhwc(rng, 24, 1, 3, 3), nhwc(rng, 24)
    out = np.full((1, *window.output_size(11, 13), 24), np.nan, np.float32)
    launch = wl.prepare_depthwise(x, wl.pack_depthwise(weights), bias, (0.0, 6.0), out, window)
    assert launch.kernel.shape.rows == 2 and launch.items == -(-out.shape[1] // 2)
    launch.run()
    check(out, reference(x, "madd", window, weights, bias, (0.0, 6.0)))


@pytest.mark.parametrize("window", [wl.Window((3, 3), (1, 3), (1, 1, 1, 1)),
                                    wl.Window((3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
                                    wl.Window((9, 9), (1, 1), (4, 4, 4, 4)), wl.Window((1, 1), (1, 1))])
def test_other_depthwise_windows_keep_the_kernel_without_reuse(window):
    x = np.zeros((1, 9, 9, 8), np.float32)
    out = np.zeros((1, *window.output_size(9, 9), 8), np.float32)
    launch = wl.prepare_depthwise(x, wl.pack_depthwise(np.zeros((8, 1, *window.kernel), np.float32)), None, None,
                                  out, window)
    assert launch.kernel.shape.kw == 0


@pytest.mark.parametrize("kernel", [(9, 5), (64, 5)])
def test_a_max_pool_taller_than_the_reused_widths_keeps_the_tap_loop(kernel):
    # (the reuse path unrolls the kernel rows: a max pool of a 64×5 window took 30 s to compile there)
    x = np.random.default_rng(1).standard_normal((2, kernel[0] + 2, 9, 11), dtype=np.float32)
    window = wl.Window(kernel)
    out = np.zeros((2, *window.output_size(*x.shape[1:3]), 11), np.float32)
    launch = wl.prepare_pool("max", x, out, window)
    assert launch.kernel.shape.kw == 0
    launch.run()
    check(out, reference(x, "max", window))


@pytest.mark.parametrize("shape", [(1, 7, 7, 64), (2, 3, 5, 20)])
def test_a_pool_of_one_output_pixel_keeps_the_tap_loop(shape):
    # one output pixel per image: nothing to reuse across pixels, and the reuse variant costs seconds to compile
    x = np.random.default_rng(2).standard_normal(shape, dtype=np.float32)
    out = np.zeros((shape[0], 1, 1, shape[3]), np.float32)
    launch = wl.prepare_pool("max", x, out, wl.Window((shape[1] + 1, shape[2] + 1), pads=(1, 0, 0, 1)))
    assert launch.kernel.shape.kw == 0
    launch.run()
    np.testing.assert_array_equal(out, x.max(axis=(1, 2), keepdims=True))


@pytest.mark.parametrize("case", CASES, ids=lambda case: "x".join(map(str, case[0])) + f"k{case[1][0]}{case[1][1]}")
def test_pools(level, case):
    shape, kernel, strides, dilations, pads = case
    window = wl.Window(kernel, strides, pads, dilations)
    x = nhwc(np.random.default_rng(sum(shape) + 1), *shape)
    for kind, include_pad in (("max", False), ("avg", False), ("avg", True)):
        ref = reference(x, kind, window, include_pad=include_pad)
        out = np.full(ref.shape, np.nan, np.float32)
        wl.prepare_pool(kind, x, out, window, count_include_pad=include_pad).run()
        check(out, ref)


@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[9]], ids=lambda case: "x".join(map(str, case[0])))
def test_a_nan_in_a_window_reaches_its_max(level, case):
    # NaN at the window's first tap, a middle one and the last, in a lane of the vector block and in the tail;
    # an order of x86's max that keeps the accumulator drops a NaN met later, the other one met earlier
    shape, kernel, strides, dilations, pads = case
    window = wl.Window(kernel, strides, pads, dilations)
    x = nhwc(np.random.default_rng(7), *shape)
    n, h, w, c = shape
    for i, (row, col) in enumerate([(0, 0), (h // 2, w // 2), (h - 1, w - 1), (1, w - 2)]):
        x[i % n, row, col, (5 * i) % c] = np.nan
    ref = np.full(window.output_size(h, w), 0.0)   # (shape only)
    want = np.empty((n, *ref.shape, c), np.float32)
    for image in range(n):   # NaN where a window holds one, else the max of the others
        nan = np.isnan(x[image:image + 1])
        peak = reference(np.where(nan, -np.inf, x[image:image + 1]), "max", window)
        hit = reference(nan.astype(np.float32), "max", window) > 0
        want[image] = np.where(hit, np.nan, peak)[0]
    assert np.isnan(want).sum() >= 4
    out = np.zeros(want.shape, np.float32)
    wl.prepare_pool("max", x, out, window).run()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    check(np.nan_to_num(out), np.nan_to_num(want))


# (N, H, W, C), kernel, strides, pads: the 3×3 and 5×5 kernels reusing inputs (two rows at once for 3×3 at
# stride 1), the tap kernel (1×1 stride 2), a channel tail
SLICE_CASES = [((2, 9, 11, 37), (3, 3), (1, 1), (1, 1, 1, 1)), ((1, 12, 13, 24), (5, 5), (2, 2), (2, 2, 2, 1)),
               ((1, 6, 7, 20), (1, 1), (2, 2), (0, 0, 0, 0))]


@pytest.mark.parametrize("case", SLICE_CASES, ids=lambda case: "x".join(map(str, case[0])) + f"k{case[1][0]}")
def test_outputs_written_into_a_slice_of_wider_channels(level, case):
    """Each kernel writes a slice of the channels of a wider tensor (a Concat's output), its pixels `OC`
    elements apart, and leaves the channels around the slice untouched."""
    shape, kernel, strides, pads = case
    window = wl.Window(kernel, strides, pads)
    rng = np.random.default_rng(sum(shape))
    x, weights, bias = nhwc(rng, *shape), nhwc(rng, shape[3], 1, *kernel), nhwc(rng, shape[3])
    oh, ow = window.output_size(*shape[1:3])
    c = shape[3]
    for kind in ("madd", "max", "avg"):
        wide = np.full((shape[0], oh, ow, c + 11), np.nan, np.float32)
        out = wide[..., 5:5 + c]
        if kind == "madd":
            launch = wl.prepare_depthwise(x, wl.pack_depthwise(weights), bias, (0.0, 6.0), out, window)
            ref = reference(x, kind, window, weights, bias, (0.0, 6.0))
        else:
            launch = wl.prepare_pool(kind, x, out, window)
            ref = reference(x, kind, window)
        launch.run()
        check(out, ref)
        assert np.isnan(wide[..., :5]).all() and np.isnan(wide[..., 5 + c:]).all()


def test_the_numpy_reference_agrees_with_the_onnx_reference_kernels():
    rng = np.random.default_rng(5)
    x, weights, bias = nhwc(rng, 2, 9, 10, 6), nhwc(rng, 6, 1, 3, 3), nhwc(rng, 6)
    window = wl.Window((3, 3), (2, 1), (1, 0, 2, 1), (1, 1))
    attrs = dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 0, 2, 1])
    nchw = x.transpose(0, 3, 1, 2)
    conv = evaluate("Conv", [nchw, weights, bias], dict(group=6, **attrs))[0]
    check(reference(x, "madd", window, weights, bias), conv.transpose(0, 2, 3, 1))
    for include_pad in (0, 1):
        avg = evaluate("AveragePool", [nchw], dict(count_include_pad=include_pad, **attrs))[0]
        check(reference(x, "avg", window, include_pad=bool(include_pad)), avg.transpose(0, 2, 3, 1))
    peak = evaluate("MaxPool", [nchw], attrs)[0]
    check(reference(x, "max", window), peak.transpose(0, 2, 3, 1))


def test_a_prepared_launch_runs_again_on_new_data(level):
    rng = np.random.default_rng(9)
    window = wl.Window((3, 3), (1, 1), (1, 1, 1, 1))
    x, weights = nhwc(rng, 1, 28, 28, 96), nhwc(rng, 96, 1, 3, 3)
    out = np.empty_like(x)
    launch = wl.prepare_depthwise(x, wl.pack_depthwise(weights), None, (0.0, 6.0), out, window, repeats=True)
    assert launch.threads >= 1 and launch.items >= launch.threads
    for _ in range(3):
        x[...] = nhwc(rng, *x.shape)
        launch.run()
        check(out, reference(x, "madd", window, weights, clamp=(0.0, 6.0)))
    pooled = np.empty((1, 14, 14, 96), np.float32)
    pool = wl.prepare_pool("max", x, pooled, wl.Window((2, 2), (2, 2)), repeats=True)
    pool.run()
    check(pooled, reference(x, "max", wl.Window((2, 2), (2, 2))))


def test_large_jobs_split_over_threads_and_small_ones_do_not():
    from snipjit.runtime.parallel.native_threads import get_native_pool
    pool = get_native_pool()
    rng = np.random.default_rng(2)
    window = wl.Window((3, 3), (1, 1), (1, 1, 1, 1))
    big, wide, small = nhwc(rng, 1, 7, 7, 960), nhwc(rng, 1, 1, 40, 960), nhwc(rng, 1, 4, 4, 8)
    packed = wl.pack_depthwise(nhwc(rng, 960, 1, 3, 3))
    launch = wl.prepare_depthwise(big, packed, None, None, np.empty_like(big), window)
    row = wl.prepare_depthwise(wide, packed, None, None, np.empty_like(wide), window)
    tiny = wl.prepare_pool("avg", small, np.empty_like(small), window)
    assert tiny.threads == 1
    if pool is not None:   # by rows (too few to pair), in chunks of channels where they split unevenly
        block = launch.kernel.shape.vectors * launch.kernel.shape.lanes
        items = 7 * wl.channel_chunks(960, block, 7, pool.threads)
        assert launch.threads == pool.threads and launch.kernel.shape.rows == 1 and launch.items == items
        assert launch.grain == -(-items // pool.threads)
        assert row.threads == pool.threads and row.items == min(pool.threads, 960 // 32)


def test_rows_uneven_over_the_threads_are_cut_into_chunks_of_channels():
    """7 rows over 2 threads: in two chunks each (14 items), each thread computes 3½ rows' worth; 8 rows, or 27
    (14 and 13, within 5%), stay whole; chunks are whole blocks of channels."""
    assert wl.channel_chunks(576, 8, 7, 2) == 2
    assert wl.channel_chunks(576, 8, 8, 2) == 1 and wl.channel_chunks(576, 8, 27, 2) == 1
    assert wl.channel_chunks(576, 8, 7, 1) == 1
    assert wl.channel_chunks(16, 16, 7, 2) == 1       # one block: nothing to cut
    assert wl.channel_chunks(960, 32, 1, 2) == 2      # a single row: split by channels


def test_a_row_split_by_channels_between_threads_computes_every_channel():
    from snipjit.runtime.parallel.native_threads import get_native_pool
    pool = get_native_pool()
    rng = np.random.default_rng(4)
    window = wl.Window((3, 3), (1, 1), (1, 1, 1, 1))
    x, weights = nhwc(rng, 1, 7, 14, 200), nhwc(rng, 200, 1, 3, 3)   # 7 rows; 200: a channel tail
    out = np.full_like(x, np.nan)
    launch = wl.prepare_depthwise(x, wl.pack_depthwise(weights), None, None, out, window)
    if pool is not None and pool.threads == 2:
        assert launch.items == 14
    launch.run()
    check(out, reference(x, "madd", window, weights))


def test_mismatched_arguments_are_named():
    x = np.zeros((1, 8, 8, 4), np.float32)
    window = wl.Window((3, 3), (1, 1), (1, 1, 1, 1))
    packed = wl.pack_depthwise(np.zeros((4, 1, 3, 3), np.float32))
    with pytest.raises(ValueError, match=r"out is \[1, 7, 8, 4\].*gives \[1, 8, 8, 4\]"):
        wl.prepare_pool("max", x, np.zeros((1, 7, 8, 4), np.float32), window)
    with pytest.raises(ValueError, match="x must be a C-contiguous float32"):
        wl.prepare_pool("avg", x.transpose(0, 2, 1, 3), np.zeros_like(x), window)
    with pytest.raises(ValueError, match=r"out must be .* or its channels' slice, got float32 \[1, 8, 8, 4\] \(not"):
        wl.prepare_pool("avg", x, np.zeros((1, 8, 8, 8), np.float32)[..., ::2], window)
    with pytest.raises(ValueError, match="packed weights are 3×3, the window's kernel 5×5"):
        wl.prepare_depthwise(x, packed, None, None, np.zeros((1, 6, 6, 4), np.float32),
                             wl.Window((5, 5), (1, 1), (1, 1, 1, 1)))
    with pytest.raises(ValueError, match="weights have 4 channels, x has 5"):
        wl.prepare_depthwise(np.zeros((1, 8, 8, 5), np.float32), packed, None, None,
                             np.zeros((1, 8, 8, 5), np.float32), window)
    with pytest.raises(ValueError, match="kind"):
        wl.prepare_pool("min", x, np.zeros((1, 1, 1, 4), np.float32), wl.Window((9, 10)))
    with pytest.raises(ValueError, match="does not fit"):
        wl.prepare_pool("max", np.zeros((1, 2, 2, 4), np.float32), np.zeros((1, 1, 1, 4), np.float32),
                        wl.Window((5, 5)))



@pytest.mark.parametrize("pads", [(1, 3, 1, 0), (0, 0, 2, 4), (2, 5, 2, 5)])
def test_pads_as_wide_as_the_window_take_the_tap_loop(level, pads):
    """A kernel reusing inputs checks only its edge blocks' first and last KW - 1 columns against the input:
    with a left or right pad of KW or more, the window runs on the tap loop (and agrees with the reference)."""
    window = wl.Window((3, 3), (1, 1), pads)
    assert not wl._reuses(window) and wl._reuses(wl.Window((3, 3), (1, 1), (pads[0], 2, pads[2], 2)))
    rng = np.random.default_rng(1)
    x, weights, bias = nhwc(rng, 1, 6, 7, 19), nhwc(rng, 19, 1, 3, 3), nhwc(rng, 19)
    out = np.full((1, *window.output_size(6, 7), 19), np.nan, np.float32)
    launch = wl.prepare_depthwise(x, wl.pack_depthwise(weights), bias, None, out, window)
    assert launch.kernel.shape.kw == 0   # (the tap loop's kernel)
    launch.run()
    check(out, reference(x, "madd", window, weights, bias))
