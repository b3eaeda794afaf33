"""SplitDimensionM: an attention body's query rows (M, the rows of its Brgemms' A operands) become two dims,
[M / m, m], so the kernel computes a block of m rows per iteration of its parallel domain.

A body with Brgemms runs all the rows of a head per iteration, its scores (M × keys) in the thread's
scratchpad (`subgraph_compiler.brgemm_rows`); past `brgemm_blocks.BLOCK_ELEMENTS` (1M scores) it ran a
row per iteration, streaming Kᵀ and V once per row. There, split with m the largest divisor of M whose
block of scores fits `brgemm_blocks.ROW_BLOCK_ELEMENTS`, the master shape ends [.., M / m, m, keys]: a
block of m rows per iteration, the blocks in the parallel domain beside the batch and heads. A Kᵀ packed
by a BrgemmCopyB is then packed once per block (right, but per block of 64 rows 1,024 keys took twice as
long), so the attention kernel gives split heads Kᵀ itself. `bench.attention_blocks` (a capped block of
12 heads of 64, then with Tanh, Zen 4, AVX-512, 2 threads): 2,048 keys 82.3 ms against 298 ms a row at a
time, 4,096 keys 365 against 1,008 ms, as fast as the attention kernel's 79.9 and 378 ms; blocks of 64K scores
were 1.6x slower than blocks of 256K, and at 1,024 keys blocks of 256 rows 4% slower than the whole head
(21.2 against 20.4 ms).

Every value carrying rows (the A operands, the products, what the scores become, and the masks with a dim
of rows) has its dim -2 split; the others (Kᵀ, V, masks broadcast over rows) get a dim of 1 there, so
broadcasting still lines them up. Layouts split or gain the dim alike (a dim split in memory stays
contiguous), positive axes past it move by one. Bodies with other shape-changing ops, a reduction or
softmax over the rows, or dynamic dims are left alone. (OpenVINO's Snippets split M in the same place,
there to give the threads work when batch × heads is small.)
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node, TensorType, Value
from .. import brgemm_blocks
from ..ops import BLOCK_OPS, DOMAIN
from ..supported_ops import ELEMENTWISE_OPS, NORMALIZATION_OPS, REDUCE_OPS
from ..pass_manager import BodyPass

AXIS_OPS = REDUCE_OPS | NORMALIZATION_OPS   # (along the innermost axis, as the tokenizer took them)


def _keeps_shapes(node: Node) -> bool:
    """Ops whose values keep their dims but for broadcasting (and the innermost axis a reduction keeps)."""
    if node.domain:
        return node.domain == DOMAIN and node.op in BLOCK_OPS
    return node.op in ELEMENTWISE_OPS or node.op in AXIS_OPS


def _brgemms(body: Graph) -> list[Node]:
    return [n for n in body.nodes if n.op == "Brgemm" and n.domain == DOMAIN]


def _rows_values(body: Graph, rows: int) -> set[int] | None:
    """The values carrying rows (by id): forward from the Brgemms' A operands and products through the
    other ops, and back into their operands whose dim -2 is the rows; None when a Brgemm's B would carry
    rows."""
    carrying: set[int] = set()
    for n in _brgemms(body):
        carrying |= {id(n.inputs[0]), id(n.outputs[0])}
    changed = True
    while changed:
        changed = False
        for n in body.nodes:
            if n.op == "BrgemmCopyB":
                continue
            operands = n.inputs[:1] if n.op == "Brgemm" else n.inputs
            if not any(id(v) in carrying for v in [*operands, *n.outputs]):
                continue
            for v in [*n.outputs, *(v for v in operands if v is not None and _has_rows(v, rows))]:
                if id(v) not in carrying:
                    carrying.add(id(v))
                    changed = True
    b_operands = {id(n.inputs[1]) for n in _brgemms(body)} | {id(n.inputs[0]) for n in body.nodes
                                                                if n.op == "BrgemmCopyB"}
    return None if carrying & b_operands else carrying


def _has_rows(v: Value, rows: int) -> bool:
    shape = v.type.shape if v.type is not None else None
    return shape is not None and len(shape) >= 2 and shape[-2] == rows


def _moved(axes: list[int], rank: int) -> list[int] | None:
    """Axes of a value of `rank` once it has a dim more at -2 (positive ones past it move by one), or None
    when one is that dim (a softmax or reduction over the rows)."""
    if any(a % rank == rank - 2 for a in axes):
        return None
    return [a + 1 if a > rank - 2 else a for a in axes]


def _axes_moved(node: Node) -> tuple[dict, object] | None:
    """The node's axis attributes and a reduction's constant axes input (or None) once its values have a
    dim more at -2 (values of rank < 2 keep theirs), or None when an axis is that dim or the axes are
    computed."""
    rank = len(node.inputs[0].type.shape)
    attrs = dict(node.attrs)
    if rank < 2:
        return attrs, None
    for key in ("axis", "axes"):
        if key in attrs:
            many = isinstance(attrs[key], (list, tuple))
            moved = _moved([int(a) for a in (attrs[key] if many else [attrs[key]])], rank)
            if moved is None:
                return None
            attrs[key] = moved if many else moved[0]
    axes = node.inputs[1] if node.op in REDUCE_OPS and len(node.inputs) > 1 else None   # (others: operands)
    if axes is None:
        return attrs, None
    moved = _moved([int(a) for a in axes.data.reshape(-1)], rank) if axes.data is not None else None
    return None if moved is None else (attrs, np.array(moved, axes.data.dtype))


def _split_layout(layout: tuple[int, ...] | None, rank: int) -> tuple[int, ...] | None:
    """A layout (logical dims in memory order) once logical dim rank - 2 is split in two or gains a dim of 1
    before it: the two dims side by side in memory."""
    if layout is None:
        return None
    at = rank - 2
    out: list[int] = []
    for d in layout:
        if d < at:
            out.append(d)
        elif d == at:
            out += [at, at + 1]
        else:
            out.append(d + 1)
    return tuple(out)


class SplitDimensionM(BodyPass):
    name = "SplitDimensionM"

    def run(self, body: Graph) -> bool:
        products = _brgemms(body)
        if not products or not all(_keeps_shapes(n) for n in body.nodes):
            return False
        shapes = [n.outputs[0].type.shape if n.outputs[0].type is not None else None for n in products]
        if any(s is None or len(s) < 2 or not all(isinstance(d, int) for d in s) for s in shapes):
            return False
        rows, keys = shapes[0][-2], shapes[0][-1]
        m = brgemm_blocks.row_block(rows, keys) if all(s[-2] == rows for s in shapes) else None
        if m is None or m == rows:
            return False
        carrying = _rows_values(body, rows)
        values = list(body.values())
        if carrying is None or any(id(v) in carrying and not _has_rows(v, rows) for v in values):
            return False   # (a value computed from the rows without them at -2: a reduction dropping a dim)
        moved = {id(n): _axes_moved(n) for n in body.nodes if n.op in AXIS_OPS and not n.domain}
        if any(x is None for x in moved.values()):
            return False
        ranks: dict[int, int] = {}
        for v in values:
            shape = v.type.shape if v.type is not None else None
            if shape is None or len(shape) < 2:
                continue
            ranks[id(v)] = len(shape)
            middle = (rows // m, m) if id(v) in carrying else (1, shape[-2])
            v.type = TensorType(v.type.dtype, (*shape[:-2], *middle, shape[-1]))
            if v.data is not None:
                v.data = v.data.reshape(v.type.shape)
        for n in body.nodes:
            if id(n) in moved:
                n.attrs, axes = moved[id(n)]
                if axes is not None:
                    n.inputs[1].data = axes
        for key, ports in (("layouts", body.inputs), ("output_layouts", body.outputs)):
            if body.meta.get(key):
                body.meta[key] = [_split_layout(layout, ranks[id(v)]) if id(v) in ranks else layout
                                  for layout, v in zip(body.meta[key], ports)]
        return True
