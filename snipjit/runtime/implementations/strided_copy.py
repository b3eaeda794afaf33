"""Copy a NumPy view (Transpose, Slice, Expand) into planned memory with the generated strided-copy
kernel (`targets.llvm.copy`), split over the native pool; small copies stay with NumPy."""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

from ..caches.object_cache import native_kernel
from ..parallel.native_threads import NativeCall, get_native_pool

MIN_ELEMENTS = 1 << 14   # below this NumPy's copy is as fast and has no launch
RANK = 4                 # dims of the kernel: views are collapsed or padded to this


def _kernel(element_bytes: int) -> tuple[int, object]:
    from ...targets.llvm.copy import copy_module
    name = f"snipjit_copy_{element_bytes}"
    return _native(lambda: copy_module(name, element_bytes), name)


def _native(module, name: str) -> tuple[int, object]:
    from ...targets.llvm import jit
    host = jit.host()
    return native_kernel(module, name, host.cpu, host.features)


MAX_BLOCK = 2048   # elements of a block transposed as one vector shuffle (a channel shuffle's pixel)


def _block_transpose(shape: list[int], strides: list[int], size: int) -> bool:
    """A view that transposes the last two axes of contiguous blocks: [blocks, cols, rows] with strides
    [rows·cols, 1, cols] (f32)."""
    return (size == 4 and len(shape) == 3 and strides[1] == 1 and strides[2] == shape[1]
            and strides[0] == shape[1] * shape[2] and shape[1] * shape[2] <= MAX_BLOCK)


def _block_kernel(rows: int, cols: int) -> tuple[int, object]:
    from ...targets.llvm.copy import block_transpose_module
    name = f"snipjit_block_transpose_{rows}x{cols}"
    return _native(lambda: block_transpose_module(name, rows, cols), name)


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
    launch = prepare(view, out)
    if launch is None:
        return False
    launch.run()
    return True


@dataclass
class CopyLaunch:
    """One copy with its kernel arguments prepared (the destination must stay alive; the source view
    is held, in case the view op made it a new array)."""
    address: int
    ptrs: ctypes.Array
    dims: ctypes.Array
    rows: int
    source: np.ndarray

    def run(self) -> None:
        get_native_pool().run(self.address, ctypes.addressof(self.ptrs), ctypes.addressof(self.dims), self.rows)

    @property
    def native_call(self) -> NativeCall:
        return get_native_pool().call(self.address, ctypes.addressof(self.ptrs), ctypes.addressof(self.dims),
                                      self.rows)


def prepare(view: np.ndarray, out: np.ndarray) -> CopyLaunch | None:
    """The copy `out[...] = view` with its arguments prepared, or None when the kernel does not take it."""
    pool = get_native_pool()
    size = view.itemsize
    if (pool is None or view.size < MIN_ELEMENTS or view.dtype != out.dtype or view.size != out.size
            or not out.flags.c_contiguous or size not in (1, 2, 4, 8)
            or any(s % size for s in view.strides)):
        return None
    shape, strides = collapse(view.shape, tuple(s // size for s in view.strides))
    if _block_transpose(shape, strides, size):
        blocks, cols, rows = shape
        address, _ = _block_kernel(rows, cols)
        ptrs = (ctypes.c_void_p * 2)(view.ctypes.data, out.ctypes.data)
        return CopyLaunch(address, ptrs, (ctypes.c_int64 * 1)(0), blocks, view)
    if len(shape) > RANK:
        return None
    shape = [1] * (RANK - len(shape)) + shape
    strides = [0] * (RANK - len(strides)) + strides
    address, _ = _kernel(size)
    ptrs = (ctypes.c_void_p * 2)(view.ctypes.data, out.ctypes.data)
    dims = (ctypes.c_int64 * (2 * RANK + 1))(*shape, *strides, shape[-1])
    return CopyLaunch(address, ptrs, dims, shape[0] * shape[1] * shape[2], view)


def prepare_slice(x: np.ndarray, out: np.ndarray, axis: int, start: int) -> CopyLaunch | None:
    """The copy of a C-contiguous `x` into the slice of a C-contiguous `out` along `axis` from `start` (an
    input of a Concat into its place in the output), or None when the kernel does not take it: too small,
    other dtypes, or fewer rows (the dims before `axis`) than the pool has threads."""
    pool = get_native_pool()
    size = x.itemsize
    outer = math.prod(x.shape[:axis])
    if (pool is None or x.size < MIN_ELEMENTS or x.dtype != out.dtype or size not in (1, 2, 4, 8)
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or outer < pool.threads
            or x.shape[:axis] != out.shape[:axis] or x.shape[axis + 1:] != out.shape[axis + 1:]
            or not 0 <= start <= out.shape[axis] - x.shape[axis]):
        return None
    inner, after = x.size // outer, math.prod(x.shape[axis + 1:])
    address, _ = _kernel(size)
    ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data + start * after * size)
    dims = (ctypes.c_int64 * (2 * RANK + 1))(1, 1, outer, inner, 0, 0, inner, 1, out.shape[axis] * after)
    return CopyLaunch(address, ptrs, dims, outer, x)
