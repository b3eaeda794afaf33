"""How a product is split into work items over the native pool: a product too small to give each
thread several items of MIN_ITEM_MULTIPLY_ADDS gets one item per thread; a large one up to
ITEMS_PER_THREAD per thread; a small one (below the parallel threshold) runs as one item. A work item
covers a group of panels where a row block's rows of A stay in L1 (`panel_group`)."""
from dataclasses import replace

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


def test_panel_groups_where_a_row_block_fits_in_l1():
    kernel = gemm_launch.pack(np.zeros((8, 8), np.float32)).kernel
    caches = dict(l1=32 << 10, l2=512 << 10)
    k = (32 << 10) // 2 // (4 * kernel.mr)   # the longest K whose row block of A fills half of L1
    panels = 100
    n = panels * kernel.nr
    expected = min(panels, (512 << 10) // 2 // (k * kernel.nr * 4))
    assert expected >= gemm_launch.PANEL_GROUP_MIN
    assert gemm_launch.panel_group(replace(kernel, **caches), k, n) == expected
    assert gemm_launch.panel_group(replace(kernel, **caches), k + 1, n) == 1        # its rows would not stay in L1
    assert gemm_launch.panel_group(replace(kernel, **caches), k, 3 * kernel.nr) == 1   # too few panels to group
    assert gemm_launch.panel_group(replace(kernel, **caches), 16, 7 * kernel.nr) == 7   # all of them


@pytest.mark.parametrize("m, k, n", [(50, 33, 9), (7, 64, 13), (3001, 20, 4)])
def test_products_of_grouped_panels(m, k, n):
    """Work items of 4 panels (caches of that size), N a partial panel past whole groups: each panel's bias
    and lanes; M with a partial row block; row chunks on the pool's threads where M is large enough."""
    rng = np.random.default_rng(m)
    columns = n * one_panel() + one_panel() // 2 + 1
    w = rng.standard_normal((k, columns), dtype=np.float32)
    packed = gemm_launch.pack(w)
    packed = replace(packed, kernel=replace(packed.kernel, l1=1 << 30, l2=2 * 4 * k * packed.kernel.nr * 4))
    a, bias = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal(columns, dtype=np.float32)
    for out_bias in (None, bias):
        out = np.full((m, columns), np.nan, np.float32)
        launch = gemm_launch.prepare(a, packed, out, out_bias)
        assert launch.dims[gemm_launch_dims().index("panel_group")] == 4
        launch.run()
        want = a @ w + (0 if out_bias is None else out_bias)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def gemm_launch_dims():
    from snipjit.targets.llvm.gemm import DIMS
    return DIMS
