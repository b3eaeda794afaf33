"""A compiled MatMul's prepared GEMM launch follows the arrays a request is given: new feed or output
arrays are pointed at (the constant weights are not watched)."""
import gc

import numpy as np
import pytest

import snipjit
from snipjit import GraphBuilder
from snipjit.runtime.implementations import gemm_launch

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("m", [5, 300])   # one thread, and split over the pool
def test_new_feed_and_output_arrays_are_followed(m):
    w = randn(48, 40)
    b = GraphBuilder()
    b.output(b.op("MatMul", b.input("x", "f32", ["m", 48]), b.const(w)), "y")
    req = snipjit.compile(b.build()).create_request()
    for seed in range(3):
        x, y = randn(m, 48, seed=seed), np.full((m, 40), np.nan, np.float32)
        result = req.run({"x": x}, {"y": y})[0]
        assert result is y
        np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)



@pytest.mark.parametrize("m", [5, 300])
def test_a_repeating_launch_recomputes_from_the_current_values(m):
    a, w, bias = randn(m, 64), randn(64, 72, seed=1), randn(72, seed=2)
    once, repeated = np.empty((m, 72), np.float32), np.empty((m, 72), np.float32)
    assert gemm_launch.matmul(a, gemm_launch.pack(w), once, bias)
    packed = gemm_launch.pack(w)
    launch = gemm_launch.prepare(a, packed, repeated, bias, repeats=True)
    for seed in range(3):
        a[:] = randn(m, 64, seed=10 + seed)   # same array, new values
        launch.run()
        np.testing.assert_allclose(repeated, a @ w + bias, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(once, randn(m, 64) @ w + bias, rtol=1e-5, atol=1e-5)


def test_a_launch_holds_the_packed_weights_made_for_it():
    a, w = randn(8192, 128), randn(128, 64, seed=1)
    out = np.empty((8192, 64), np.float32)
    launch = gemm_launch.prepare(a, gemm_launch.pack(w), out, None, repeats=True)
    gc.collect()
    litter = [np.full(w.size, np.nan, np.float32) for _ in range(8)]   # would reuse freed weights' memory
    launch.run()
    np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=1e-4)
    assert litter
