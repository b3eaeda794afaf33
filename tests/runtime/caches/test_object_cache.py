"""The object-code cache of the GEMM, convolution and window kernels: a kernel compiled once is loaded
from disk afterwards, a damaged or foreign entry is compiled again and replaced, and a kernel chosen for
another ISA level than SNIPJIT_ISA now selects is refused."""
import pytest

from snipjit.runtime.caches import object_cache
from snipjit.runtime.implementations import gemm_launch
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.gemm import MicroKernel, gemm_module

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SNIPJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SNIPJIT_CACHE", raising=False)
    monkeypatch.setattr(object_cache, "_loaded", {})
    return tmp_path / "kernels"


def load(counter: list | None = None):
    host = jit.host()
    shape = MicroKernel(4, 1, host.level.f32_lanes, 1, host.level.fused_multiply_add)

    def module():
        return gemm_module(shape)
    object_cache._loaded.clear()   # as a new process would: from the disk cache or compiled
    if counter is not None:
        real = object_cache.compile_to_object
        object_cache.compile_to_object = lambda source: (counter.append(1), real(source))[1]
    try:
        return object_cache.native_kernel(module, shape.name, host.cpu, host.features)
    finally:
        if counter is not None:
            object_cache.compile_to_object = real


def test_compiled_once_then_loaded(cache_dir):
    compiled = []
    address, fn = load(compiled)
    assert address and fn is not None and compiled == [1]
    assert len(list(cache_dir.glob("*.o"))) == 1
    again = []
    address, fn = load(again)
    assert address and again == []   # from the disk entry


def test_a_damaged_entry_is_compiled_again(cache_dir):
    load()
    (entry,) = cache_dir.glob("*.o")
    entry.write_bytes(entry.read_bytes()[:-10])
    compiled = []
    load(compiled)
    assert compiled == [1] and object_cache._read(entry, entry.stem) is not None   # rewritten whole


def test_a_kernel_chosen_for_another_level_is_refused(cache_dir):
    host = jit.host()
    with pytest.raises(RuntimeError, match="another ISA level"):
        object_cache.native_kernel(lambda: None, "k", host.cpu, host.features + ",+madeup")
