"""Copy a NumPy view (Transpose, Slice, Expand) into planned memory with the generated strided-copy
kernel (`targets.llvm.copy`), split over the native pool; small copies stay with NumPy."""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from .native_pool import compile_kernel, get_native_pool

MIN_ELEMENTS = 1 << 14   # below this NumPy's copy is as fast and has no launch
RANK = 4                 # dims of the kernel: views are collapsed or padded to this


@functools.cache
def _kernel(element_bytes: int) -> tuple[int, object]:
    from ..targets.llvm.copy import copy_module
    name = f"snipjit_copy_{element_bytes}"
    return compile_kernel(copy_module(name, element_bytes), name)


def collapse(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Merge neighbouring dims that step through memory as one (and drop size-1 dims)."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    merged: list[list[int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == s * n:
            merged[-1] = [merged[-1][0] * n, s]
        else:
            merged.append([n, s])
    return [n for n, _ in merged] or [1], [s for _, s in merged] or [1]


def copy_into(view: np.ndarray, out: np.ndarray) -> bool:
    """out[...] = view for a C-contiguous `out` of the same dtype and size; False when not taken."""
    pool = get_native_pool()
    size = view.itemsize
    if (pool is None or view.size < MIN_ELEMENTS or view.dtype != out.dtype or view.size != out.size
            or not out.flags.c_contiguous or size not in (1, 2, 4, 8)
            or any(s % size for s in view.strides)):
        return False
    shape, strides = collapse(view.shape, tuple(s // size for s in view.strides))
    if len(shape) > RANK:
        return False
    shape = [1] * (RANK - len(shape)) + shape
    strides = [0] * (RANK - len(strides)) + strides
    address, _ = _kernel(size)
    ptrs = (ctypes.c_void_p * 2)(view.ctypes.data, out.ctypes.data)
    dims = (ctypes.c_int64 * (2 * RANK))(*shape, *strides)
    pool.run(address, ctypes.addressof(ptrs), ctypes.addressof(dims), shape[0] * shape[1] * shape[2])
    return True
