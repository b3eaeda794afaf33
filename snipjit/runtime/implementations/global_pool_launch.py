"""GlobalAveragePool and GlobalMaxPool on NHWC tensors, on the generated global pooling kernel
(`targets.llvm.global_pool`).

With fewer images than threads, each image's pixels are cut into as many bands as give every thread one: the
threads reduce their bands into partial results (each reading rows its own core wrote, where the producer split
the image by rows too), and a second call of the same kernel reduces an image's partials, on one thread. (Xeon,
AVX-512, 2 threads: EfficientNet-B0 1.03x faster than with its 16 global pools on the sliding-window kernel; cut
into channel chunks instead of bands, 1.03x slower, though alone, with warm caches, chunks measured as fast.)
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ...memory.solver import aligned_empty
from ...targets.llvm.global_pool import DIMS, PTRS, GlobalPoolShape
from ..caches.object_cache import NativeJob
from ..parallel.native_threads import NativeCall, get_native_pool, native_call, runner
from .gemm_launch import available
from .kernel_arguments import dim_array, pointer_array

PARALLEL_MIN_ELEMENTS = 1 << 16   # smaller inputs run on the calling thread (a second thread's wake-up costs more)


@dataclass(frozen=True)
class CompiledGlobalPool:
    """One global pooling kernel for one ISA level (compiled on first use)."""
    shape: GlobalPoolShape
    cpu: str
    features: str

    @property
    def job(self) -> NativeJob:
        return NativeJob("global_pool:global_pool_module", self.shape, self.cpu, self.features)


def kernel_for(kind: str) -> CompiledGlobalPool:
    """The kernel of `kind` ("avg" or "max") at the current ISA level."""
    from ...targets.llvm import jit
    host = jit.host()
    shape = GlobalPoolShape("max" if kind == "max" else "mean", host.level.f32_lanes, host.level.vector_registers,
                            host.level.fused_multiply_add)
    return CompiledGlobalPool(shape, host.cpu, host.features)


@dataclass
class GlobalPoolCall:
    """One call of the kernel over `items` work items, its arguments prepared (holding the arrays it reads and
    writes but x and the output: a step may keep its calls alone)."""
    kernel: CompiledGlobalPool
    ptrs: ctypes.Array
    dims: ctypes.Array
    items: int
    threads: int
    repeats: bool
    held: tuple

    def __post_init__(self):
        address, fn = self.kernel.job.kernel()
        pool = get_native_pool()
        grain = -(-self.items // max(1, self.threads))
        self.native_call: NativeCall = native_call(pool, address, ctypes.addressof(self.ptrs),
                                                   ctypes.addressof(self.dims), self.items, grain,
                                                   parallel=self.threads > 1)
        self._run = runner(pool, self.native_call, fn, self.repeats)

    def run(self) -> None:
        self._run()


@dataclass
class GlobalPoolLaunch:
    """A global pool with its calls prepared (the bands' partials, then their reduction, or one call): `run()`
    computes it again into the same memory (x and out must stay alive; the partials and parameters are held)."""
    native_launches: tuple

    def run(self) -> None:
        for call in self.native_launches:
            call.run()


def prepare_global_pool(kind: str, x: np.ndarray, out: np.ndarray, repeats: bool = False) -> GlobalPoolLaunch | None:
    """out [N, 1, 1, C] = the mean (`kind` "avg") or maximum ("max") of x [N, H, W, C] over H and W (out may be a
    slice of a wider tensor's channels); None when the JIT is not available or there is nothing to compute (no
    output, or no pixels)."""
    if kind not in ("max", "avg"):
        raise ValueError(f"pool kind must be 'max' or 'avg', got {kind!r}")
    for name, a in (("x", x), ("out", out)):
        if not isinstance(a, np.ndarray) or a.ndim != 4 or a.dtype != np.float32 or (a.size and a.strides[3] != 4):
            raise ValueError(f"the global pool's {name} must be a float32 NHWC array with contiguous channels, got "
                             f"{getattr(a, 'dtype', type(a).__name__)}{list(getattr(a, 'shape', []))}")
    n, h, w, c = x.shape
    if out.shape != (n, 1, 1, c):
        raise ValueError(f"the global pool of {list(x.shape)} is [{n}, 1, 1, {c}], not {list(out.shape)}")
    if not x.flags.c_contiguous:
        raise ValueError("the global pool's input must be C-contiguous")
    if not available() or out.size == 0 or h * w == 0:
        return None   # (an empty image's mean is NaN: the reference's)
    kernel, pixels, image_stride = kernel_for(kind), h * w, out.strides[0] // 4
    pool = get_native_pool()
    threads = pool.threads if pool is not None and x.size >= PARALLEL_MIN_ELEMENTS else 1
    mean = np.array([1.0 / pixels], np.float32)
    band = -(-pixels // min(pixels, -(-threads // n)))   # (fewer images than threads: a band of each per thread)
    bands = -(-pixels // band)
    if bands == 1:
        return GlobalPoolLaunch((_call(kernel, x, out, mean, pixels, c, pixels, 1, c, pixels * c, 0, image_stride, n,
                                       threads, repeats),))
    stride = -(-c // 16) * 16   # (a partial's channels start on a cache line)
    partials = aligned_empty(n * bands * stride * 4).view(np.float32)
    first = _call(kernel, x, partials, np.ones(1, np.float32), pixels, c, band, bands, c, pixels * c, stride,
                  bands * stride, n * bands, threads, repeats, partials)
    second = _call(kernel, partials, out, mean, bands, c, bands, 1, stride, bands * stride, 0, image_stride, n, 1,
                   repeats, partials)
    return GlobalPoolLaunch((first, second))


def _call(kernel: CompiledGlobalPool, x: np.ndarray, y: np.ndarray, params: np.ndarray, pixels: int, c: int,
          band: int, bands: int, x_pixel: int, x_image: int, y_band: int, y_image: int, items: int, threads: int,
          repeats: bool, partials: np.ndarray | None = None) -> GlobalPoolCall:
    ptrs = pointer_array(PTRS, x=x, y=y, params=params)
    dims = dim_array(DIMS, pixels=pixels, C=c, band=band, bands=bands, x_pixel=x_pixel, x_image=x_image,
                     y_band=y_band, y_image=y_image)
    return GlobalPoolCall(kernel, ptrs, dims, items, min(threads, items), repeats, (params, partials))
