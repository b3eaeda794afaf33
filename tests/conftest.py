"""Fixtures shared across the test folders."""
import pytest

from snipjit.runtime.caches import kernel_cache


@pytest.fixture(scope="module")
def memory_only_kernel_cache():
    """Compile kernels from this code, not from a disk cache another version of the compiler filled."""
    saved = kernel_cache._cache
    kernel_cache._cache = kernel_cache.KernelCache(None)
    yield
    kernel_cache._cache = saved
