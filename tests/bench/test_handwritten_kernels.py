"""The benchmark's hand-written C kernels compute what the workloads' NumPy versions do."""
import shutil

import numpy as np
import pytest

pytest.importorskip("bench.handwritten", reason="run from the repository root")
from bench import handwritten, workloads  # noqa: E402

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("gcc-12")), reason="needs gcc")


@pytest.mark.parametrize("shape", [(1, 16), (3, 48), (5, 7, 128), (2, 400)])
def test_softmax_matches_numpy(shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    x[0, :3] = -1e4   # lanes whose exponent underflows
    out = np.empty_like(x)
    handwritten.softmax(x, out, threads=2)()
    np.testing.assert_allclose(out, workloads._softmax_numpy(x.astype(np.float64))[0], rtol=1e-5, atol=1e-30)  # x - m rounds by up to |x - m| * 2**-24, relative error of e^(x - m)


@pytest.mark.parametrize("shape", [(1, 16), (3, 80), (4, 384), (2, 4096)])
def test_add_layernorm_matches_numpy(shape):
    rng = np.random.default_rng(1)
    x, residual = (rng.standard_normal(shape).astype(np.float32) + 3 for _ in range(2))
    gamma, beta = workloads._ln_weights(shape[-1])
    out = np.empty_like(x)
    handwritten.add_layernorm(x, residual, gamma, beta, out, workloads.LN_EPSILON, threads=2)()
    expected = workloads._layernorm_numpy(x.astype(np.float64), residual.astype(np.float64))[0]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_bad_arrays_are_refused_by_name():
    x = np.zeros((2, 20), np.float32)
    with pytest.raises(ValueError, match="softmax: the row length must be a multiple of 16, got 20"):
        handwritten.softmax(x, np.empty_like(x), threads=1)
    y = np.zeros((2, 16), np.float32)
    with pytest.raises(ValueError, match="add_layernorm: gamma must be float32\\[16\\]"):
        handwritten.add_layernorm(y, y, np.ones(8, np.float32), np.zeros(16, np.float32), np.empty_like(y), 1e-5, 1)
    with pytest.raises(ValueError, match="one shape"):
        handwritten.softmax(y, np.empty((2, 32), np.float32), threads=1)


def test_a_bound_call_keeps_its_arrays_alive():
    import gc
    import weakref

    x = np.zeros((2, 16), np.float32)
    out = np.empty_like(x)
    alive = weakref.ref(out)
    call = handwritten.softmax(x, out, threads=1)
    del out
    gc.collect()
    call()
    assert alive() is not None
    np.testing.assert_allclose(alive(), 1 / 16)
