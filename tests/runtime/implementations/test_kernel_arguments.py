"""A kernel's pointer and dim arrays, given by name in the order of the kernel's names."""
import numpy as np
import pytest

from snipjit.runtime.implementations.kernel_arguments import dim_array, pointer_array


def test_pointers_follow_the_kernels_names_and_missing_ones_are_null():
    x, y = np.zeros(4, np.float32), np.ones(2, np.float32)
    ptrs = pointer_array(("x", "w", "y"), y=y, x=x, w=None)
    assert list(ptrs) == [x.ctypes.data, None, y.ctypes.data]
    assert list(pointer_array(("x", "y"), x=x)) == [x.ctypes.data, None]


def test_dims_follow_the_kernels_names_with_a_default_or_all_given():
    assert list(dim_array(("M", "K", "N"), N=3, M=1, K=2)) == [1, 2, 3]
    assert list(dim_array(("M", "K", "N"), 0, K=5)) == [0, 5, 0]
    with pytest.raises(KeyError, match=r"not given: \['K', 'N'\]"):
        dim_array(("M", "K", "N"), M=1)


@pytest.mark.parametrize("make", [lambda: pointer_array(("x",), z=np.zeros(1)), lambda: dim_array(("M",), 0, Z=1)])
def test_a_name_the_kernel_does_not_have_is_refused(make):
    with pytest.raises(KeyError, match=r"of the kernel .*\['[zZ]'\]"):
        make()
