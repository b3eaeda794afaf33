"""The generated strided copy against NumPy: transposes, slices with steps, broadcasts, dtypes."""
import numpy as np
import pytest

from snipjit.runtime import strided_copy
from snipjit.runtime.native_pool import get_native_pool

pytestmark = pytest.mark.skipif(get_native_pool() is None, reason="no native pool on this platform")
rng = np.random.default_rng(0)


@pytest.mark.parametrize("make", [
    lambda: rng.standard_normal((1, 128, 12, 32), dtype=np.float32).transpose(0, 2, 1, 3),
    lambda: rng.standard_normal((1, 128, 12, 32), dtype=np.float32).transpose(0, 2, 3, 1),
    lambda: rng.standard_normal((64, 300), dtype=np.float32)[::-2, 7:290:3],
    lambda: np.broadcast_to(rng.standard_normal((1, 257), dtype=np.float32), (80, 257)),
    lambda: rng.integers(0, 100, (40, 30, 20), dtype=np.int64).transpose(2, 0, 1),
    lambda: (rng.standard_normal((2, 3, 40, 5, 60)) > 0)[:, :, ::2],                 # bool, 5 dims merged
    lambda: rng.standard_normal((70, 70, 8)).astype(np.float16)[:, ::-1],
])
def test_copies_equal_numpys(make):
    view = make()
    out = np.empty(view.shape, view.dtype)
    taken = strided_copy.copy_into(view, out)
    np.testing.assert_array_equal(out if taken else view, view)
    assert taken == (view.size >= strided_copy.MIN_ELEMENTS)


def test_views_it_cannot_take_are_refused():
    view = rng.standard_normal((20, 30, 40, 50), dtype=np.float32).transpose(3, 0, 2, 1)
    assert not strided_copy.copy_into(view, np.empty(view.shape, np.float64))             # dtype differs
    assert not strided_copy.copy_into(view, np.empty(view.shape[::-1], np.float32).T)     # out not dense
    five = rng.standard_normal((6, 7, 8, 9, 10), dtype=np.float32).transpose(4, 2, 0, 3, 1)
    assert not strided_copy.copy_into(five, np.empty(five.shape, np.float32))             # 5 dims remain


def test_collapse_merges_dims_that_step_as_one():
    assert strided_copy.collapse((2, 3, 4), (12, 4, 1)) == ([24], [1])
    assert strided_copy.collapse((4, 3, 2), (1, 8, 4)) == ([4, 6], [1, 4])
    assert strided_copy.collapse((1, 5, 1), (99, 2, 7)) == ([5], [2])
