"""Kernel caches: in memory (per process) and on disk (across processes).

The key is a hash of what determines the code: the kernel body in canonical text (value names replaced
by position, so identical layers share one kernel), the compile options that change code, the target
(name, CPU and features), the snipjit version and a fingerprint of the compiler's own source. A disk entry holds the key, the kernel's metadata, the
target's binary and a checksum; an entry that does not read back whole, or whose key or checksum differ,
is recompiled and overwritten — never trusted. Compile workers (`planning.compile_workers`) hand their kernels back
in the same entry format.

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
from typing import Callable, Mapping

from ...ir.graph import Graph
from ...ir.graph import print_graph
from ...version import __version__
from ...snippets.subgraph_compiler import CompiledSnippet
from ...snippets.target_machine import TargetMachine
from ..scoped import ThreadScoped

MAGIC = b"SNIPJITK1\n"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]   # snipjit/ (this file: snipjit/runtime/caches/)
COMPILER_FOLDERS = ("snippets", "targets")   # the packages whose code turns a body into machine code


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
    root = PACKAGE_ROOT
    digest = hashlib.sha256()
    for folder in COMPILER_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(body: Graph, target: TargetMachine, options: dict) -> str:
    parts = [canonical_text(body), target.cache_key(), __version__, compiler_fingerprint(),
             json.dumps(options, sort_keys=True)]
    return hashlib.sha256("\n--\n".join(parts).encode()).hexdigest()


# Entries that came with a compiled-model artifact (`snipjit.load`): looked up before the disk cache, never
# written to it. Keys hash the target's CPU and features, so an entry is only found by the ISA it was built for.
_offered: dict[str, bytes] = {}

Recorder = dict[str, Callable[[], "bytes | None"]]   # cache key -> a function making the entry's bytes


def offer(entries: Mapping[str, bytes]) -> None:
    _offered.update(entries)


def offered(key: str) -> bytes | None:
    return _offered.get(key)


recording: ThreadScoped[Recorder] = ThreadScoped()
"""`with recording(record):` notes in `record` every kernel a cache hands out on this thread inside the
block (a program's kernels: what its artifact must carry); the innermost block's record gets it."""


def note(key: str, entry: Callable[[], bytes | None]) -> None:
    record = recording.get()
    if record is not None and key not in record:
        record[key] = entry


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
        found = self._get_or_compile(key, target, compile_fn)
        note(key, lambda: encode_entry(key, target, found))
        return found

    def _get_or_compile(self, key: str, target: TargetMachine, compile_fn: Callable[[], CompiledSnippet]
                        ) -> CompiledSnippet:
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

    def holds(self, key: str) -> bool:
        """Whether a kernel is in memory or has a disk entry (which may still turn out unusable)."""
        with self._lock:
            if key in self._memory or key in _offered:
                return True
        path = self._path(key)
        return path is not None and path.exists()

    def add_entry(self, key: str, target: TargetMachine, entry: bytes) -> CompiledSnippet | None:
        """Take a kernel compiled elsewhere (a compile worker) as the bytes of a disk entry: into memory
        and onto disk. None, and nothing stored, when the entry does not decode."""
        found = decode_entry(entry, key, target)
        if found is None:
            return None
        self.misses += 1
        self._write(key, entry)
        with self._lock:
            return self._memory.setdefault(key, found)

    def _load(self, key: str, target: TargetMachine) -> CompiledSnippet | None:
        if key in _offered:
            found = decode_entry(_offered[key], key, target)
            if found is not None:
                return found
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            return decode_entry(path.read_bytes(), key, target)
        except OSError:
            return None

    def _store(self, key: str, target: TargetMachine, compiled: CompiledSnippet) -> None:
        if self.directory is not None:
            entry = encode_entry(key, target, compiled)
            if entry is not None:
                self._write(key, entry)

    def _write(self, key: str, entry: bytes) -> None:
        path = self._path(key)
        if path is not None:
            write_atomically(path, entry)


def write_atomically(path: Path, data: bytes) -> None:
    """Write a cache file so that readers see the old one or the whole new one; a read-only or full disk
    only costs the cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


def seal(key: str, payload: bytes, **header) -> bytes:
    """The bytes of a disk entry: MAGIC, a JSON header (the key, the payload's checksum, `header`), the
    payload (a kernel's binary)."""
    text = json.dumps({"key": key, "sha256": hashlib.sha256(payload).hexdigest(), **header}).encode()
    return MAGIC + len(text).to_bytes(8, "little") + text + payload


def unseal(data: bytes, key: str) -> tuple[dict, bytes] | None:
    """(header, payload) of an entry; None when it is not whole or not the entry of `key`."""
    try:
        if not data.startswith(MAGIC):
            return None
        start = len(MAGIC) + 8
        header_len = int.from_bytes(data[len(MAGIC):start], "little")
        header, payload = json.loads(data[start:start + header_len]), data[start + header_len:]
        checksum = hashlib.sha256(payload).hexdigest()
        if not isinstance(header, dict) or header.get("key") != key or header.get("sha256") != checksum:
            return None
        return header, payload
    except ValueError:   # truncated or malformed
        return None


def encode_entry(key: str, target: TargetMachine, compiled: CompiledSnippet) -> bytes | None:
    """A kernel as the bytes of a disk entry (None: the target has no binary to store)."""
    binary = target.kernel_binary(compiled.kernel)
    if binary is None:
        return None
    return seal(key, binary, name=compiled.kernel.name, meta=compiled.metadata())


def decode_entry(data: bytes, key: str, target: TargetMachine) -> CompiledSnippet | None:
    """The kernel an entry holds, loaded; None when it is not whole or not the entry of `key`."""
    try:
        sealed = unseal(data, key)
        if sealed is None:
            return None
        header, payload = sealed
        kernel = target.load_kernel(payload, header["name"])
        return CompiledSnippet.from_metadata(kernel, header["meta"])
    except Exception:   # noqa: BLE001 - truncated, malformed or stale: compile again
        return None


_cache: KernelCache | None = None
_cache_lock = threading.Lock()


def get_kernel_cache() -> KernelCache:
    global _cache
    with _cache_lock:
        if _cache is None:
            _cache = KernelCache(default_directory())
        return _cache
