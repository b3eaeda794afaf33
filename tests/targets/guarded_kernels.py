"""Compiling a body for a target and running its kernel with guarded outputs, for the target tests."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from sample_graphs import WIDE  # noqa: F401  (the target tests take it from here)
from snipjit import parse_graph
from snipjit.snippets.subgraph_compiler import CompiledSnippet, compile_subgraph
from snipjit.snippets.target_machine import TargetMachine

GUARD = 64   # elements after each output buffer (at least two vectors of any target) that must stay untouched
SENTINEL = {np.dtype(np.float32): np.float32(-12345.5), np.dtype(np.bool_): np.True_}


@dataclass
class Kernel:
    compiled: CompiledSnippet
    out_dtypes: list[np.dtype]

    def run(self, inputs: list[np.ndarray], master: tuple[int, ...],
            ranges: list[tuple[int, int]] | None = None) -> list[np.ndarray]:
        """Run on `inputs` (rank-aligned to the body inputs by leading 1s) for the run-time `master` shape,
        over the parallel-domain `ranges` (default: all of it) one after the other. Outputs start filled
        with a sentinel and are followed by guard elements that must stay untouched."""
        cs, rank = self.compiled, len(master)
        arrays = [np.ascontiguousarray(a.reshape((1,) * (rank - a.ndim) + a.shape)) for a in inputs]
        buffers, outs = [], []
        for compiled_shape, dt in zip(cs.output_shapes, self.out_dtypes):
            shape = tuple(1 if d == 1 else n for d, n in zip(compiled_shape, master))
            buf = np.full(int(np.prod(shape)) + GUARD, SENTINEL[dt], dt)
            buffers.append(buf)
            outs.append(buf[:buf.size - GUARD].reshape(shape))
        ptrs = (ctypes.c_void_p * (len(arrays) + len(buffers)))(*[a.ctypes.data for a in arrays],
                                                                 *[b.ctypes.data for b in buffers])
        dims = (ctypes.c_int64 * rank)(*master)
        scratch = np.zeros(max(1, cs.scratch_rows * master[-1]) + GUARD, np.float32)
        for begin, end in ranges if ranges is not None else [(0, self.domain(master))]:
            cs.kernel.fn(ptrs, dims, begin, end, scratch.ctypes.data)
        for i, buf in enumerate(buffers):
            assert np.all(buf[buf.size - GUARD:] == SENTINEL[buf.dtype]), \
                f"output {i}: the kernel wrote past the end of its buffer"
        return outs

    def domain(self, master: tuple[int, ...]) -> int:
        return int(np.prod(master[:self.compiled.parallel_rank], dtype=np.int64))


def compile_body(text: str, target: TargetMachine, loop_depth: int = 1) -> Kernel:
    graph = parse_graph(text)
    cs = compile_subgraph(graph, target, name="test_kernel", loop_depth=loop_depth)
    return Kernel(cs, [np.dtype(v.type.dtype.np) for v in graph.outputs])
