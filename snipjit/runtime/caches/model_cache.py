"""The compiled-graph cache: the graph after all passes, on disk, keyed by the model's bytes.

A second `snipjit.compile` of the same ONNX model (the same file unchanged, or the same bytes; the same
options and snipjit source) skips parsing and every graph pass; its kernels then come from the kernel
cache. Entries are pickles in
`$SNIPJIT_CACHE_DIR/models` (default `~/.cache/snipjit/models`, off with `SNIPJIT_CACHE=0`), written
atomically; an entry that fails to load is recompiled. Like any pickle, an entry is code: the cache is
the user's own directory, never a shared or downloaded one.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import mmap
import pickle
import tempfile
from pathlib import Path
from typing import Any

from ...targets import isa
from .kernel_cache import PACKAGE_ROOT, default_directory


def package_sources(root: Path = PACKAGE_ROOT) -> list[Path]:
    return sorted(root.rglob("*.py"))


@functools.cache
def package_fingerprint() -> str:
    """A hash of snipjit's source: any change to a pass may change the compiled graph."""
    root = PACKAGE_ROOT
    digest = hashlib.sha256()
    for path in package_sources(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def model_key(model: Any, options: dict) -> str | None:
    """The cache key of an ONNX model given as a path or bytes with JSON-able options, else None.
    A file is identified by its absolute path, size and modification time (as build tools do: no
    need to read and hash hundreds of MB of weights); bytes by their content hash."""
    if isinstance(model, (str, os.PathLike)):
        try:
            st = os.stat(model)
        except OSError:
            return None
        data = f"{Path(model).resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()
    elif isinstance(model, bytes):
        data = model
    else:
        return None
    try:
        opts = json.dumps({k: v for k, v in options.items() if k not in ("dump_dir",)}, sort_keys=True,
                          default=lambda o: sorted(o) if isinstance(o, (set, frozenset)) else _unkeyable())
    except TypeError:
        return None
    digest = hashlib.sha256(data)
    digest.update(opts.encode())
    digest.update(package_fingerprint().encode())
    digest.update((isa.requested_level() or "native").encode())   # passes size kernels for the ISA level
    return digest.hexdigest()


ALIGN = 4096   # out-of-band buffers start on a page


def _unkeyable():
    raise TypeError("option not JSON-able")


def _path(key: str) -> Path | None:
    base = default_directory()
    return base.parent / "models" / f"{key}.pkl" if base is not None else None


def load(key: str):
    """The entry stored under `key`, or None. Large arrays (weights) come back read-only, mapped from
    the cache file instead of copied: a warm compile does not read the weights twice."""
    path = _path(key)
    if path is None or not path.exists():
        return None
    try:
        with open(path, "rb") as f:
            head = pickle.load(f)
            if head.get("key") != key:
                return None
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if head["buffers"] else None
        views = [memoryview(mapped)[start:start + size] for start, size in head["buffers"]]
        return pickle.loads(head["entry"], buffers=views)
    except Exception:   # noqa: BLE001 - damaged or stale: compile again
        return None


def store(key: str, entry: dict) -> None:
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        buffers: list[pickle.PickleBuffer] = []
        body = pickle.dumps({**entry, "key": key}, protocol=5, buffer_callback=buffers.append)
        # the head, then each out-of-band buffer at an aligned offset; the head records where they are
        first = 0
        while True:
            spans, offset = [], first
            for b in buffers:
                spans.append((offset, b.raw().nbytes))
                offset += -(-b.raw().nbytes // ALIGN) * ALIGN
            head = pickle.dumps({"key": key, "entry": body, "buffers": spans}, protocol=5)
            if len(head) <= first:
                break
            first = -(-len(head) // ALIGN) * ALIGN
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            for (start, _), b in zip(spans, buffers):
                f.seek(start)
                f.write(b.raw())
        os.replace(tmp, path)
    except Exception:   # noqa: BLE001 - a read-only disk or an unpicklable graph only costs the cache
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass
