"""How many threads NumPy's BLAS may use for a product, so BLAS and snipjit do not oversubscribe cores.

NumPy ships OpenBLAS, which by default starts one thread per core for every large product. snipjit
asks it per calling thread (OpenBLAS's thread-local setting): all cores for a large product while a
single request runs; one thread for small products (thread start-up costs more than it saves) and
while several requests run at once (each already has a core). Without a thread-local OpenBLAS the
policy is not applied and BLAS keeps its own defaults.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading

import numpy as np

from .thread_pool import default_threads

SMALL_PRODUCT = 1 << 21   # multiply-adds: below this, one thread


def _find_local_setter():
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "*openblas*.so*"))):
        try:
            fn = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local")
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        return fn
    return None


_setter = _find_local_setter()
_local = threading.local()
_active = 0
_active_lock = threading.Lock()


class running:
    """Context manager counting the requests that run right now."""

    def __enter__(self):
        global _active
        with _active_lock:
            _active += 1

    def __exit__(self, *exc):
        global _active
        with _active_lock:
            _active -= 1


def for_product(multiply_adds: int) -> None:
    """Set this thread's BLAS threads for a product of that size (a no-op when unchanged)."""
    if _setter is None:
        return
    n = 1 if multiply_adds < SMALL_PRODUCT or _active > 1 else default_threads()
    if getattr(_local, "threads", None) != n:
        _setter(n)
        _local.threads = n


def available() -> bool:
    return _setter is not None
