"""C sources of the benchmark (the stream limit, the hand-written kernels) compiled with gcc at benchmark
time into bench/.cache/, keyed by source, flags and compiler, and loaded with ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CACHE_DIR = Path(__file__).resolve().parent / ".cache"
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")  # never -ffast-math


class CompilerMissing(RuntimeError):
    pass


def _compiler() -> str:
    for name in ("gcc-12", "gcc"):
        path = shutil.which(name)
        if path:
            return path
    raise CompilerMissing("gcc is needed to build the benchmark's C kernels")


def build(source: Path) -> ctypes.CDLL:
    """The shared library of `source`, compiled once per source text, flags and compiler version."""
    compiler = _compiler()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join([source.read_text(), *FLAGS, version]).encode()).hexdigest()[:16]
    path = CACHE_DIR / f"{source.stem}-{key}.so"
    if not path.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([compiler, *FLAGS, str(source), "-o", str(partial), "-lm"], check=True)
        partial.replace(path)
    return ctypes.CDLL(str(path))


def pointer(array) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data)
