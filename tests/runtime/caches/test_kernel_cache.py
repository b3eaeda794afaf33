"""Kernel caches: memory hits in one process, disk hits across processes, damaged or mismatched disk
entries recompiled and overwritten (never trusted), one key for structurally identical bodies."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import snipjit
from snipjit.runtime.caches import kernel_cache
from snipjit.runtime.caches.kernel_cache import MAGIC, KernelCache, cache_key
from snipjit.runtime.implementations.snippet import SnippetKernel
from snipjit.snippets.subgraph_compiler import compile_subgraph
from snipjit.targets import get_target

BODY = """graph body(x: f32[4,16], y: f32[4,16]) -> [z] {
  const c: f32[] = 0.5
  [a] = Mul(x, c)
  [z] = Add(a, y)
}"""
RENAMED = """graph other(p: f32[4,16], q: f32[4,16]) -> [r] {
  const k: f32[] = 0.5
  [t] = Mul(p, k) @named
  [r] = Add(t, q)
}"""


@pytest.fixture(scope="module")
def target():
    return get_target()


class Compiles:
    """A compile function for `get_or_compile` that counts its calls."""

    def __init__(self, body_text: str, target):
        self.body = snipjit.parse_graph(body_text)
        self.target = target
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return compile_subgraph(self.body, self.target, name="kernel_test")

    @property
    def key(self) -> str:
        return cache_key(self.body, self.target, {"loop_depth": 1})


@pytest.fixture(scope="module")
def subgraph_node():
    """A Subgraph node whose body is BODY, as the tokenizer makes it."""
    cm = snipjit.compile(snipjit.parse_graph(BODY.replace("graph body", "graph main")), fold=False)
    (step,) = cm.plan
    assert step.kind == "snippet"
    return step.node


def run_kernel(node, compiled):
    """Run a (possibly cached) kernel of BODY through the runtime on fixed data: z = x * 0.5 + y."""
    x = np.arange(64, dtype=np.float32).reshape(4, 16)
    y = np.ones((4, 16), np.float32)
    (z,) = SnippetKernel(node, compiled, fallback=None)([x, y])
    np.testing.assert_array_equal(z, x * 0.5 + y)


def test_second_lookup_hits_memory(target, subgraph_node):
    cache = KernelCache(None)
    compile_fn = Compiles(BODY, target)
    first = cache.get_or_compile(compile_fn.key, target, compile_fn)
    second = cache.get_or_compile(compile_fn.key, target, compile_fn)
    assert second is first and compile_fn.calls == 1
    assert cache.misses == 1 and cache.hits == {"memory": 1, "disk": 0}
    run_kernel(subgraph_node, first)


def test_structurally_identical_bodies_share_a_key(target):
    same = Compiles(RENAMED, target)
    assert same.key == Compiles(BODY, target).key
    cache = KernelCache(None)
    cache.get_or_compile(Compiles(BODY, target).key, target, Compiles(BODY, target))
    cache.get_or_compile(same.key, target, same)
    assert same.calls == 0 and cache.hits["memory"] == 1


@pytest.mark.parametrize("change", [
    ("const c: f32[] = 0.5", "const c: f32[] = 0.25"),   # another constant
    ("Add(a, y)", "Sub(a, y)"),                           # another op
    ("Add(a, y)", "Add(y, a)"),                           # operands swapped
    ("f32[4,16], y: f32[4,16]", "f32[4,16], y: f32[1,16]"),   # another broadcast
])
def test_different_bodies_have_different_keys(target, change):
    changed = Compiles(BODY.replace(*change), target)
    assert changed.key != Compiles(BODY, target).key


def test_options_and_target_are_part_of_the_key(target):
    body = snipjit.parse_graph(BODY)
    key = cache_key(body, target, {"loop_depth": 1})
    assert key != cache_key(body, target, {"loop_depth": 2})

    class OtherCPU:
        def cache_key(self):
            return target.cache_key() + "+avx512f"

    assert key != cache_key(body, OtherCPU(), {"loop_depth": 1})


def test_a_changed_compiler_changes_the_key(target, monkeypatch):
    body = snipjit.parse_graph(BODY)
    key = cache_key(body, target, {"loop_depth": 1})
    monkeypatch.setattr(kernel_cache, "compiler_fingerprint", lambda: "an edited generator")
    assert cache_key(body, target, {"loop_depth": 1}) != key


def test_new_cache_on_the_same_directory_hits_disk(target, tmp_path, subgraph_node):
    compile_fn = Compiles(BODY, target)
    KernelCache(tmp_path).get_or_compile(compile_fn.key, target, compile_fn)
    assert (tmp_path / f"{compile_fn.key}.bin").exists()
    cache = KernelCache(tmp_path)
    loaded = cache.get_or_compile(compile_fn.key, target, compile_fn)
    assert compile_fn.calls == 1 and cache.hits == {"memory": 0, "disk": 1} and cache.misses == 0
    run_kernel(subgraph_node, loaded)


def damage_truncate(data: bytes, other: bytes) -> bytes:
    return data[:len(data) // 2]


def damage_flip_code(data: bytes, other: bytes) -> bytes:
    return data[:-40] + bytes([data[-40] ^ 0xFF]) + data[-39:]


def damage_header(data: bytes, other: bytes) -> bytes:
    return data.replace(b'"key"', b'"kez"', 1)


def damage_magic(data: bytes, other: bytes) -> bytes:
    return b"X" + data[1:]


def damage_empty(data: bytes, other: bytes) -> bytes:
    return b""


def damage_wrong_key(data: bytes, other: bytes) -> bytes:
    """A whole, valid entry, but another kernel's."""
    return other


def damage_header_not_an_object(data: bytes, other: bytes) -> bytes:
    header = b"[]"
    return MAGIC + len(header).to_bytes(8, "little") + header


def damage_meta_of_wrong_type(data: bytes, other: bytes) -> bytes:
    start = len(MAGIC) + 8
    n = int.from_bytes(data[len(MAGIC):start], "little")
    header = json.loads(data[start:start + n])
    header["meta"]["master_shape"] = 7
    raw = json.dumps(header).encode()
    return MAGIC + len(raw).to_bytes(8, "little") + raw + data[start + n:]


DAMAGES = [damage_truncate, damage_flip_code, damage_header, damage_magic, damage_empty, damage_wrong_key,
           damage_header_not_an_object, damage_meta_of_wrong_type]


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_entry_is_recompiled_and_overwritten(target, tmp_path, damage, subgraph_node):
    compile_fn = Compiles(BODY, target)
    other = Compiles(BODY.replace("0.5", "0.75"), target)
    KernelCache(tmp_path).get_or_compile(compile_fn.key, target, compile_fn)
    KernelCache(tmp_path).get_or_compile(other.key, target, other)
    path = tmp_path / f"{compile_fn.key}.bin"
    path.write_bytes(damage(path.read_bytes(), (tmp_path / f"{other.key}.bin").read_bytes()))

    cache = KernelCache(tmp_path)
    compiled = cache.get_or_compile(compile_fn.key, target, compile_fn)
    assert cache.misses == 1 and cache.hits["disk"] == 0 and compile_fn.calls == 2
    run_kernel(subgraph_node, compiled)   # the right kernel: z = x * 0.5 + y, not 0.75
    assert path.read_bytes()[:len(MAGIC)] == MAGIC
    again = KernelCache(tmp_path)
    run_kernel(subgraph_node, again.get_or_compile(compile_fn.key, target, compile_fn))
    assert again.hits["disk"] == 1 and compile_fn.calls == 2


def test_unwritable_directory_only_costs_the_cache(target, tmp_path, subgraph_node):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = KernelCache(blocker / "kernels")
    compile_fn = Compiles(BODY, target)
    run_kernel(subgraph_node, cache.get_or_compile(compile_fn.key, target, compile_fn))
    assert cache.misses == 1


SCRIPT = """
import json, numpy as np, snipjit
from snipjit.runtime.caches.kernel_cache import get_kernel_cache
g = snipjit.parse_graph('''graph(x: f32[8,64]) -> [y] {
  const c: f32[] = 2.0
  [a] = Mul(x, c)
  [y] = Tanh(a)
}''')
y = snipjit.compile(g).run({"x": np.full((8, 64), 0.25, np.float32)})[0]
cache = get_kernel_cache()
print(json.dumps({"hits": cache.hits, "misses": cache.misses, "dir": str(cache.directory), "y": y.tolist()}))
"""


def fresh_process(cache_dir: Path, **env) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "SNIPJIT_CACHE"}
    environment |= {"SNIPJIT_CACHE_DIR": str(cache_dir), **env}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=environment, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3], timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fresh_process_hits_disk(tmp_path):
    cold = fresh_process(tmp_path)
    warm = fresh_process(tmp_path)
    assert cold["dir"] == str(tmp_path / "kernels")
    assert cold["misses"] == 1 and cold["hits"] == {"memory": 0, "disk": 0}
    assert warm["misses"] == 0 and warm["hits"] == {"memory": 0, "disk": 1}
    assert warm["y"] == cold["y"]
    np.testing.assert_allclose(np.array(warm["y"]), np.tanh(0.5), rtol=1e-6)
    off = fresh_process(tmp_path, SNIPJIT_CACHE="0")
    assert off["dir"] == "None" and off["misses"] == 1


def test_compiling_again_in_the_same_process_hits_memory(monkeypatch, tmp_path):
    cache = KernelCache(tmp_path)
    monkeypatch.setattr(kernel_cache, "_cache", cache)
    first = snipjit.compile(snipjit.parse_graph(BODY.replace("graph body", "graph main")), fold=False)
    second = snipjit.compile(snipjit.parse_graph(RENAMED.replace("graph other", "graph main")), fold=False)
    assert cache.misses == 1 and cache.hits == {"memory": 1, "disk": 0}
    assert second.plan[0].kernel.compiled is first.plan[0].kernel.compiled
    x, y = np.ones((4, 16), np.float32), np.full((4, 16), 2, np.float32)
    np.testing.assert_array_equal(second.run({"p": x, "q": y})[0], np.full((4, 16), 2.5, np.float32))


def test_the_compiler_fingerprint_hashes_the_compilers_source(monkeypatch):
    """A changed code generator must not reuse kernels an older one cached: the fingerprint reads the
    Snippets compiler's and the targets' files (it once read none, after they moved)."""
    read = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: (read.append(self), real(self))[1])
    kernel_cache.compiler_fingerprint.cache_clear()
    try:
        kernel_cache.compiler_fingerprint()
    finally:
        kernel_cache.compiler_fingerprint.cache_clear()
    names = {p.as_posix() for p in read}
    assert any(n.endswith("snipjit/targets/llvm/gemm.py") for n in names)
    assert any("/snipjit/snippets/" in n for n in names)
