"""Channels-last LRN on its generated kernel (`targets.llvm.lrn`): one pass over the tensor, split by
pixels over the native pool, each thread with its own scratchpad for a pixel's squares."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ...targets.llvm.lrn import DIMS, PTRS, LrnShape, lrn_module
from ..caches.object_cache import native_kernel
from ..parallel.native_threads import NativeCall, Scratchpads, get_native_pool, native_call, runner, scratchpads
from .gemm_launch import available
from .kernel_arguments import dim_array, pointer_array

PARALLEL_MIN_ELEMENTS = 1 << 15   # smaller tensors run on the calling thread


@dataclass(frozen=True)
class CompiledLrn:
    """One LRN kernel for one ISA level (compiled on first use)."""
    shape: LrnShape
    cpu: str
    features: str


def kernel_for(size: int, beta: float) -> CompiledLrn:
    """The kernel for windows of `size` channels and exponent `beta` at the current ISA level."""
    from ...targets.llvm import jit
    host = jit.host()
    shape = LrnShape(int(size), float(np.float32(beta)), host.level.f32_lanes, host.level.fused_multiply_add)
    return CompiledLrn(shape, host.cpu, host.features)


def _compiled(kernel: CompiledLrn) -> tuple[int, object]:
    return native_kernel(lambda: lrn_module(kernel.shape), kernel.shape.name, kernel.cpu, kernel.features)


@dataclass
class LrnLaunch:
    """One LRN with its kernel arguments prepared: `run()` computes it again into the same memory (x and y
    must stay alive; the parameters and scratchpads are held here)."""
    kernel: CompiledLrn
    ptrs: ctypes.Array
    dims: ctypes.Array
    items: int
    threads: int
    scratch: Scratchpads
    held: tuple

    def __post_init__(self):
        address, fn = _compiled(self.kernel)
        pool = get_native_pool()
        self.native_call: NativeCall = native_call(pool, address, ctypes.addressof(self.ptrs),
                                                   ctypes.addressof(self.dims), self.items, 0, self.scratch.base,
                                                   self.scratch.stride, self.threads > 1)
        self._run = runner(pool, self.native_call, fn, repeats=True)

    def run(self) -> None:
        self._run()


def prepare_lrn(x: np.ndarray, y: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> LrnLaunch | None:
    """y = LRN of x across its last axis (the channels of an NHWC tensor); None when the JIT is not
    available or there is nothing to compute."""
    for name, a in (("x", x), ("y", y)):
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous or a.ndim < 2:
            raise ValueError(f"LRN's {name} must be a C-contiguous float32 array of rank 2 or more, got "
                             f"{getattr(a, 'dtype', type(a).__name__)}{list(getattr(a, 'shape', []))}")
    if x.shape != y.shape:
        raise ValueError(f"LRN's output {list(y.shape)} must have the input's shape {list(x.shape)}")
    if size < 1:
        raise ValueError(f"LRN size must be positive, got {size}")
    if not available() or x.size == 0:
        return None
    kernel = kernel_for(size, beta)
    channels = x.shape[-1]
    pool = get_native_pool()
    threads = pool.threads if pool is not None and x.size >= PARALLEL_MIN_ELEMENTS else 1
    params = np.array([alpha / size, bias], np.float32)
    scratch = scratchpads(threads, kernel.shape.scratch_floats(channels) * 4)
    ptrs = pointer_array(PTRS, x=x, y=y, params=params)
    dims = dim_array(DIMS, C=channels)
    return LrnLaunch(kernel, ptrs, dims, x.size // channels, threads, scratch, (x, y, params))
