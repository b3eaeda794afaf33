"""Attention blocks (Subgraphs of pattern "mha", see `passes.tokenize_mha`) on the generated attention
kernel (`targets.llvm.attention`), run on the native pool.

The block's movement ops are applied to the arrays as NumPy views (no copies): Q, Kᵀ, V and the output
become [batch, heads, rows, head size] views whose strides the kernel reads. The output's movement ops
are inverted on the planned output array, so the kernel writes the merged-heads layout directly. When
a view would need a copy, the layouts do not suit the kernel (a head size whose elements are not
contiguous, one not a multiple of the vector width — on AVX-512, of 256-bit vectors), or no LLVM is
available, the block runs on its
fallback: the Snippets kernel with Brgemms (`brgemm_attention`), else node by node (the reference kernel),
which give the same results.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...ir.graph import Graph, Node
from ...passes.tokenize_mha import MHAMatch, match_mha
from ..caches.object_cache import native_kernel
from ..parallel.native_threads import NativeCall, get_native_pool, items_call, run_items, scratchpads
from . import gemm_launch
from .base import Kernel, NativeStep, NotApplicable, PreparedLaunch, ReferenceKernel
from .kernel_arguments import dim_array, pointer_array

PARALLEL_MIN_MULTIPLY_ADDS = 1 << 17   # smaller blocks run on the calling thread
ITEMS_PER_THREAD = 2                   # (batch, head, row chunk) items wanted per thread
MAX_OUT_VECTORS = 5                    # vectors per row of the output block, at most (5 for head sizes of 5
                                       # vectors, 40 and 80: 1.03-1.2× faster than 1; 6 for 96 no faster)
MIN_SCORE_ACCUMULATORS = 8             # the scores block's accumulators, at least (see `_shape`)
HALF_VECTOR_LANES = 8                  # a head size of half vectors runs on vectors of this many lanes
ONE_KEY_BLOCK = 1024                   # up to this many keys, one key block (the whole row of scores)
KEY_BLOCK = 512                        # else blocks of about this many keys, an online softmax over them
MAX_CHUNK_ROWS = 256                   # work items of at most this many query rows
TRIM_MASKED_KEYS = True                # one additive mask: keys it masks away for a whole row block are skipped


def describe(body: Graph) -> MHAMatch:
    """The attention block a "mha" body holds (its values are the body's)."""
    softmax = [n for n in body.nodes if n.op == "Softmax"]
    found = match_mha(softmax[0], body.consumers(), set(body.outputs)) if len(softmax) == 1 else None
    if found is None or found.output is not body.outputs[0]:
        raise NotApplicable(f"body {body.name} is not an attention block")
    return found


# ---- the views ------------------------------------------------------------------------------------
def _reshape_dims(a: np.ndarray, target: Sequence[int], allowzero: bool) -> list[int]:
    """ONNX Reshape's target for `a`: 0 copies a dim, -1 is inferred."""
    dims = [a.shape[i] if t == 0 and not allowzero else int(t) for i, t in enumerate(target)]
    if -1 in dims:
        at = dims.index(-1)
        rest = math.prod(d for i, d in enumerate(dims) if i != at)
        dims[at] = a.size // rest if rest else 0
    return dims


def _reshaped(a: np.ndarray, target: Sequence[int], allowzero: bool) -> np.ndarray:
    """ONNX Reshape as a view of `a`; ValueError when it would copy."""
    dims = _reshape_dims(a, target, allowzero)
    view = a.view()
    try:
        view.shape = dims
    except AttributeError:
        raise ValueError("the reshape would copy") from None
    return view


def _perm(node: Node, rank: int) -> list[int]:
    perm = node.attrs.get("perm")
    return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]


def apply_views(a: np.ndarray, views: Sequence[Node], groups: list[int] | None = None,
                copies: bool = False) -> np.ndarray:
    """The block's movement ops on `a`, as views (its scalings are the kernel's scale). With `groups`, the
    repetition of each key/value head for a group of query heads (grouped-query attention: Unsqueeze,
    Expand, then a Reshape merging the copies into the heads) is left out, its group size appended; with
    `copies`, a Reshape that cannot be a view (that one) copies."""
    for node in views:
        if node.op == "Transpose":
            a = a.transpose(_perm(node, a.ndim))
        elif node.op == "Reshape":
            target, allowzero = node.inputs[1].data.tolist(), bool(node.attrs.get("allowzero", 0))
            repeated = a.ndim == 5 and a.strides[2] == 0 and groups is not None and \
                _reshape_dims(a, target, allowzero) == [a.shape[0], a.shape[1] * a.shape[2], *a.shape[3:]]
            if repeated:
                groups.append(a.shape[2])
                a = a[:, :, 0]
            elif copies:
                a = a.reshape(_reshape_dims(a, target, allowzero))
            else:
                a = _reshaped(a, target, allowzero)
        elif node.op == "Unsqueeze":
            rank = a.ndim + node.inputs[1].data.size
            a = np.expand_dims(a, tuple(int(x) % rank for x in node.inputs[1].data.reshape(-1)))
        elif node.op == "Expand":
            a = np.broadcast_to(a, np.broadcast_shapes(a.shape, tuple(node.inputs[1].data.tolist())))
    return a


def _split(a: np.ndarray, node: Node) -> dict[int, np.ndarray]:
    """A Split's outputs (by value id) as views of its input."""
    axis = node.attrs.get("axis", 0) % a.ndim
    sizes = node.inputs[1] if len(node.inputs) > 1 else None
    if sizes is not None:
        sizes = [int(x) for x in sizes.data.reshape(-1)]
    else:   # equal parts, the last one smaller
        part = -(-a.shape[axis] // len(node.outputs))
        sizes = [min(part, a.shape[axis] - i * part) for i in range(len(node.outputs))]
    if sum(sizes) != a.shape[axis] or min(sizes) < 0:
        raise ValueError(f"cannot split {a.shape[axis]} into {sizes}")
    bounds = np.cumsum([0] + sizes)
    return {id(o): a[(slice(None),) * axis + (slice(lo, hi),)] for o, lo, hi in zip(node.outputs, bounds, bounds[1:])}


def _as_4d(a: np.ndarray) -> np.ndarray:
    return a[None] if a.ndim == 3 else a


def shapes_through(views: Sequence[Node], shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The shapes a result of `shape` takes through the movement ops `views`: before each, and the last."""
    shapes = [tuple(shape)]
    for node in views:   # (applied to an array of no memory: a broadcast scalar)
        probe = np.lib.stride_tricks.as_strided(np.empty(1, np.float32), shapes[-1], [0] * len(shapes[-1]))
        shapes.append(apply_views(probe, [node]).shape)
    return shapes


def output_view(out: np.ndarray, views: Sequence[Node], shape: tuple[int, ...]) -> np.ndarray:
    """The view of `out` the product's result [.., rows, head size] (of `shape`) is written through:
    the output's movement ops undone."""
    shapes = shapes_through(views, shape)
    if tuple(shapes[-1]) != out.shape:
        raise ValueError(f"the output is {out.shape}, the block makes {shapes[-1]}")
    view = out
    for node, before in zip(reversed(views), reversed(shapes[:-1])):
        if node.op == "Transpose":
            view = view.transpose(np.argsort(_perm(node, view.ndim)))
        elif node.op == "Reshape":
            view = _reshaped(view, before, True)
    return view


def operand_sources(block: MHAMatch, slot: dict[int, int], inputs: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
    """The arrays Q, K and V are made from (by value id), before their movement ops: block inputs, or
    views of the Split that gives them."""
    if block.split:
        return _split(inputs[slot[id(block.split.inputs[0])]], block.split)
    return {id(x): inputs[slot[id(x)]] for x in (block.q, block.k, block.v)}


def operands(block: MHAMatch, slot: dict[int, int],
             inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple, int]:
    """Q, Kᵀ and V of a block as 4-D views of its inputs (`slot`: a body input's index by value id), the
    shape of the second product's result, and how many query heads share a key/value head (ValueError: no
    views)."""
    m = block
    sources = operand_sources(block, slot, inputs)
    k_groups: list[int] = []
    v_groups: list[int] = []
    q = _as_4d(apply_views(sources[id(m.q)], m.q_views))
    kt = _as_4d(apply_views(sources[id(m.k)], m.k_views, k_groups))
    v = _as_4d(apply_views(sources[id(m.v)], m.v_views, v_groups))
    if k_groups != v_groups or len(k_groups) > 1:
        raise ValueError("keys and values are repeated for the query heads differently")
    group = k_groups[0] if k_groups else 1
    heads = (kt.shape[0], kt.shape[1] * group)
    batch = np.broadcast_shapes(q.shape[:2], heads, (v.shape[0], v.shape[1] * group))
    rank = len(m.context.outputs[0].type.shape)
    return q, kt, v, (batch + (q.shape[2], v.shape[3]))[4 - rank:], group


# ---- the kernel -------------------------------------------------------------------------------------
def _shape(d: int, dv: int, sk_hint: int, masks: ScoreMasks, masked: int, kept: bool):
    """The attention kernel for head sizes d (scores) and dv (output) at the current ISA level, or None.
    The scores block is the GEMM's block for a product as wide as the keys; the row block's height and the
    output block's vectors (dividing Dv): the most accumulators with up to 4 vectors, or a wider block (5
    vectors: head sizes 40, 80, 200) when it loads fewer times per FMA over both products (each loads rows +
    vectors per rows · vectors FMAs: 2 / rows + 1 / vectors, the scores' vectors fixed) and its rows keep
    MIN_SCORE_ACCUMULATORS sums in the scores block (fewer leave the FMA units waiting on their latency:
    AVX2's 2 × 3 scores block for head size 40 ran 1.2× slower at 256 and 512 keys than 6 × 2).
    With one additive mask, the kernel
    skips the keys a row block's mask rows all mask away (GPT-2's causal mask, BERT's padded keys): see
    `targets.llvm.attention._needed_end`."""
    from ...targets.llvm import jit
    from ...targets.llvm.attention import AttentionKernel
    level = jit.host().level
    lanes, registers = level.f32_lanes, level.vector_registers
    if dv % lanes and lanes // 2 == HALF_VECTOR_LANES and dv % HALF_VECTOR_LANES == 0:
        lanes //= 2   # (AVX-512: head sizes such as 8, 40 (Stable Diffusion), 72 on 256-bit vectors)
    if dv % lanes:
        return None
    scores = gemm_launch.choose_kernel(sk_hint, d).shape
    blocks = [(min(scores.mr, (registers - v - 1) // v), v)
              for v in range(1, MAX_OUT_VECTORS + 1) if (dv // lanes) % v == 0]
    def loads(block: tuple[int, int]) -> float:
        return 2 / block[0] + 1 / block[1]

    narrow = max((b for b in blocks if b[1] <= 4), key=lambda b: b[0] * b[1])
    wider = [b for b in blocks if b[1] > 4 and b[0] * scores.vectors >= MIN_SCORE_ACCUMULATORS
             and loads(b) < loads(narrow)]
    rows, vectors = min(wider, key=loads) if wider else narrow
    return AttentionKernel(rows, scores.vectors, vectors, lanes, scores.unroll, level.fused_multiply_add, masked,
                           kept, kept and masks.inverted, kept and masked > 0 and masks.kept_first, masks.causal,
                           masks.safe, TRIM_MASKED_KEYS and masked == 1 and not kept, masks.cap is not None)


def _compiled(shape) -> tuple[int, object]:
    from ...targets.llvm import jit
    from ...targets.llvm.attention import attention_module
    host = jit.host()
    return native_kernel(lambda: attention_module(shape), shape.name, host.cpu, host.features)


@dataclass
class AttentionLaunch:
    """One call of the kernel with its arguments. It holds what it made (the scale, a converted mask), not
    the caller's arrays: those must stay alive and unchanged in layout while it is run again."""
    shape: object
    ptrs: ctypes.Array
    dims: ctypes.Array
    items: int
    threads: int
    scratch: object
    held: tuple
    copied_mask: bool   # a mask was converted: a copy of the values it had

    def __post_init__(self):
        self.address, self.fn = _compiled(self.shape)   # (looked up once: a launch is microseconds)

    def run(self) -> None:
        run_items(self.address, self.fn, self.ptrs, self.dims, self.items, self.threads, self.scratch)

    @property
    def native_call(self) -> NativeCall:
        return items_call(self.address, self.ptrs, self.dims, self.items, self.threads, self.scratch)


def _elements(a: np.ndarray) -> list[int]:
    return [s // a.itemsize for s in a.strides]


@dataclass(frozen=True)
class ScoreMasks:
    """What the block does to the scores between the scaled product and the softmax."""
    mask: np.ndarray | None = None   # added
    keep: np.ndarray | None = None   # where(keep, s, fill), or where(keep, fill, s) when `inverted`
    fill: float = 0.0
    inverted: bool = False
    kept_first: bool = False         # the Where comes before the Add
    causal: bool = False             # keys past a row's position (key > row + Sk - Sq) score -inf (set by callers
    #                                  of `prepare`: graphs give causal masks as tensors, the boolean or additive path)
    safe: bool = False               # a row whose scores are all -inf gives zeros (else NaN)
    mask2: np.ndarray | None = None  # added after `mask`
    cap: float | None = None         # a soft cap: before the masks, s = cap · tanh(s) (s scaled already)


def _mask_operand(mask: np.ndarray | None, shape: tuple, dtype) -> tuple[np.ndarray | None, bool]:
    """A mask broadcast to the scores' shape with unit stride along the keys (copied when it has none, or
    another type); and whether it was copied."""
    if mask is None:
        return None, False
    mask = np.broadcast_to(mask, shape)
    if mask.dtype == dtype and (mask.strides[-1] == mask.itemsize or shape[-1] == 1):
        return mask, False
    return np.ascontiguousarray(mask, dtype=dtype), True


def prepare(q: np.ndarray, kt: np.ndarray, v: np.ndarray, out: np.ndarray, scale: float,
            masks: ScoreMasks = ScoreMasks(), group: int = 1) -> AttentionLaunch | None:
    """The launch computing out = softmax(masks(q @ kt * scale)) @ v on 4-D views (out's batch and heads
    those of the broadcast operands; `group` query heads share each head of kt and v), or None when the
    kernel does not take them."""
    b, h, sq, dv = out.shape
    d, sk = kt.shape[-2:]
    if h % group:
        return None
    try:
        q = np.broadcast_to(q, (b, h) + q.shape[2:])
        kt, v = (np.broadcast_to(x, (b, h // group) + x.shape[2:]) for x in (kt, v))
        mask, copied = _mask_operand(masks.mask, (b, h, sq, sk), np.float32)
        mask2, copied2 = _mask_operand(masks.mask2, (b, h, sq, sk), np.float32)
        keep, copied_keep = _mask_operand(masks.keep, (b, h, sq, sk), np.bool_)
    except ValueError:
        return None
    if (sk == 0 or d == 0 or sq == 0 or q.shape[-2:] != (sq, d) or v.shape[-2:] != (sk, dv)
            or any(x.dtype != np.float32 for x in (q, kt, v, out))
            or any(x.shape[-1] > 1 and x.strides[-1] != 4 for x in (q, v, out))
            or not gemm_launch.available()):
        return None
    shape = _shape(d, dv, sk, masks, (mask is not None) + (mask2 is not None), keep is not None)
    if shape is None:
        return None
    pool = get_native_pool()
    work = b * h * sq * sk * (d + dv)
    threads = pool.threads if pool is not None and work >= PARALLEL_MIN_MULTIPLY_ADDS else 1
    blocks = -(-sq // shape.mr)
    chunks = min(blocks, -(-ITEMS_PER_THREAD * threads // (b * h))) if threads > 1 else 1
    chunk_rows = -(-blocks // chunks) * shape.mr
    # (a chunk accumulates its output rows in the scratchpad: a few hundred at most)
    chunk_rows = min(chunk_rows, -(-MAX_CHUNK_ROWS // shape.mr) * shape.mr)
    chunks = -(-sq // chunk_rows)
    qs, ks, vs, os_ = _elements(q), _elements(kt), _elements(v), _elements(out)
    ms, m2s, keeps = (_elements(x) if x is not None else [0, 0, 0, 0] for x in (mask, mask2, keep))
    from ...targets.llvm.attention import DIMS, PTRS
    dims = dict(B=b, H=h, Sq=sq, Sk=sk, D=d, Dv=dv, q_b=qs[0], q_h=qs[1], q_s=qs[2], k_b=ks[0], k_h=ks[1],
                k_s=ks[3], k_d=ks[2], v_b=vs[0], v_h=vs[1], v_s=vs[2], o_b=os_[0], o_h=os_[1], o_s=os_[2],
                m_b=ms[0], m_h=ms[1], m_s=ms[2], m2_b=m2s[0], m2_h=m2s[1], m2_s=m2s[2], keep_b=keeps[0],
                keep_h=keeps[1], keep_s=keeps[2], group=group, chunks=chunks, chunk_rows=chunk_rows)
    params = np.array([scale, masks.fill, 0.0 if masks.cap is None else masks.cap], np.float32)
    ptrs = pointer_array(PTRS, Q=q, K=kt, V=v, O=out, mask=mask, params=params, keep=keep, mask2=mask2)
    kb = -(-sk // shape.nr) * shape.nr if sk <= ONE_KEY_BLOCK else max(1, KEY_BLOCK // shape.nr) * shape.nr
    dims["kb"] = kb
    scratch = scratchpads(pool.threads if pool is not None else 1,
                          (shape.scratch_floats(kb, d, dv, chunk_rows) + 16) * 4)
    made = (params, mask if copied else None, keep if copied_keep else None, mask2 if copied2 else None)
    return AttentionLaunch(shape, ptrs, dim_array(DIMS, **dims),
                           b * h * chunks, threads, scratch, made, copied or copied_keep or copied2)


class AttentionKernel(Kernel):
    """A "mha" Subgraph: its block on the attention kernel, else on `fallback` (default: node by node)."""

    def __init__(self, node: Node, fallback: Kernel | None = None):
        self.node = node
        body = node.attrs["body"]
        self.block = describe(body)
        self.slot = {id(v): i for i, v in enumerate(body.inputs)}
        self.fallback = fallback or ReferenceKernel(node)   # for the calls the kernel does not take

    def _launch(self, inputs: Sequence[np.ndarray], out: np.ndarray) -> AttentionLaunch | None:
        m = self.block
        try:
            q, kt, v, product, group = operands(self.block, self.slot, inputs)
            target = _as_4d(output_view(out, m.out_views, product))
        except ValueError:
            return None
        mask, keep, mask2 = (inputs[self.slot[id(x)]] if x is not None else None for x in (m.mask, m.keep, m.mask2))
        masks = ScoreMasks(mask, keep, m.fill, m.inverted, m.kept_first, safe=bool(m.safe), mask2=mask2,
                           cap=m.soft_cap)
        return prepare(q, kt, v, target, m.scale, masks, group)

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        launch = self._launch(inputs, outputs[0]) if outputs[0].size else None
        if launch is None:
            self.fallback.run_into(inputs, outputs)
        else:
            launch.run()

    def bind(self, in_shapes, fixed, n_outputs) -> PreparedLaunch:
        """The launch prepared once for the arrays of a first call, run again while they are the same."""
        def prepare(arrays: list):
            launch = self._launch(arrays[:-1], arrays[-1]) if arrays[-1].size else None
            if launch is None or launch.copied_mask:   # (a converted mask would keep its first values)
                return None
            return NativeStep(launch)

        return PreparedLaunch(prepare, lambda arrays: self.run_into(arrays[:-1], arrays[-1:]))

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        m = self.block
        try:
            q, kt, _, product, _ = operands(self.block, self.slot, inputs)
            scores = product[:-1] + (kt.shape[-1],)
            for mask in (m.mask, m.mask2, m.keep):   # (a mask that widens the batch: the body's result is wider)
                if mask is not None and np.broadcast_shapes(inputs[self.slot[id(mask)]].shape, scores) != scores:
                    return self.fallback(inputs)
            out = np.empty(shapes_through(self.block.out_views, product)[-1], np.float32)
        except ValueError:
            return self.fallback(inputs)
        self.run_into(inputs, [out])
        return [out]


__all__ = ["AttentionKernel", "AttentionLaunch", "ScoreMasks", "apply_views", "describe", "operand_sources",
           "operands", "output_view", "prepare", "shapes_through"]
