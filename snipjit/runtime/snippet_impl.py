"""The `snippet` implementation: a Subgraph node runs as one generated kernel.

At compile time the body goes through the Snippets compiler. At run time the step binds the master
shape from the input shapes, checks it fits what the kernel was compiled for (which dims broadcast),
allocates the outputs, and splits the kernel's parallel domain over the thread pool. A shape the kernel
cannot serve (a dim broadcasting at run time that was not known to at compile time) runs on the
reference kernels instead — correct, only slower.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Sequence

import numpy as np

from ..ir.graph import Node
from ..snippets.compiler import CompiledSnippet, compile_subgraph
from ..snippets.lowered.linear_ir import LinearIRError
from ..targets.target import TargetError
from .kernel_cache import cache_key, get_kernel_cache
from .implementations import Implementation, Kernel, NotApplicable, build_reference, register_implementation
from .thread_pool import get_pool

PARALLEL_MIN_ELEMENTS = 1 << 15   # below this, splitting across threads costs more than it gains


class SnippetKernel(Kernel):
    def __init__(self, node: Node, compiled: CompiledSnippet, fallback):
        self.node = node
        self.compiled = compiled
        self.fallback = fallback
        self.rank = len(compiled.master_shape)
        self.out_dtypes = [o.type.dtype.np for o in node.outputs]
        self.out_ranks = [len(o.type.shape) for o in node.outputs]
        self.out_broadcast = [[d == 1 for d in shape] for shape in compiled.output_shapes]
        self.fn = compiled.kernel.fn
        self.calls = 0
        self._scratch = threading.local()   # each thread that runs a chunk has its own scratchpad

    def master_shape(self, arrays: Sequence[np.ndarray]) -> tuple[int, ...] | None:
        """The run-time master shape, or None when the inputs break the compile-time broadcast pattern."""
        rank = self.rank
        master = [1] * rank
        aligned = []
        for a in arrays:
            shape = (1,) * (rank - a.ndim) + a.shape
            aligned.append(shape)
            for d, n in enumerate(shape):
                if n != 1:
                    if master[d] not in (1, n):
                        return None
                    master[d] = n
        for shape, compiled in zip(aligned, self.compiled.input_shapes):
            for d, (n, c) in enumerate(zip(shape, compiled)):
                if (c == 1) != (n == 1) and master[d] != 1:
                    return None
        return tuple(master)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.ascontiguousarray(a) for a in inputs]
        master = self.master_shape(arrays)
        if master is None:
            return self.fallback(inputs)
        outs = [np.empty(tuple(1 if b else n for b, n in zip(bcast, master)), dt)
                 for bcast, dt in zip(self.out_broadcast, self.out_dtypes)]
        if 0 not in master:
            self._launch(arrays, outs, master)
        return [o.reshape(o.shape[self.rank - r:]) for o, r in zip(outs, self.out_ranks)]

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in inputs]
        master = self.master_shape(arrays)
        if master is None:
            super().run_into(inputs, outputs)
        elif 0 not in master:
            self._launch(arrays, outputs, master)

    def _launch(self, arrays: Sequence[np.ndarray], outs: Sequence[np.ndarray], master: tuple[int, ...]) -> None:
        ptrs = (ctypes.c_void_p * (len(arrays) + len(outs)))(*[a.ctypes.data for a in arrays],
                                                              *[o.ctypes.data for o in outs])
        dims = (ctypes.c_int64 * self.rank)(*master)
        domain = 1
        for d in master[:self.compiled.parallel_rank]:
            domain *= d
        fn = self.fn
        self.calls += 1
        row_bytes = master[-1] * 4 * self.compiled.scratch_rows
        if int(np.prod(master)) < PARALLEL_MIN_ELEMENTS:
            fn(ptrs, dims, 0, domain, self._scratchpad(row_bytes))
        else:
            get_pool().parallel_for(lambda lo, hi: fn(ptrs, dims, lo, hi, self._scratchpad(row_bytes)), domain)

    def _scratchpad(self, nbytes: int) -> int | None:
        """The calling thread's scratchpad address, grown to `nbytes` when needed."""
        if not nbytes:
            return None
        pad = getattr(self._scratch, "pad", None)
        if pad is None or pad.nbytes < nbytes:
            pad = self._scratch.pad = np.empty(nbytes + 64, np.uint8)
        return pad.ctypes.data


def build_snippet(node: Node, options: dict):
    from ..targets import get_target
    target = get_target(options.get("target"))
    body, loop_depth = node.attrs["body"], options.get("loop_depth", 1)
    key = cache_key(body, target, {"loop_depth": loop_depth})
    try:
        compiled = get_kernel_cache().get_or_compile(
            key, target, lambda: compile_subgraph(body, target, name="kernel_" + key[:16], loop_depth=loop_depth))
    except (LinearIRError, TargetError) as e:
        raise NotApplicable(str(e)) from e
    return SnippetKernel(node, compiled, build_reference(node, options))


register_implementation(Implementation("snippet", 100, lambda node, options: node.op == "Subgraph", build_snippet))

__all__ = ["SnippetKernel", "build_snippet"]
