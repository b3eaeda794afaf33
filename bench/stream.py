"""The stream limit: bench/stream.c compiled with gcc at benchmark time into bench/.cache/ (keyed by
source, flags and compiler) and called through ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

SOURCE = Path(__file__).with_name("stream.c")
CACHE_DIR = Path(__file__).resolve().parent / ".cache"
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")  # never -ffast-math


class CompilerMissing(RuntimeError):
    pass


def _compiler() -> str:
    for name in ("gcc-12", "gcc"):
        path = shutil.which(name)
        if path:
            return path
    raise CompilerMissing("gcc is needed to build the stream-limit kernel")


def library() -> ctypes.CDLL:
    compiler = _compiler()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, version]).encode()).hexdigest()[:16]
    path = CACHE_DIR / f"stream-{key}.so"
    if not path.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(partial)], check=True)
        partial.replace(path)
    lib = ctypes.CDLL(str(path))
    lib.stream_sum.restype = None
    lib.stream_sum.argtypes = [
        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
        ctypes.c_ssize_t, ctypes.c_int,
    ]
    return lib


def bind(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], threads: int) -> Callable[[], None]:
    """A call streaming these C-contiguous float32 arrays, all of one size, with arguments bound once."""
    arrays = [*inputs, *outputs]
    if not inputs or any(a.dtype != np.float32 or not a.flags.c_contiguous or a.size != arrays[0].size for a in arrays):
        raise ValueError("the stream kernel takes inputs and outputs: C-contiguous float32 arrays of one size")
    ins = (ctypes.c_void_p * len(inputs))(*[a.ctypes.data for a in inputs])
    outs = (ctypes.c_void_p * len(outputs))(*[a.ctypes.data for a in outputs])
    function, size = library().stream_sum, arrays[0].size
    return lambda: function(ins, len(inputs), outs, len(outputs), size, threads)
