"""Fixtures shared across the test folders."""
import os

import pytest
from hypothesis import settings

from snipjit.targets import isa

from snipjit.runtime.caches import kernel_cache

# CI runs the same property-test examples every time (a submission passes or fails on its own merits);
# developers' runs keep exploring new ones
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def memory_only_kernel_cache():
    """Compile kernels from this code, not from a disk cache another version of the compiler filled."""
    saved = kernel_cache._cache
    kernel_cache._cache = kernel_cache.KernelCache(None)
    yield
    kernel_cache._cache = saved


def executable(name: str) -> bool:
    """Whether this CPU can execute code of ISA level `name`."""
    try:
        isa.select_for_host(name)
        return True
    except isa.IsaError:
        return False


@pytest.fixture(params=[level.name for level in isa.LEVELS])
def level(request, monkeypatch) -> isa.IsaLevel:
    """A test taking it runs once per ISA level, with SNIPJIT_ISA forcing that level for the test; levels
    this CPU cannot execute are skipped."""
    if not executable(request.param):
        pytest.skip(f"this CPU cannot execute {request.param} code")
    monkeypatch.setenv(isa.ENV_VAR, request.param)
    chosen = isa.current().level
    assert chosen.name == request.param
    return chosen


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core, at most 8 (each compiles kernels and holds its own caches)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, 8)
