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
import pickle
import tempfile
from pathlib import Path
from typing import Any

from .kernel_cache import default_directory


@functools.cache
def package_fingerprint() -> str:
    """A hash of snipjit's source: any change to a pass may change the compiled graph."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
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
    return digest.hexdigest()


def _unkeyable():
    raise TypeError("option not JSON-able")


def _path(key: str) -> Path | None:
    base = default_directory()
    return base.parent / "models" / f"{key}.pkl" if base is not None else None


def load(key: str):
    path = _path(key)
    if path is None or not path.exists():
        return None
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
        return entry if entry.get("key") == key else None
    except Exception:   # noqa: BLE001 - damaged or stale: compile again
        return None


def store(key: str, entry: dict) -> None:
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump({**entry, "key": key}, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:   # noqa: BLE001 - a read-only disk or an unpicklable graph only costs the cache
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass
