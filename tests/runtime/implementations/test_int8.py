"""The int8 GEMM (dynamically quantized products) against the exact reference at every ISA level this host
can execute (VNNI and pmaddwd): odd M/K/N, a single row or column, rows with a stride, batches, extreme
and NaN activations, and an empty quantization range."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from snipjit.runtime.implementations import gemm_launch, int8

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


def parameters(x):
    lo, hi = min(float(np.nanmin(x)), 0.0), max(float(np.nanmax(x)), 0.0)
    scale = np.float32((hi - lo) / 255) if hi > lo else np.float32(1)
    return scale, np.float32(np.round(np.clip(-lo / scale, 0, 255)))


def expected(x, w, scale, zero):
    with np.errstate(invalid="ignore"):
        q = np.clip(np.nan_to_num(np.round(x / scale) + zero, nan=0.0), 0, 255) - zero
    return (q.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)


def check(x, w):
    scale, zero = parameters(x)
    out = np.full(x.shape[:-1] + (w.shape[1],), np.nan, np.float32)
    launch = int8.prepare(x, int8.pack(w), out)
    assert launch is not None
    launch.run(scale, zero)
    np.testing.assert_array_equal(out, expected(x, w, scale, zero))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 90), seed=st.integers(0, 2**16))
def test_odd_shapes(level, m, k, n, seed):
    rng = np.random.default_rng(seed)
    check(rng.standard_normal((m, k), dtype=np.float32) * 4, rng.integers(-128, 128, (k, n)).astype(np.int8))


def test_the_kernel_of_the_level(level):
    shape = int8.pack(np.zeros((8, 8), np.int8)).shape
    assert shape.lanes == level.f32_lanes
    assert shape.dot in ("vnni", "pairs") and (shape.dot == "pairs" or level.name == "avx512")


@pytest.mark.parametrize("m, k, n", [(128, 384, 1536), (97, 1536, 384), (3, 3072, 19)])
def test_transformer_sizes_and_long_sums(level, m, k, n):
    rng = np.random.default_rng(m)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w[:, 0] = -128   # (the largest products: 255 · -128 over K)
    x = rng.standard_normal((m, k), dtype=np.float32)
    x[0] = np.abs(x[0]) + 50
    check(x, w)


def test_strided_rows_batches_nan_and_an_empty_range(level):
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (40, 33)).astype(np.int8)
    wide = rng.standard_normal((30, 64), dtype=np.float32)
    check(wide[:, 5:45], w)   # rows 64 apart
    check(rng.standard_normal((2, 3, 7, 40), dtype=np.float32), w)
    x = rng.standard_normal((9, 40), dtype=np.float32)
    x[2, 3] = np.nan
    scale, zero = parameters(x)
    out = np.empty((9, 33), np.float32)
    int8.prepare(x, int8.pack(w), out).run(scale, zero)
    np.testing.assert_array_equal(out, expected(x, w, scale, zero))   # a NaN quantizes to 0
    check(np.zeros((5, 40), np.float32), w)


def test_layouts_not_taken():
    w = int8.pack(np.ones((16, 8), np.int8))
    x = np.ones((4, 32), np.float32)[:, ::2]
    assert int8.prepare(x, w, np.empty((4, 8), np.float32)) is None                      # strided K
    assert int8.prepare(np.ones((4, 16)), w, np.empty((4, 8), np.float32)) is None       # float64
    assert int8.prepare(np.ones((4, 16), np.float32), w, np.empty((4, 8), np.float32)[:, :4]) is None
