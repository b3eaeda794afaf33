"""The `int8` implementation: dynamically quantized products (`DynamicQuantizedMatMul`, which
`passes.float_integer_products` makes of ONNX Runtime's `quantize_dynamic` layers) on the int8 variant of
the GEMM microkernel (`targets.llvm.gemm_int8`), run on the native pool.

The int8 weights are packed once, panel by panel, each K step's `group` weights of a column next to each
other (4 bytes for VNNI's `vpdpbusd`, two 16-bit values for `pmaddwd`), with each column's sum for the
zero point. Which dot product: VNNI where the host has it at the AVX-512 level, else `pmaddwd` (AVX-512BW,
AVX2 or SSE2). Work items are chunks of rows; each quantizes its rows once and runs every panel on them.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...ir.graph import Node
from ...memory.solver import aligned_array
from ..caches.object_cache import native_kernel
from ..parallel.native_threads import get_native_pool, run_items, scratchpads
from . import gemm_launch
from .base import Implementation, Kernel, PreparedLaunch, ReferenceKernel
from .kernel_arguments import dim_array, pointer_array

DOMAIN = "snipjit.int8"
PARALLEL_MIN_MULTIPLY_ADDS = 1 << 18
ROW_BLOCKS_PER_CHUNK = 8   # row blocks a work item quantizes and runs over every panel


def kernel_shape(n: int, k: int):
    """The int8 kernel for a product n columns wide at the current ISA level: the f32 kernel's register
    block for it, VNNI or pairs."""
    from ...targets.llvm import jit
    from ...targets.llvm.gemm_int8 import Int8Kernel
    host = jit.host()
    block = gemm_launch.choose_kernel(n, k).shape
    vnni = host.level.vector_bits == 512 and host.has_feature("avx512vnni")
    return Int8Kernel(block.mr, block.vectors, block.lanes, "vnni" if vnni else "pairs")


@dataclass
class NativeCall:
    """A generated kernel (`KernelFunction` ABI) compiled for this host, with its arguments: `run()` computes
    work items [0, items) on the native pool (the arrays behind ptrs must stay alive and unchanged)."""
    name: str
    module: Callable[[], object]   # builds the kernel's LLVM module, when it is not cached
    ptrs: ctypes.Array
    dims: ctypes.Array
    items: int
    threads: int
    scratch: object

    def __post_init__(self):
        from ...targets.llvm import jit
        host = jit.host()
        self.address, self.fn = native_kernel(self.module, self.name, host.cpu, host.features)

    def run(self) -> None:
        run_items(self.address, self.fn, self.ptrs, self.dims, self.items, self.threads, self.scratch)


@dataclass(frozen=True)
class PackedInt8:
    """Int8 weights [K, N] packed for one kernel shape, with each column's sum."""
    data: np.ndarray     # bytes: [panels, Kp / group, NR, group] int8, or int16 pairs for "pairs"
    colsum: np.ndarray   # [panels · NR] float32
    k: int
    n: int
    shape: object        # Int8Kernel


def pack(w: np.ndarray, shape=None) -> PackedInt8:
    """w [K, N] int8 packed for `shape` (by default the kernel `kernel_shape` chooses)."""
    k, n = w.shape
    shape = shape or kernel_shape(n, k)
    kp, nr, group = shape.padded_k(k), shape.nr, shape.group
    panels = -(-n // nr)
    padded = np.zeros((kp, panels * nr), np.int8)
    padded[:k, :n] = w
    steps = padded.reshape(kp // group, group, panels, nr).transpose(2, 0, 3, 1)   # [panels, steps, NR, group]
    values = steps.astype(np.int16) if shape.dot == "pairs" else steps
    data = aligned_array(values.shape, values.dtype)
    data[...] = values
    colsum = padded.astype(np.int32).sum(0).astype(np.float32)
    return PackedInt8(data, colsum, k, n, shape)


@dataclass
class Int8Launch:
    """One product with its arguments; `run(scale, zero)` computes it for the activations' quantization
    parameters of this run (the arrays must stay alive and unchanged in layout)."""
    call: NativeCall
    params: np.ndarray
    packed: PackedInt8

    def run(self, scale: float, zero: float) -> None:
        self.params[0], self.params[1] = scale, zero
        self.call.run()


def prepare(x: np.ndarray, packed: PackedInt8, out: np.ndarray) -> Int8Launch | None:
    """The launch of out = (quantized x - zero) @ w, or None when the layouts are not taken (x: float32 rows
    with unit stride along K; out: C-contiguous float32)."""
    from ...targets.llvm.gemm_int8 import DIMS, PTRS, int8_gemm_module
    if (not gemm_launch.available() or x.dtype != np.float32 or out.dtype != np.float32 or x.ndim < 2
            or x.shape[-1] != packed.k or out.shape[-1] != packed.n or not out.flags.c_contiguous or out.size == 0):
        return None
    rows = gemm_launch._rows_view(x)
    if rows is None:
        return None
    m, ldx = rows
    shape = packed.shape
    kp = shape.padded_k(packed.k)
    pool = get_native_pool()
    threads = pool.threads if pool is not None and m * packed.n * packed.k >= PARALLEL_MIN_MULTIPLY_ADDS else 1
    blocks = -(-m // shape.mr)
    per_chunk = max(1, min(ROW_BLOCKS_PER_CHUNK, -(-blocks // (2 * threads)))) if threads > 1 else blocks
    chunk_rows = per_chunk * shape.mr
    chunks = -(-m // chunk_rows)
    params = np.zeros(2, np.float32)
    values = dict(M=m, K=packed.k, Kp=kp, N=packed.n, ldx=ldx, ldc=packed.n, panels=packed.data.shape[0],
                  chunks=chunks, chunk_rows=chunk_rows)
    ptrs = pointer_array(PTRS, X=x, B=packed.data, C=out, colsum=packed.colsum, params=params)
    dims = dim_array(DIMS, **values)
    call = NativeCall(shape.name, lambda: int8_gemm_module(shape), ptrs, dims, chunks, threads,
                      scratchpads(threads, chunk_rows * kp * shape.value_bytes))
    return Int8Launch(call, params, packed)


def _scalar(a: np.ndarray) -> float:
    return float(np.asarray(a).reshape(-1)[0])


class Int8MatMulKernel(Kernel):
    """DynamicQuantizedMatMul(x, scale, zero, w): its product on the int8 kernel (the weights packed once),
    else the reference kernel."""

    def __init__(self, node: Node):
        self.node = node
        self.reference = ReferenceKernel(node)
        self.packed = pack(node.inputs[3].data)

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        launch = prepare(inputs[0], self.packed, outputs[0])
        if launch is None:
            self.reference.run_into(inputs, outputs)
        else:
            launch.run(_scalar(inputs[1]), _scalar(inputs[2]))

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        out = np.empty(inputs[0].shape[:-1] + (self.packed.n,), np.float32)
        self.run_into(inputs, [out])
        return [out]

    def bind(self, in_shapes, fixed, n_outputs) -> PreparedLaunch:
        """The launch prepared once for the arrays of a first call; each run reads this run's scale and
        zero point."""
        def prepare_call(arrays: list):
            launch = prepare(arrays[0], self.packed, arrays[-1])
            if launch is None:
                return None
            return lambda current: launch.run(_scalar(current[1]), _scalar(current[2]))

        return PreparedLaunch(prepare_call, lambda arrays: self.run_into(arrays[:-1], arrays[-1:]))


def accepts_int8(node: Node, options: dict) -> bool:
    return (node.domain == DOMAIN and node.op == "DynamicQuantizedMatMul" and gemm_launch.available()
            and node.inputs[3].is_constant)


INT8 = Implementation("int8", accepts_int8, lambda node, options: Int8MatMulKernel(node))

__all__ = ["DOMAIN", "INT8", "Int8Launch", "Int8MatMulKernel", "NativeCall", "PackedInt8", "pack", "prepare"]
