"""Hand-written C kernels of the row-reduction workloads (bench/handwritten.c), built by `bench.native`:
the same work and numerics as snipjit's kernels, written by hand, to measure against the stream limit."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Callable

import numpy as np

from bench.native import build, pointer

SOURCE = Path(__file__).with_name("handwritten.c")
Call = Callable[[], None]


@functools.cache
def library() -> ctypes.CDLL:
    lib = build(SOURCE)
    size, ptr = ctypes.c_ssize_t, ctypes.c_void_p
    lib.softmax_rows.restype = lib.add_layernorm_rows.restype = None
    lib.softmax_rows.argtypes = [ptr, ptr, size, size, ctypes.c_int]
    lib.add_layernorm_rows.argtypes = [ptr, ptr, ptr, ptr, ptr, size, size, ctypes.c_float, ctypes.c_int]
    return lib


def _rows(name: str, *arrays: np.ndarray) -> tuple[int, int]:
    """(rows, row length) of same-shaped C-contiguous float32 arrays whose rows are 16-float multiples."""
    shape = arrays[0].shape
    for a in arrays:
        if a.dtype != np.float32 or not a.flags.c_contiguous or a.shape != shape:
            raise ValueError(f"{name}: takes C-contiguous float32 arrays of one shape, got {a.dtype}{list(a.shape)}")
    n = shape[-1]
    if n % 16:
        raise ValueError(f"{name}: the row length must be a multiple of 16, got {n}")
    return arrays[0].size // n, n


def softmax(x: np.ndarray, out: np.ndarray, threads: int) -> Call:
    """Softmax over the last axis of x into out."""
    rows, n = _rows("softmax", x, out)
    return _bound(library().softmax_rows, [x, out], rows, n, threads)


def add_layernorm(x: np.ndarray, residual: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray,
                  epsilon: float, threads: int) -> Call:
    """LayerNormalization(x + residual) over the last axis, scaled by gamma and shifted by beta, into out."""
    rows, n = _rows("add_layernorm", x, residual, out)
    for name, weight in (("gamma", gamma), ("beta", beta)):
        if weight.shape != (n,) or weight.dtype != np.float32:
            raise ValueError(f"add_layernorm: {name} must be float32[{n}], got {weight.dtype}{list(weight.shape)}")
    return _bound(library().add_layernorm_rows, [x, residual, gamma, beta, out], rows, n, epsilon, threads)


def _bound(function, arrays: list[np.ndarray], *scalars) -> Call:
    """function(pointers of arrays..., scalars...), holding the arrays as long as the call lives."""
    args = (*map(pointer, arrays), *scalars)
    return lambda: (function(*args), arrays)[0]
