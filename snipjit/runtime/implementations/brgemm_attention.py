"""Attention blocks on a Snippets kernel with Brgemms: the calls the attention kernel does not take.

The attention kernel (`attention`) needs head sizes that are whole vectors and operands it can read
through strides. A call it refuses (tiny BERT's head size 8 on AVX-512, sizes such as 30) runs here before
falling back to node by node: the block without its movement ops (S = Q·Kᵀ, the scale and masks, the
softmax, P·V) goes through the Snippets compiler, whose ConvertMatMulToBrgemm makes both products Brgemm
expressions of the Linear IR. The kernel computes one query row per iteration of its domain; the row of
scores stays in the thread's scratchpad. Q, Kᵀ and V are copied to contiguous [batch, heads, rows, size]
arrays, and the result is written through the output's movement ops. Kernels are compiled per input
shapes (a Brgemm's own dims are static). What the kernel cannot take (grouped query heads, masks that
widen the batch) runs node by node (the reference kernel).
"""
from __future__ import annotations

import ctypes
import math
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...ir.graph import Graph, Node, TensorType
from ...ir.dtypes import dtype as to_dtype
from ...ops.infer_shapes import infer_shapes
from ...ops.registry import OpError
from ...passes.tokenize import make_body
from ...passes.tokenize_mha import MHAMatch
from ...snippets.subgraph_compiler import CompiledSnippet
from .attention import AttentionKernel, output_view, shapes_through, describe, operands
from .base import Kernel, NotApplicable, ReferenceKernel
from .snippet_compile import compile_body, launch_parallel

PARALLEL_MIN_MULTIPLY_ADDS = 1 << 17   # smaller blocks run on the calling thread


def core_body(block: MHAMatch, masks: list, name: str) -> Graph:
    """The block without its movement ops: inputs Q, Kᵀ, V (as the products read them) and the masks."""
    nodes = [block.scores, *block.between, block.softmax, *block.safe, block.context]
    inputs = [block.scores.inputs[0], block.scores.inputs[1], block.context.inputs[1], *masks]
    return make_body(inputs, [block.context.outputs[0]], nodes, name)


@dataclass
class _Launch:
    """A compiled core body for one signature of input shapes."""
    compiled: CompiledSnippet
    out_shape: tuple[int, ...]
    parallel: bool

    def run(self, arrays: list[np.ndarray], scratchpad) -> np.ndarray:
        out = np.empty(self.out_shape, np.float32)
        c = self.compiled
        ptrs = (ctypes.c_void_p * (len(arrays) + 1))(*[a.ctypes.data for a in arrays], out.ctypes.data)
        dims = (ctypes.c_int64 * len(c.master_shape))(*c.master_shape)
        domain = math.prod(c.master_shape[:c.parallel_rank])
        scratch_bytes = c.master_shape[-1] * 4 * c.scratch_rows
        if self.parallel:
            launch_parallel(c.kernel.fn, ptrs, dims, domain, scratch_bytes, scratchpad)
        else:
            c.kernel.fn(ptrs, dims, 0, domain, scratchpad(scratch_bytes))
        return out


class BrgemmAttention(Kernel):
    def __init__(self, node: Node, options: dict):
        self.node = node
        self.options = {k: v for k, v in options.items() if k != "checked"}   # (Brgemms are not bounds-checked)
        body = node.attrs["body"]
        self.block = describe(body)
        self.slot = {id(v): i for i, v in enumerate(body.inputs)}
        self.masks = [v for v in (self.block.mask, self.block.mask2, self.block.keep) if v is not None]
        self.core = core_body(self.block, self.masks, f"{body.name}_brgemm")
        self.reference = ReferenceKernel(node)
        self.launches: dict[tuple, _Launch | None] = {}
        self._lock = threading.Lock()
        self._scratch = threading.local()

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        out = self._run(inputs, None)
        return [out] if out is not None else self.reference(inputs)

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        if self._run(inputs, outputs[0]) is None:
            self.reference.run_into(inputs, outputs)

    def _run(self, inputs: Sequence[np.ndarray], out: np.ndarray | None) -> np.ndarray | None:
        """The block's result (written into `out` when given), or None when the kernel cannot serve it."""
        m = self.block
        try:
            q, kt, v, product, group = operands(m, self.slot, inputs)
        except ValueError:
            return None
        if group != 1:
            return None
        q = q * np.float32(m.operand_scale) if m.operand_scale != 1.0 else q
        arrays = [np.ascontiguousarray(a) for a in (q, kt, v, *(inputs[self.slot[id(x)]] for x in self.masks))]
        launch = self._launch_for(arrays)
        if launch is None or math.prod(launch.out_shape) != math.prod(product):
            return None
        result = launch.run(arrays, self._scratchpad).reshape(product)
        if out is None:
            out = np.empty(shapes_through(m.out_views, product)[-1], np.float32)
        try:
            target = output_view(out, m.out_views, product)
        except ValueError:
            return None
        target[...] = result
        return out

    def _launch_for(self, arrays: list[np.ndarray]) -> _Launch | None:
        signature = tuple((a.shape, a.dtype.str) for a in arrays)
        if signature not in self.launches:
            with self._lock:
                if signature not in self.launches:
                    self.launches[signature] = self._compile(arrays)
        return self.launches[signature]

    def _compile(self, arrays: list[np.ndarray]) -> _Launch | None:
        body = self.core.copy()
        for v, a in zip(body.inputs, arrays):
            v.type = TensorType(to_dtype(a.dtype), a.shape)
        for v in body.values():
            if v.producer is not None:
                v.type = None
        try:
            infer_shapes(body)
            compiled = compile_body(body, self.options)
        except (OpError, ValueError, NotApplicable):
            return None
        out_shape = tuple(body.outputs[0].type.shape)
        q, kt = arrays[0], arrays[1]
        work = math.prod(out_shape[:-1]) * kt.shape[-1] * (q.shape[-1] + out_shape[-1])
        return _Launch(compiled, out_shape, work >= PARALLEL_MIN_MULTIPLY_ADDS)

    def _scratchpad(self, nbytes: int) -> int | None:
        """The calling thread's scratchpad address, grown to `nbytes` when needed."""
        if not nbytes:
            return None
        pad = getattr(self._scratch, "pad", None)
        if pad is None or pad.nbytes < nbytes:
            pad = self._scratch.pad = np.empty(nbytes + 64, np.uint8)
        return pad.ctypes.data


def build_attention(node: Node, options: dict) -> Kernel:
    """An attention block's kernel: the attention kernel, falling back to the Snippets kernel with Brgemms
    (then to the reference)."""
    return AttentionKernel(node, fallback=BrgemmAttention(node, options))


__all__ = ["BrgemmAttention", "build_attention", "core_body"]
