"""K blocks and B asked for ahead: a product's K splits into blocks of equal depth (whole taps for a
convolution); a launch whose work items have few row blocks takes the kernel whose K loops ask for the
next slice of packed B, enough lines per iteration to cover it, and computes exactly what the kernel
without it does (products, convolutions with several K blocks and row chunks, at every ISA level)."""
import numpy as np
import pytest

from snipjit.runtime.implementations import conv_launch, gemm_launch
from snipjit.runtime.parallel.native_threads import get_native_pool
from snipjit.targets.llvm.gemm import DIMS
from snipjit.targets.llvm.gemm_builder import LINE_FLOATS

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


@pytest.mark.parametrize("k, unit", [(4608, 512), (4608, 0), (4100, 0), (1024, 0), (9 * 96, 96), (25 * 2048, 2048),
                                     (7, 0), (3000, 7)])
def test_k_blocks_are_of_equal_depth_and_whole_units(k, unit):
    kernel = gemm_launch.choose_kernel(256, k)
    most = max(256, kernel.l2 // 2 // (4 * kernel.nr))
    kc = kernel.k_block(k, unit)
    step = unit or kernel.shape.unroll
    if k <= most:
        assert kc == k
        return
    blocks = -(-k // kc)
    assert kc % step == 0 and (kc <= most or kc == step)
    assert blocks == -(-(-(-k // step)) // max(1, most // step))   # as few blocks as blocks of whole units allow
    assert kc - (k - (blocks - 1) * kc) < blocks * step             # the last one about as deep as the others


def test_work_items_of_few_rows_take_shorter_k_blocks():
    """Items of at most SMALL_ITEM_ROWS rows block K at SMALL_ITEM_DEPTH (whole units), others only past half of L2;
    a launch's items and a convolution's 7x7 map follow it."""
    kernel = gemm_launch.choose_kernel(512, 2048)
    small, large = gemm_launch.SMALL_ITEM_ROWS, gemm_launch.SMALL_ITEM_ROWS + 1
    assert kernel.k_block(2048, 0, large) == kernel.k_block(2048) == 2048
    assert kernel.k_block(2048, 0, small) == gemm_launch.SMALL_ITEM_DEPTH
    assert kernel.k_block(4608, 512, small) == 1024 and kernel.k_block(600, 0, small) == 600
    rng = np.random.default_rng(3)
    launch, _ = packed_launch(*operands(49, 2048, 2 * kernel.nr, rng))
    assert launch.dims[DIMS.index("kc")] == gemm_launch.SMALL_ITEM_DEPTH
    x = np.zeros((1, 7, 7, 512), np.float32)
    weights = conv_launch.pack_conv(np.zeros((512, 512, 3, 3), np.float32), 1)
    conv = conv_launch.prepare_conv(x, weights, np.zeros((1, 7, 7, 512), np.float32),
                                    conv_launch.ConvGeometry((3, 3), pads=(1,) * 4))
    assert conv.dims[DIMS.index("kc")] % 512 == 0 and conv.dims[DIMS.index("kc")] <= gemm_launch.SMALL_ITEM_DEPTH


def operands(m: int, k: int, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    return rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)


def packed_launch(a: np.ndarray, w: np.ndarray):
    out = np.full((a.shape[0], w.shape[1]), np.nan, np.float32)
    return gemm_launch.prepare(a, gemm_launch.pack(w), out), out


def test_items_of_few_row_blocks_ask_for_the_next_slice_ahead():
    rng = np.random.default_rng(0)
    nr = gemm_launch.choose_kernel(512, 512).nr
    few, _ = packed_launch(*operands(49, 512, 4 * nr, rng))
    shape = few.kernel.shape
    blocks = -(-gemm_launch.WorkSplit.of(few.kernel, 1, 49, 4 * nr, 512).chunk_rows // shape.mr)
    assert shape.prefetch and shape.prefetch * LINE_FLOATS * blocks >= shape.unroll * shape.nr
    pool = get_native_pool()
    rows = (gemm_launch.PREFETCH_MAX_BLOCKS + 1) * shape.mr * 4 * (pool.threads if pool else 1)
    many, _ = packed_launch(*operands(rows, 64, nr, rng))
    chunk_rows = gemm_launch.WorkSplit.of(many.kernel, 1, rows, nr, 64).chunk_rows
    assert chunk_rows > gemm_launch.PREFETCH_MAX_BLOCKS * shape.mr and not many.kernel.shape.prefetch
    a, w = operands(49, 64, nr, rng)
    row_major = gemm_launch.prepare(a, w, np.empty((49, nr), np.float32))   # (B not packed: no slices to ask for)
    assert not row_major.kernel.shape.prefetch
    image = rng.standard_normal((1, 3, 20, 20), dtype=np.float32)        # a first layer reads its image planar
    weights = conv_launch.pack_conv(rng.standard_normal((nr, 3, 3, 3), dtype=np.float32), 1)
    first = conv_launch.prepare_conv(image, weights, np.empty((1, 18, 18, nr), np.float32),
                                     conv_launch.ConvGeometry((3, 3)), planar=True)
    assert not first.kernel.shape.prefetch


def run_both(monkeypatch, make):
    """make() -> (launch, out): the output with and without asking for B ahead."""
    outputs = []
    for most in (gemm_launch.PREFETCH_MAX_BLOCKS, 0):
        monkeypatch.setattr(gemm_launch, "PREFETCH_MAX_BLOCKS", most)
        launch, out = make()
        assert bool(launch.kernel.shape.prefetch) == bool(most)
        launch.run()
        outputs.append(out.copy())
    np.testing.assert_array_equal(outputs[0], outputs[1])
    return outputs[0]


@pytest.mark.parametrize("m, k, n", [(49, 700, 150), (13, 3000, 40), (100, 33, 70)])
def test_products_asking_ahead_compute_the_same(level, monkeypatch, m, k, n):
    a, w = operands(m, k, n, np.random.default_rng(m))

    def make():
        launch, out = packed_launch(a, w)
        launch.dims[DIMS.index("kc")] = min(k, 256)   # (several K blocks where K allows)
        return launch, out

    out = run_both(monkeypatch, make)
    np.testing.assert_allclose(out, a.astype(np.float64) @ w, rtol=0, atol=2e-5 * k ** 0.5 * np.abs(a @ w).max())


@pytest.mark.parametrize("case", [
    dict(c=96, h=14, w=14, o=80, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), taps_per_k_block=2),
    dict(c=40, h=9, w=9, o=33, kernel=(1, 1), strides=(2, 2), pads=(0, 0, 0, 0), taps_per_k_block=None),
    dict(c=24, h=7, w=7, o=70, kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), taps_per_k_block=1),   # row taps
])
def test_convolutions_asking_ahead_compute_the_same(level, monkeypatch, case):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, case["h"], case["w"], case["c"]), dtype=np.float32)
    weights = rng.standard_normal((case["o"], case["c"], *case["kernel"]), dtype=np.float32)
    bias = rng.standard_normal(case["o"], dtype=np.float32)
    geometry = conv_launch.ConvGeometry(case["kernel"], case["strides"], case["pads"])
    packed = conv_launch.pack_conv(weights, 1)

    def make():
        out = np.full((2, *geometry.output_size(case["h"], case["w"]), case["o"]), np.nan, np.float32)
        launch = conv_launch.prepare_conv(x, packed, out, geometry, bias, (0.0, np.inf))
        if case["taps_per_k_block"]:
            launch.dims[DIMS.index("kc")] = case["taps_per_k_block"] * case["c"]
        return launch, out

    out = run_both(monkeypatch, make)
    from snipjit.ops.common import evaluate
    top, left, bottom, right = case["pads"]
    want = evaluate("Conv", [x.transpose(0, 3, 1, 2).astype(np.float64), weights.astype(np.float64),
                             bias.astype(np.float64)],
                    {"strides": list(case["strides"]), "pads": [top, left, bottom, right]})[0].transpose(0, 2, 3, 1)
    np.testing.assert_allclose(out, np.maximum(want, 0), rtol=0, atol=1e-4 * np.abs(want).max())
