"""The compiled-graph cache: the graph after all passes, on disk, keyed by the model's bytes.

A second `snipjit.compile` of the same ONNX model (the same content, at any path, or the same bytes; the
same options and snipjit source) skips parsing and every graph pass; its kernels then come from the kernel
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
import time
from pathlib import Path
from typing import Any, Callable

from ...targets import isa
from . import pickle_file
from .kernel_cache import PACKAGE_ROOT, default_directory, write_atomically


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
    """The cache key of an ONNX model given as a path or bytes with JSON-able options, else None: a hash
    of the model's content (with the files of its external data), so a model copied to another path or
    machine finds its entry; see `file_digest` for why that costs no re-read of an unchanged file."""
    if isinstance(model, (str, os.PathLike)):
        try:
            content = model_digest(Path(model))
        except OSError:
            return None
    elif isinstance(model, bytes):
        content = hashlib.sha256(model).hexdigest()
    else:
        return None
    try:
        opts = json.dumps({k: v for k, v in options.items() if k not in ("dump_dir",)}, sort_keys=True,
                          default=lambda o: sorted(o) if isinstance(o, (set, frozenset)) else _unkeyable())
    except TypeError:
        return None
    digest = hashlib.sha256(content.encode())
    digest.update(opts.encode())
    digest.update(package_fingerprint().encode())
    digest.update((isa.requested_level() or "native").encode())   # passes size kernels for the ISA level
    return digest.hexdigest()


RACY_NS = 2 * 10**9
SMALL_MODEL = 64 << 20   # bytes: a model file this small may keep its weights in external data files


def model_digest(path: Path) -> str:
    """The content hash of an ONNX file and of the external data files it names (looked for in files of
    up to SMALL_MODEL bytes: larger ones hold their weights themselves)."""
    facts = _remembered(path, "model", _model_facts)
    parts = [facts["sha256"]] + [file_digest(path.parent / name) for name in facts["external"]]
    return hashlib.sha256("|".join(parts).encode()).hexdigest() if len(parts) > 1 else facts["sha256"]


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (see `_remembered`)."""
    return _remembered(path, "file", lambda p: {"sha256": _sha256(p)})["sha256"]


def _model_facts(path: Path) -> dict:
    if path.stat().st_size > SMALL_MODEL:
        return {"sha256": _sha256(path), "external": []}
    data = path.read_bytes()
    external = sorted(_external_files(data)) if b"location" in data else []   # (the external-data key)
    return {"sha256": hashlib.sha256(data).hexdigest(), "external": external}


def _external_files(data: bytes) -> set[str]:
    import onnx
    from onnx import external_data_helper
    try:
        model = onnx.load_from_string(data)
    except Exception:   # noqa: BLE001 - not ONNX: the frontend will say so
        return set()
    tensors = getattr(external_data_helper, "_get_all_tensors", lambda m: m.graph.initializer)(model)
    return {entry.value for t in tensors if external_data_helper.uses_external_data(t)
            for entry in t.external_data if entry.key == "location"}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _remembered(path: Path, kind: str, facts: Callable[[Path], dict]) -> dict:
    """`facts(path)`, remembered in the cache under the file's absolute path, size, modification time and
    inode (as build tools do), so an unchanged file is read and hashed once, not at every compile."""
    st = path.stat()
    stamp = hashlib.sha256(f"{kind}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}".encode()).hexdigest()
    base = default_directory()
    # a file changed within the clock's resolution of now could change again under the same stamp (as
    # git's "racy" entries): computed, not remembered
    racy = time.time_ns() - st.st_mtime_ns < RACY_NS
    memo = None if base is None or racy else base.parent / "models" / "digests" / stamp
    try:
        if memo is not None and memo.exists():
            return json.loads(memo.read_text())
    except (OSError, ValueError):
        pass
    found = facts(path)
    if memo is not None:
        write_atomically(memo, json.dumps(found).encode())
    return found


MAGIC = b"SNIPJITM1\n"


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
        fields, entry = pickle_file.read(path, MAGIC)
    except Exception:   # noqa: BLE001 - damaged or stale: compile again
        return None
    return entry if fields.get("key") == key else None


def store(key: str, entry: dict) -> None:
    path = _path(key)
    if path is None:
        return
    try:
        pickle_file.write(path, entry, MAGIC, key=key)
    except Exception:   # noqa: BLE001 - a read-only disk or an unpicklable graph only costs the cache
        pass
