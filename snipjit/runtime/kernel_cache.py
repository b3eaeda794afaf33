"""Kernel caches: in memory (per process) and on disk (across processes).

The key is a hash of what determines the code: the kernel body in canonical text (value names replaced
by position, so identical layers share one kernel), the compile options that change code, the target
(name, CPU and features), the snipjit version and a fingerprint of the compiler's own source. A disk entry holds the key, the kernel's metadata, the
target's binary and a checksum; an entry that does not read back whole, or whose key or checksum differ,
is recompiled and overwritten — never trusted.

The disk cache lives in `$SNIPJIT_CACHE_DIR` (default `~/.cache/snipjit`); `SNIPJIT_CACHE=0` turns it
off.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Callable

from ..ir.graph import Graph
from ..ir.text import print_graph
from ..snippets.compiler import CompiledSnippet
from ..targets.target import TargetMachine

MAGIC = b"SNIPJITK1\n"


def canonical_text(body: Graph) -> str:
    """The body's text with values and nodes renamed by position: equal for structurally equal bodies."""
    g = body.copy()
    for i, v in enumerate(g.values()):
        v.name = f"v{i}"
    for n in g.nodes:
        n.name = ""
    g.name = "body"
    return print_graph(g, max_elems=None)


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of the code that turns a body into machine code (the Snippets compiler and the targets),
    so a changed compiler never reuses kernels an older one cached, even at the same version."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in ("snippets", "targets"):
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(body: Graph, target: TargetMachine, options: dict) -> str:
    from .. import __version__
    parts = [canonical_text(body), target.cache_key(), __version__, compiler_fingerprint(),
             json.dumps(options, sort_keys=True)]
    return hashlib.sha256("\n--\n".join(parts).encode()).hexdigest()


def default_directory() -> Path | None:
    if os.environ.get("SNIPJIT_CACHE", "1") == "0":
        return None
    return Path(os.environ.get("SNIPJIT_CACHE_DIR") or Path.home() / ".cache" / "snipjit") / "kernels"


class KernelCache:
    def __init__(self, directory: Path | None = None):
        self.directory = directory
        self._memory: dict[str, CompiledSnippet] = {}
        self._lock = threading.Lock()
        self.hits = {"memory": 0, "disk": 0}
        self.misses = 0

    def get_or_compile(self, key: str, target: TargetMachine, compile_fn: Callable[[], CompiledSnippet]) -> CompiledSnippet:
        with self._lock:
            found = self._memory.get(key)
        if found is not None:
            self.hits["memory"] += 1
            return found
        found = self._load(key, target)
        if found is not None:
            self.hits["disk"] += 1
        else:
            self.misses += 1
            found = compile_fn()
            self._store(key, target, found)
        with self._lock:
            return self._memory.setdefault(key, found)

    def _path(self, key: str) -> Path | None:
        return self.directory / f"{key}.bin" if self.directory is not None else None

    def _load(self, key: str, target: TargetMachine) -> CompiledSnippet | None:
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            data = path.read_bytes()
            if not data.startswith(MAGIC):
                return None
            header_len = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
            start = len(MAGIC) + 8
            header = json.loads(data[start:start + header_len])
            payload = data[start + header_len:]
            if header.get("key") != key or header.get("sha256") != hashlib.sha256(payload).hexdigest():
                return None
            kernel = target.load_kernel(payload, header["name"])
            return CompiledSnippet.from_metadata(kernel, header["meta"])
        except Exception:   # noqa: BLE001 - unreadable, truncated, malformed or stale: compile again
            return None

    def _store(self, key: str, target: TargetMachine, compiled: CompiledSnippet) -> None:
        path = self._path(key)
        binary = target.kernel_binary(compiled.kernel)
        if path is None or binary is None:
            return
        header = json.dumps({"key": key, "name": compiled.kernel.name, "meta": compiled.metadata(),
                             "sha256": hashlib.sha256(binary).hexdigest()}).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + len(header).to_bytes(8, "little") + header + binary)
            os.replace(tmp, path)   # atomic: readers see the old entry or the whole new one
        except OSError:
            pass   # a read-only or full disk only costs the cache


_cache: KernelCache | None = None
_cache_lock = threading.Lock()


def get_kernel_cache() -> KernelCache:
    global _cache
    with _cache_lock:
        if _cache is None:
            _cache = KernelCache(default_directory())
        return _cache
