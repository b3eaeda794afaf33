"""A pickle whose large arrays sit page-aligned after it, each with a checksum: the compiled-model cache's
entries and saved compiled models (artifacts) are such files.

Layout: MAGIC, the head's length (8 bytes, little-endian), the head (a pickle of the body's pickle, the
body's CRC-32 and, per out-of-band buffer, its offset, size and CRC-32, plus the caller's fields), then
each buffer at a page-aligned offset. Reading a file maps it: arrays come back read-only, views of the
mapping, so weights are neither copied nor read twice. Every checksum is verified before anything is
unpickled: a truncated or damaged file raises `PickleFileError`, never yields wrong weights. Like any
pickle, such a file is code: read only files you made or trust.
"""
from __future__ import annotations

import io
import mmap
import os
import pickle
import tempfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO

ALIGN = 4096   # out-of-band buffers start on a page


class PickleFileError(ValueError):
    """The file is not one of these, is truncated, or its bytes were changed."""


def _write(f: BinaryIO, obj: Any, magic: bytes, fields: dict) -> None:
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    crcs = [zlib.crc32(raw) for raw in raws]
    first = 0
    while True:   # the head records where the buffers go, which depends on the head's own length
        spans, offset = [], first
        for raw, crc in zip(raws, crcs):
            spans.append((offset, raw.nbytes, crc))
            offset += -(-raw.nbytes // ALIGN) * ALIGN
        head = pickle.dumps({**fields, "body": body, "crc": zlib.crc32(body), "buffers": spans}, protocol=5)
        preamble = magic + len(head).to_bytes(8, "little") + head
        if not raws or len(preamble) <= first:
            break
        first = -(-len(preamble) // ALIGN) * ALIGN
    f.write(preamble)
    end = len(preamble)
    for (start, size, _), raw in zip(spans, raws):
        f.write(b"\0" * (start - end))
        f.write(raw)
        end = start + size


def write(path: Path, obj: Any, magic: bytes, **fields) -> None:
    """Pickle `obj` into `path` atomically (readers see the old file or the whole new one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            _write(f, obj, magic, fields)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def dumps(obj: Any, magic: bytes, **fields) -> bytes:
    f = io.BytesIO()
    _write(f, obj, magic, fields)
    return f.getvalue()


def read(path: Path, magic: bytes) -> tuple[dict, Any]:
    """(the head's fields, the object) of the file at `path`, its buffers mapped from the file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < len(magic) + 8:
            raise PickleFileError(f"{path}: {size} bytes, too short to be a snipjit file")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return loads(memoryview(data), magic, str(path))


def loads(data: bytes | memoryview, magic: bytes, where: str = "the data") -> tuple[dict, Any]:
    data = memoryview(data)
    if bytes(data[:len(magic)]) != magic:
        raise PickleFileError(f"{where} is not a {magic.strip().decode(errors='replace')} file "
                              f"(it starts with {bytes(data[:len(magic)])!r})")
    start = len(magic) + 8
    length = int.from_bytes(data[len(magic):start], "little")
    if start + length > len(data):
        raise PickleFileError(f"{where} is truncated: its head needs {start + length} bytes, it has {len(data)}")
    try:
        head = pickle.loads(data[start:start + length])
        body, crc, spans = head["body"], head["crc"], head["buffers"]
    except Exception as e:   # noqa: BLE001 - any failure here is a damaged head
        raise PickleFileError(f"{where}: damaged head ({type(e).__name__}: {e})") from None
    if zlib.crc32(body) != crc:
        raise PickleFileError(f"{where}: damaged (the checksum of its graph and kernels differs)")
    views = []
    for i, (offset, size, buffer_crc) in enumerate(spans):
        if offset + size > len(data):
            raise PickleFileError(f"{where} is truncated: array {i} ends at byte {offset + size}, "
                                  f"the file has {len(data)}")
        view = data[offset:offset + size]
        if zlib.crc32(view) != buffer_crc:
            raise PickleFileError(f"{where}: damaged (the checksum of array {i}, {size} bytes, differs)")
        views.append(view)
    fields = {k: v for k, v in head.items() if k not in ("body", "crc", "buffers")}
    return fields, pickle.loads(body, buffers=views)
