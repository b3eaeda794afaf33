"""How a product is split into work items over the native pool: a product too small to give each
thread several items of MIN_ITEM_MULTIPLY_ADDS gets one item per thread; a large one up to
ITEMS_PER_THREAD per thread; a small one (below the parallel threshold) runs as one item."""
import numpy as np
import pytest

from snipjit.runtime.implementations import gemm_launch
from snipjit.runtime.parallel.native_threads import get_native_pool
from snipjit.targets import isa

pytestmark = pytest.mark.skipif(not gemm_launch.available() or get_native_pool() is None,
                                reason="needs the LLVM JIT and the native pool")


def one_panel() -> int:
    """A width every register block of the level covers in one panel: two vectors."""
    return 2 * isa.current().level.f32_lanes


def launch(m, k, n):
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    out = np.empty((m, n), np.float32)
    result = gemm_launch.prepare(a, gemm_launch.pack(w), out)
    result.run()
    np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=1e-4)
    return result


def test_a_mid_size_product_gets_one_item_per_thread():
    threads = get_native_pool().threads
    n = one_panel()
    m = 6 * 64 * threads   # M·K·N well under a thread's minimum item
    result = launch(m, 64, n)
    assert m * 64 * n < threads * gemm_launch.MIN_ITEM_MULTIPLY_ADDS
    assert result.threads == threads and result.items == threads


def test_a_large_product_gets_several_items_per_thread():
    threads = get_native_pool().threads
    n = one_panel()
    m = 4 * threads * gemm_launch.ITEMS_PER_THREAD * gemm_launch.MIN_ITEM_MULTIPLY_ADDS // (256 * n)
    result = launch(m, 256, n)
    assert result.items == threads * gemm_launch.ITEMS_PER_THREAD


def test_a_small_product_runs_as_one_item_on_the_calling_thread():
    result = launch(16, 64, one_panel())
    assert result.threads == 1 and result.items == 1


def test_consecutive_items_cover_whole_rows_of_the_output():
    """Panels are the fastest-varying part of an item's index, so a thread's contiguous share of the items
    (the native pool's shard) writes whole rows, the rows the next layer's same thread reads."""
    import ctypes
    threads = get_native_pool().threads
    n = 3 * one_panel()
    m = 4 * threads * gemm_launch.ITEMS_PER_THREAD * gemm_launch.MIN_ITEM_MULTIPLY_ADDS // (256 * n)
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((m, 256), dtype=np.float32), rng.standard_normal((256, n), dtype=np.float32)
    out = np.full((m, n), np.nan, np.float32)
    result = gemm_launch.prepare(a, gemm_launch.pack(w), out)
    split = gemm_launch.WorkSplit.of(result.kernel, 1, m, n, 256)
    assert split.chunks >= 2 and split.panels >= 2 and result.items == split.items
    call = result.native_call
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_void_p)(call.fn)
    fn(call.ptrs, call.dims, 0, split.panels, call.scratch)   # the first chunk's items
    rows = split.chunk_rows
    np.testing.assert_allclose(out[:rows], a[:rows] @ w, rtol=1e-4, atol=1e-4)
    assert np.isnan(out[rows:]).all()


def test_rows_are_chunked_for_equal_shares_where_the_wanted_count_leaves_one_thread_more(monkeypatch):
    """(Two threads.) 28 row blocks in 3 panels wanted 3 chunks: 9 items, 5 on one thread; 4 chunks give
    each thread 6 items of 7 blocks, the even share. Where the wanted count is already even, it stays."""
    import types
    monkeypatch.setattr(gemm_launch, "get_native_pool", lambda: types.SimpleNamespace(threads=2))
    kernel = gemm_launch.choose_kernel(96, 576)
    m = 28 * kernel.mr

    def split(panels: int):   # large enough for ITEMS_PER_THREAD items on each thread
        n = panels * kernel.nr
        return gemm_launch.WorkSplit.of(kernel, 1, m, n, 8 * gemm_launch.MIN_ITEM_MULTIPLY_ADDS // (m * n) + 1)

    uneven = split(3)
    assert (uneven.chunks, uneven.chunk_rows, uneven.items) == (4, 7 * kernel.mr, 12)
    even = split(2)
    assert (even.chunks, even.chunk_rows, even.items) == (4, 7 * kernel.mr, 8)


def two_threads(monkeypatch):
    import types
    monkeypatch.setattr(gemm_launch, "get_native_pool", lambda: types.SimpleNamespace(threads=2))


def test_rows_are_chunked_so_that_a_chunk_of_a_stays_in_half_of_l2(monkeypatch):
    """(Two threads.) 3136 rows of 256 (3.2 MB) by 8 panels want one chunk: each panel's item would read all of A
    again from beyond a 2 MB L2. Instead, chunks of A that fit half of L2, as many as a multiple of the threads."""
    import dataclasses
    two_threads(monkeypatch)
    kernel = dataclasses.replace(gemm_launch.choose_kernel(128, 256), l2=1 << 21)
    m, k, n = 3136, 256, 8 * kernel.nr
    split = gemm_launch.WorkSplit.of(kernel, 1, m, n, k)
    assert split.chunks % 2 == 0 and split.chunk_rows * k * 4 <= kernel.l2 // 2
    assert (-(-m // kernel.mr) // (split.chunks - 2) + 1) * kernel.mr * k * 4 > kernel.l2 // 2   # no more than needed
    # a convolution's window says how much of A a row reads: 64 channels of a 3x3 window at stride 1, 256 bytes
    # (not its 9 taps' 2304): the 800 KB image fits as it is
    assert gemm_launch.WorkSplit.of(kernel, 1, m, n, 9 * 64, a_row_bytes=4 * 64).chunks == 1


def test_rows_stay_in_one_chunk_where_each_chunk_reading_b_costs_more(monkeypatch):
    """(Two threads.) A (2·NR rows) twice half of L2, by 8 panels of B (4 times A): two chunks would read A once
    (saving 7 of its reads) but B twice (one more): 9 A's traffic against 12, not the half that pays."""
    import dataclasses
    two_threads(monkeypatch)
    kernel = gemm_launch.choose_kernel(128, 4096)
    m, k = 2 * kernel.nr, 4096
    kernel = dataclasses.replace(kernel, l2=4 * m * k)
    split = gemm_launch.WorkSplit.of(kernel, 1, m, 8 * kernel.nr, k)
    assert split.chunks == 1


def test_a_grouped_convolution_runs_chunk_by_chunk_over_every_group():
    """The groups of a grouped 1×1 convolution are column bands of the same output rows (4 × 34 columns: bands
    share cache lines): its items run chunk of rows by chunk, every group of a chunk together, so a thread's
    share is whole rows; the chunks a multiple of the threads."""
    import ctypes
    from snipjit.runtime.implementations import conv_launch
    threads = get_native_pool().threads
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 28, 28, 136), dtype=np.float32)
    w = rng.standard_normal((136, 34, 1, 1), dtype=np.float32)
    out = np.full((1, 28, 28, 136), np.nan, np.float32)
    geometry = conv_launch.ConvGeometry((1, 1), (1, 1), (0, 0, 0, 0), (1, 1))
    launch = conv_launch.prepare_conv(x, conv_launch.pack_conv(w, 4), out, geometry)
    split = gemm_launch.WorkSplit.of(launch.kernel, 4, 784, 34, 34, 4 * 34, interleaved=True)
    assert split.interleaved and split.chunks % threads == 0 and launch.items == split.items
    call = launch.native_call
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_void_p)(call.fn)
    fn(call.ptrs, call.dims, 0, 4 * split.panels, call.scratch)   # the first chunk's items
    rows = split.chunk_rows
    pixels, weights = x.reshape(784, 4, 34), w.reshape(4, 34, 34)
    expected = np.einsum("pgk,gok->pgo", pixels, weights).reshape(784, 136)
    np.testing.assert_allclose(out.reshape(784, 136)[:rows], expected[:rows], rtol=1e-4, atol=1e-4)
    assert np.isnan(out.reshape(784, 136)[rows:]).all()
    launch.run()
    np.testing.assert_allclose(out.reshape(784, 136), expected, rtol=1e-4, atol=1e-4)
