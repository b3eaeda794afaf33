"""Attention blocks on a Snippets kernel with Brgemms: the blocks and calls the attention kernel does not
take.

The attention kernel (`attention`) covers the scales, masks, soft caps and softmax of the common exports,
on head sizes that are whole vectors and operands it can read through strides. A block with other
elementwise ops on the scores (`MHAMatch.others`), and a call the attention kernel refuses (head sizes
that are not whole vectors — on AVX-512, of 256 bits —, such as 18 or 30, or 12 and 20 on AVX2), run here
before falling back to node by node.

The block without its movement ops (S = Q·Kᵀ, the scale and masks, the softmax, P·V) goes through the
Snippets compiler: ConvertMatMulToBrgemm makes both products Brgemm expressions of the Linear IR, and
FuseTransposeBrgemm makes the head split of Q and V and the head merge of the result layouts, so the
kernel reads the projections and writes the merged heads in place. The kernel computes all query rows of
a head per iteration of its domain, their scores in the thread's scratchpad, reading Kᵀ from K's rows
through a BrgemmCopyB that packs it once per head; past `brgemm_blocks.BLOCK_ELEMENTS` scores a head,
SplitDimensionM makes that a block of rows per iteration, and Kᵀ is copied here once instead (packed per
block it would cost as much as the product); with no block of rows to split, a row per iteration. Key and
value heads shared by groups of query heads (grouped-query attention) are read from copies with each head
repeated for its group. Kernels are compiled per input shapes but the batch (a Brgemm's own dims are
static): compiled at batch COMPILED_BATCH, a kernel runs any batch. What the kernel cannot take (masks
that widen the batch) runs node by node (the reference kernel).
"""
from __future__ import annotations

import ctypes
import math
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...ir.graph import Graph, Node, TensorType, Value
from ...ir.dtypes import dtype as to_dtype
from ...passes.tokenize import make_body
from ...passes.tokenize_mha import MHAMatch
from ...snippets.brgemm_blocks import row_block
from ...snippets.subgraph_compiler import CompiledSnippet
from .attention import AttentionKernel, apply_views, describe, operand_sources, output_view, shapes_through
from .base import Kernel, ReferenceKernel
from .snippet_compile import ThreadScratchpads, compile_retyped, launch_parallel

PARALLEL_MIN_MULTIPLY_ADDS = 1 << 17   # smaller blocks run on the calling thread
COMPILED_BATCH = 2   # the batch kernels are compiled for, which then run any batch (at 1 it would be a broadcast)


def _batch(arrays: Sequence[np.ndarray]) -> int | None:
    """The batch: axis 0 of Q's array when it has 4 dims, and every operand of 4 dims has it or 1 there."""
    b = arrays[0].shape[0] if arrays[0].ndim == 4 else None
    return b if b is not None and all(a.ndim != 4 or a.shape[0] in (1, b) for a in arrays) else None


def _compiled_shape(shape: tuple[int, ...], batch: int | None) -> tuple[int, ...]:
    """An operand's shape as a kernel for any batch is compiled: its batch axis at COMPILED_BATCH (one that
    broadcasts over the batch keeps its 1)."""
    return (COMPILED_BATCH, *shape[1:]) if batch is not None and len(shape) == 4 and shape[0] == batch else shape


def _head_transpose(views: list[Node]) -> Node | None:
    """The last of an operand's movement ops when it is a Transpose the kernel reads through (one that keeps
    the innermost dim: FuseTransposeBrgemm makes it a layout)."""
    last = views[-1] if views else None
    if last is None or last.op != "Transpose":
        return None
    perm = last.attrs.get("perm")
    rank = len(last.inputs[0].type.shape) if last.inputs[0].type is not None and last.inputs[0].type.shape else 0
    return last if perm is not None and rank and int(perm[-1]) == rank - 1 else None


def _key_transpose(views: list[Node]) -> Node | None:
    """The last of K's movement ops when it is a Transpose making Kᵀ of K's rows (K's head size innermost in
    memory): FuseTransposeBrgemm makes it a layout and a BrgemmCopyB packs Kᵀ once per block."""
    last = views[-1] if views else None
    if last is None or last.op != "Transpose" or last.inputs[0].type is None or not last.inputs[0].type.shape:
        return None
    perm, rank = last.attrs.get("perm"), len(last.inputs[0].type.shape)
    return last if perm is not None and rank >= 2 and int(perm[-2]) == rank - 1 else None


@dataclass
class CoreBlock:
    """The block the kernel computes: S = Q·Kᵀ, the scale and masks, the softmax, P·V, with the head split
    of Q and V and the head merge of the result (Transposes) kept for FuseTransposeBrgemm."""
    body: Graph
    q_views: list[Node]     # the movement ops applied to Q's source before the body reads it
    k_views: list[Node]
    v_views: list[Node]
    out_views: list[Node]   # those applied to the body's result after it


def core_block(block: MHAMatch, masks: list, name: str, pack_keys: bool) -> CoreBlock:
    """The block for the kernel; with `pack_keys`, Kᵀ of K's rows is read in place (packed by the kernel)."""
    q_split, v_split = _head_transpose(block.q_views), _head_transpose(block.v_views)
    k_split = _key_transpose(block.k_views) if pack_keys else None
    merge = _head_transpose(block.out_views[:1])
    nodes = [n for n in (q_split, k_split, v_split) if n is not None]
    nodes += [block.scores, *block.between, block.softmax, *block.safe, block.context]
    nodes += [merge] if merge is not None else []
    # the node and port reading each of Q, K and V
    readers = [(q_split, 0) if q_split else (block.scores, 0), (k_split, 0) if k_split else (block.scores, 1),
               (v_split, 0) if v_split else (block.context, 1)]
    q, k, v = (reader.inputs[port] for reader, port in readers)
    result = (merge or block.context).outputs[0]
    body = make_body([q, k, v, *masks], [result], nodes, name)
    # one source as two operands (self-attention on x itself: Q = K = V = x) becomes two body inputs, fed
    # the same array: a kernel computing a row of Q per iteration advances Q's pointer, not V's
    for role, (reader, port) in enumerate(readers):
        if any(body.inputs[role] is body.inputs[earlier] for earlier in range(role)):
            fresh = Value(body.fresh_name(body.inputs[role].name), body.inputs[role].type)
            body.nodes[nodes.index(reader)].inputs[port] = fresh
            body.inputs[role] = fresh
    return CoreBlock(body, block.q_views[:-1] if q_split else block.q_views,
                     block.k_views[:-1] if k_split else block.k_views,
                     block.v_views[:-1] if v_split else block.v_views,
                     block.out_views[1:] if merge else block.out_views)


@dataclass
class _Launch:
    """A compiled core body for one signature of input shapes (with `batched`, any batch of them)."""
    compiled: CompiledSnippet
    out_shape: tuple[int, ...]
    parallel: bool
    batched: bool = False   # the master's and output's dim 0 is the batch, given at run time

    def at_batch(self, shape: tuple[int, ...], batch: int | None) -> tuple[int, ...]:
        """`shape` (the output's or the master's, compiled at COMPILED_BATCH) for the run's batch."""
        return (batch, *shape[1:]) if self.batched and batch is not None else shape

    def shape_for(self, batch: int | None) -> tuple[int, ...]:
        return self.at_batch(self.out_shape, batch)

    def run(self, arrays: list[np.ndarray], scratchpad, out: np.ndarray | None = None,
            batch: int | None = None) -> np.ndarray:
        """The result, written into `out` (contiguous, of `shape_for(batch)`) or a new array."""
        out = np.empty(self.shape_for(batch), np.float32) if out is None else out
        c = self.compiled
        master = self.at_batch(c.master_shape, batch)
        ptrs = (ctypes.c_void_p * (len(arrays) + 1))(*[a.ctypes.data for a in arrays], out.ctypes.data)
        dims = (ctypes.c_int64 * len(master))(*master)
        domain = math.prod(master[:c.parallel_rank])
        scratch_bytes = master[-1] * 4 * c.scratch_rows
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
        # Kᵀ packed by the kernel when it computes a block of rows (once per block), else copied here
        self.cores = {pack: core_block(self.block, self.masks, f"{body.name}_brgemm", pack) for pack in (True, False)}
        self.reference = ReferenceKernel(node)
        self.launches: dict[tuple, _Launch | None] = {}
        self._lock = threading.Lock()
        self._scratchpad = ThreadScratchpads()

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        out = self._run(inputs, None)
        return [out] if out is not None else self.reference(inputs)

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        if self._run(inputs, outputs[0]) is None:
            self.reference.run_into(inputs, outputs)

    def _run(self, inputs: Sequence[np.ndarray], out: np.ndarray | None) -> np.ndarray | None:
        """The block's result (written into `out` when given), or None when the kernel cannot serve it."""
        m, packed = self.block, self.cores[True]   # (both cores read Q and V alike; K up to its Kᵀ)
        try:
            sources = operand_sources(m, self.slot, inputs)
            q = apply_views(sources[id(m.q)], packed.q_views)
            k = apply_views(sources[id(m.k)], packed.k_views, copies=True)   # (heads repeated for groups: copied)
            v = apply_views(sources[id(m.v)], packed.v_views, copies=True)
            rows = apply_views(q, m.q_views[len(packed.q_views):]).shape[-2]
            kt = apply_views(k, m.k_views[len(packed.k_views):])
        except ValueError:
            return None
        keys = kt.shape[-1]
        core = self.cores[row_block(rows, keys) == rows]
        kt = k if core is packed else kt
        q = q * np.float32(m.operand_scale) if m.operand_scale != 1.0 else q
        arrays = [np.ascontiguousarray(a) for a in (q, kt, v, *(inputs[self.slot[id(x)]] for x in self.masks))]
        launch, batch = self._launch_for(core, arrays)
        if launch is None:
            return None
        shape = launch.shape_for(batch)
        if out is None:
            out = np.empty(shapes_through(core.out_views, shape)[-1], np.float32)
        try:
            target = output_view(out, core.out_views, shape)
        except ValueError:
            return None
        if target.flags.c_contiguous:
            launch.run(arrays, self._scratchpad, target, batch)
        else:
            target[...] = launch.run(arrays, self._scratchpad, batch=batch)
        return out

    def _launch_for(self, core: CoreBlock, arrays: list[np.ndarray]) -> tuple[_Launch | None, int | None]:
        """The launch for these operands and the batch to run it with: a kernel compiled for any batch (one
        compile serves every batch size), or else for these very shapes."""
        batch = _batch(arrays)
        if batch is not None:
            launch = self._cached(core, [_compiled_shape(a.shape, batch) for a in arrays], arrays)
            if launch is not None and launch.batched:
                return launch, batch
        return self._cached(core, [a.shape for a in arrays], arrays), None

    def _cached(self, core: CoreBlock, shapes: list[tuple[int, ...]], arrays: list[np.ndarray]) -> _Launch | None:
        signature = (id(core), *((shape, a.dtype.str) for shape, a in zip(shapes, arrays)))
        if signature not in self.launches:
            with self._lock:
                if signature not in self.launches:
                    self.launches[signature] = self._compile(core, shapes, arrays)
        return self.launches[signature]

    def _compile(self, core: CoreBlock, shapes: list[tuple[int, ...]], arrays: list[np.ndarray]) -> _Launch | None:
        made = compile_retyped(core.body, [TensorType(to_dtype(a.dtype), s) for s, a in zip(shapes, arrays)],
                               self.options)
        if made is None:
            return None
        compiled, body = made
        out_shape = tuple(body.outputs[0].type.shape)
        work = math.prod(compiled.master_shape) * (shapes[0][-1] + out_shape[-1])
        batched = compiled.master_shape[0] == out_shape[0] == COMPILED_BATCH and shapes[0][0] == COMPILED_BATCH
        return _Launch(compiled, out_shape, work >= PARALLEL_MIN_MULTIPLY_ADDS, batched)


def build_attention(node: Node, options: dict) -> Kernel:
    """An attention block's kernel: the attention kernel, falling back to the Snippets kernel with Brgemms
    (then to the reference); a block with elementwise ops the attention kernel lacks goes to the Snippets
    kernel."""
    brgemm = BrgemmAttention(node, options)
    return brgemm if brgemm.block.others else AttentionKernel(node, fallback=brgemm)


__all__ = ["BrgemmAttention", "CoreBlock", "build_attention", "core_block"]
