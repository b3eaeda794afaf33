"""Keep NumPy's BLAS single-threaded inside snipjit: its products are split over snipjit's own pool.

NumPy ships OpenBLAS, which starts one thread per core for every large product and lets them spin
after it; snipjit's pool runs kernels on the same cores, so both together would oversubscribe them (on
2 cores, a step after a product can take milliseconds instead of microseconds). snipjit therefore sets
OpenBLAS to one thread (its thread-local setting, on snipjit's threads and, for the duration of a
run, on the caller's) and parallelises large products itself (`implementations.blas.parallel_matmul`). Without a
thread-local OpenBLAS, BLAS keeps its defaults and products are not split.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading

import numpy as np


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


def available() -> bool:
    return _setter is not None


def single_threaded_here() -> None:
    """One BLAS thread for the calling thread from now on (snipjit's own worker threads)."""
    if _setter is not None:
        _setter(1)


class single_threaded:
    """One BLAS thread for the calling thread while a run lasts; its previous setting is restored."""
    _local = threading.local()

    def __enter__(self):
        if _setter is not None:
            depth = getattr(self._local, "depth", 0)
            if depth == 0:
                self._local.previous = _setter(1)
            self._local.depth = depth + 1

    def __exit__(self, *exc):
        if _setter is not None:
            self._local.depth -= 1
            if self._local.depth == 0:
                _setter(self._local.previous)
