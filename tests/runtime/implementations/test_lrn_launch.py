"""Channels-last LRN on its generated kernel against the ONNX reference kernel, at every ISA level this host
can execute: window sizes odd and even (the window's channels before and after differ), 1 and wider than a
vector, channel counts below, at and past the vector width (the masked tail), batches, pixels split over the
pool, quarter and other exponents, special values."""
import numpy as np
import pytest

from snipjit.ops.common import evaluate
from snipjit.runtime.implementations import lrn_launch
from snipjit.runtime.implementations.gemm_launch import available
from snipjit.runtime.parallel.native_threads import get_native_pool

pytestmark = pytest.mark.skipif(not available(), reason="no LLVM JIT")


def reference(x, size, alpha, beta, bias):
    attrs = dict(size=size, alpha=alpha, beta=beta, bias=bias)
    return evaluate("LRN", [x.transpose(0, 3, 1, 2)], attrs)[0].transpose(0, 2, 3, 1)


# (N, H, W, C), size, beta
CASES = [((1, 5, 6, 7), 5, 0.75), ((2, 3, 4, 37), 5, 0.75), ((1, 4, 4, 64), 4, 0.75), ((1, 3, 3, 20), 1, 0.5),
         ((1, 4, 4, 3), 9, 0.75), ((1, 2, 3, 50), 19, 0.6), ((1, 56, 56, 64), 5, 0.75)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"s{c[1]}b{c[2]}")
def test_lrn(level, case):
    shape, size, beta = case
    rng = np.random.default_rng(sum(shape) + size)
    x = rng.standard_normal(shape, dtype=np.float32) * 3
    y = np.full_like(x, np.nan)
    launch = lrn_launch.prepare_lrn(x, y, size, 0.01, beta, 1.5)
    launch.run()
    np.testing.assert_allclose(y, reference(x, size, 0.01, beta, 1.5), rtol=2e-6, atol=1e-7)
    pool = get_native_pool()
    assert launch.threads == (pool.threads if pool is not None and x.size >= lrn_launch.PARALLEL_MIN_ELEMENTS else 1)
    x[...] = rng.standard_normal(shape, dtype=np.float32)   # run again: new values in the same arrays
    launch.run()
    np.testing.assert_allclose(y, reference(x, size, 0.01, beta, 1.5), rtol=2e-6, atol=1e-7)


def test_special_values_follow_the_reference(level):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30, 2.0, 3.0, 1e-45], np.float32)
    x = np.tile(x, 4).reshape(1, 1, 2, 20)
    y = np.empty_like(x)
    lrn_launch.prepare_lrn(x, y, 3, 1e-4, 0.75, 1.0).run()
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(y, reference(x, 3, 1e-4, 0.75, 1.0), rtol=2e-6, atol=0)


def test_bad_arguments_are_named():
    x = np.zeros((1, 2, 2, 8), np.float32)
    with pytest.raises(ValueError, match="LRN's y must be a C-contiguous float32"):
        lrn_launch.prepare_lrn(x, np.zeros((1, 2, 2, 8), np.float64), 5, 1e-4, 0.75, 1.0)
    with pytest.raises(ValueError, match=r"output \[1, 2, 2, 4\] must have the input's shape \[1, 2, 2, 8\]"):
        lrn_launch.prepare_lrn(x, np.zeros((1, 2, 2, 4), np.float32), 5, 1e-4, 0.75, 1.0)
    with pytest.raises(ValueError, match="size must be positive"):
        lrn_launch.prepare_lrn(x, np.zeros_like(x), 0, 1e-4, 0.75, 1.0)
