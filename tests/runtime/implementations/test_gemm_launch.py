"""The generated GEMM kernel against NumPy (float64): tails in M, N and K, batches, bias, packed B."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from snipjit.runtime.implementations import gemm_launch

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


def check(a, b, bias=None, packed=False, rtol=1e-5):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64)) + (0 if bias is None else bias)
    out = np.full(ref.shape, np.nan, np.float32)
    assert gemm_launch.matmul(a, gemm_launch.pack(b) if packed else b, out, bias)
    scale = np.abs(ref).max() if ref.size else 1.0
    np.testing.assert_allclose(out, ref, rtol=0, atol=rtol * max(scale, 1.0) * max(a.shape[-1], 1) ** 0.5)


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(gemm_launch.MIN_ROWS, 70), k=st.integers(1, 70), n=st.integers(1, 150), bias=st.booleans(),
       packed=st.booleans(), seed=st.integers(0, 2**16))
def test_matrix_products_of_odd_shapes(m, k, n, bias, packed, seed):
    rng = np.random.default_rng(seed)
    check(randn(rng, m, k), randn(rng, k, n), randn(rng, n) if bias else None, packed)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 17, 33), (33, 70)),        # batch folded into the rows of A
    ((4, 6, 20), (4, 20, 3)),          # equal batches
    ((5, 7), (3, 7, 9)),               # A shared by a batch of B
    ((12, 128, 32), (12, 32, 128)),    # attention-like, parallel over batch and panels
    ((300, 64), (64, 49)),             # one panel: parallel over row chunks
])
def test_batched_products(a_shape, b_shape):
    rng = np.random.default_rng(1)
    check(randn(rng, *a_shape), randn(rng, *b_shape))


def test_large_product_split_over_threads_matches():
    rng = np.random.default_rng(2)
    check(randn(rng, 257, 384), randn(rng, 384, 1000), randn(rng, 1000), packed=True)


def test_strided_operands_inside_rows_are_taken():
    rng = np.random.default_rng(3)
    a = randn(rng, 40, 100)[:, 10:60]          # rows with a stride wider than K
    b = randn(rng, 50, 90)[:, 5:75]            # rows with a stride wider than N
    check(a, b)


def test_layouts_the_kernel_does_not_read_are_refused():
    rng = np.random.default_rng(4)
    out = np.empty((10, 30), np.float32)
    assert not gemm_launch.matmul(randn(rng, 10, 20), randn(rng, 30, 20).T, out)        # B column-strided
    assert not gemm_launch.matmul(randn(rng, 20, 10).T, randn(rng, 20, 30), out)        # A column-strided
    assert not gemm_launch.matmul(randn(rng, 10, 20).astype(np.float64), randn(rng, 20, 30), out)
    assert not gemm_launch.matmul(randn(rng, 10, 20), gemm_launch.pack(randn(rng, 21, 30)), out)   # K differs


def test_products_of_fewer_rows_than_a_register_block_needs_are_refused():
    rng = np.random.default_rng(6)
    assert not gemm_launch.matmul(randn(rng, gemm_launch.MIN_ROWS - 1, 8), randn(rng, 8, 40), np.empty((gemm_launch.MIN_ROWS - 1, 40), np.float32))


def test_large_row_major_b_is_packed_panel_by_panel_as_it_is_used():
    rng = np.random.default_rng(7)
    k = gemm_launch.COPY_MIN_PAGES * gemm_launch.PAGE_BYTES // (4 * 300) + 1   # B of K x 300 floats reaches the packing size
    assert gemm_launch.copies_panels(k, 300)
    check(randn(rng, 50, k), randn(rng, k, 300), randn(rng, 300))
    check(randn(rng, 3, 50, k), randn(rng, 3, k, 300))   # and batched, over threads


def test_empty_dimensions():
    rng = np.random.default_rng(5)
    out = np.full((4, 3), np.nan, np.float32)
    assert gemm_launch.matmul(randn(rng, 4, 0), randn(rng, 0, 3), out) and (out == 0).all()
    bias = randn(rng, 3)
    assert gemm_launch.matmul(randn(rng, 4, 0), randn(rng, 0, 3), out, bias) and (out == bias).all()


def test_packing_pads_the_last_panel_with_zeros():
    b = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    packed = gemm_launch.pack(b)
    nr = packed.kernel.nr
    assert packed.data.shape == (-(-70 // nr), 3, nr)
    flat = packed.data.transpose(1, 0, 2).reshape(3, -1)
    np.testing.assert_array_equal(flat[:, :70], b)
    assert (flat[:, 70:] == 0).all()
