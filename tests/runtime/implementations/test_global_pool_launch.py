"""GlobalAveragePool and GlobalMaxPool on the generated global pooling kernel, against NumPy (float64 means) at
every ISA level this host can execute: channel counts of whole blocks, 1-3 vectors left and a masked tail, band
lengths not a multiple of the unrolling, images cut into bands on two threads (partials reduced by a second call)
or whole, batches, NaN, outputs in a slice of wider channels."""
import numpy as np
import pytest

from snipjit.runtime.implementations import gemm_launch
from snipjit.runtime.implementations import global_pool_launch as gp
from snipjit.runtime.parallel.native_threads import get_native_pool

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


def pooled(kind: str, x: np.ndarray) -> np.ndarray:
    return x.max(axis=(1, 2), keepdims=True) if kind == "max" else x.astype(np.float64).mean(axis=(1, 2), keepdims=True)


@pytest.mark.parametrize("shape", [(1, 7, 7, 960), (2, 5, 3, 13), (1, 1, 1, 7), (3, 56, 56, 20), (1, 112, 112, 32),
                                   (1, 9, 31, 72), (2, 16, 16, 136)])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_global_pools(level, shape, kind):
    x = np.random.default_rng(shape[3]).standard_normal(shape, dtype=np.float32)
    out = np.full((shape[0], 1, 1, shape[3]), np.nan, np.float32)
    launch = gp.prepare_global_pool(kind, x, out)
    launch.run()
    np.testing.assert_allclose(out, pooled(kind, x), rtol=1e-5, atol=1e-6)
    x[...] = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    launch.run()   # (a prepared launch runs again on the new values)
    np.testing.assert_allclose(out, pooled(kind, x), rtol=1e-5, atol=1e-6)


def test_an_image_is_cut_into_bands_when_the_threads_outnumber_the_images():
    pool = get_native_pool()
    if pool is None or pool.threads < 2:
        pytest.skip("one thread: images are never cut")
    x = np.random.default_rng(0).standard_normal((1, 57, 41, 40), dtype=np.float32)
    out = np.zeros((1, 1, 1, 40), np.float32)
    launch = gp.prepare_global_pool("avg", x, out)
    assert len(launch.native_launches) == 2 and launch.native_launches[0].items == pool.threads
    launch.run()
    np.testing.assert_allclose(out, pooled("avg", x), rtol=1e-5, atol=1e-6)
    many = np.random.default_rng(1).standard_normal((pool.threads, 57, 41, 40), dtype=np.float32)
    out = np.zeros((pool.threads, 1, 1, 40), np.float32)
    assert len(gp.prepare_global_pool("avg", many, out).native_launches) == 1   # (an image per thread)


@pytest.mark.parametrize("shape", [(2, 9, 11, 37), (1, 64, 64, 16)])
def test_a_nan_reaches_the_max(level, shape):
    x = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    n, h, w, c = shape
    for i, (row, col) in enumerate([(0, 0), (h // 2, w // 2), (h - 1, w - 1)]):
        x[i % n, row, col, (5 * i) % c] = np.nan
    out = np.zeros((n, 1, 1, c), np.float32)
    gp.prepare_global_pool("max", x, out).run()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(x).any(axis=(1, 2), keepdims=True))


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_the_output_may_be_a_slice_of_wider_channels(kind):
    x = np.random.default_rng(3).standard_normal((2, 40, 30, 37), dtype=np.float32)
    wide = np.full((2, 1, 1, 45), np.nan, np.float32)
    gp.prepare_global_pool(kind, x, wide[..., 3:40]).run()
    np.testing.assert_allclose(wide[..., 3:40], pooled(kind, x), rtol=1e-5, atol=1e-6)
    assert np.isnan(wide[..., :3]).all() and np.isnan(wide[..., 40:]).all()


def test_bad_arguments_are_named():
    x = np.zeros((1, 4, 4, 8), np.float32)
    with pytest.raises(ValueError, match="kind must be 'max' or 'avg', got 'min'"):
        gp.prepare_global_pool("min", x, np.zeros((1, 1, 1, 8), np.float32))
    with pytest.raises(ValueError, match=r"the global pool of \[1, 4, 4, 8\] is \[1, 1, 1, 8\], not \[1, 1, 1, 4\]"):
        gp.prepare_global_pool("avg", x, np.zeros((1, 1, 1, 4), np.float32))
    with pytest.raises(ValueError, match="x must be a float32 NHWC array"):
        gp.prepare_global_pool("avg", x.astype(np.float64), np.zeros((1, 1, 1, 8), np.float32))
    with pytest.raises(ValueError, match="must be C-contiguous"):
        gp.prepare_global_pool("avg", np.zeros((1, 4, 8, 8), np.float32)[:, :, ::2], np.zeros((1, 1, 1, 8), np.float32))
    assert gp.prepare_global_pool("avg", np.zeros((1, 0, 4, 8), np.float32), np.zeros((1, 1, 1, 8), np.float32)) is None
