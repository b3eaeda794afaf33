"""FuseTransposeBrgemm: a Transpose between a body input and the Brgemms reading it, or between a Brgemm and
a body output, becomes the layout of that input or output.

An attention block splits its heads with Transposes ([batch, rows, heads, size] → [batch, heads, rows,
size]) and merges them back after the second product. A Brgemm reads its rows through any row stride, so
the kernel can take the projection's memory as it is: the Transpose goes, the body input takes the
transposed shape, and `body.meta["layouts"]` records the order of its dims in memory (the inverse of the
permutation); a body output written by a Brgemm through a Transpose is written in place in the same way
(`body.meta["output_layouts"]`, the permutation itself). A Brgemm reads and writes its rows contiguously:
Transposes that keep the innermost dim are fused; one that gives a B operand its K as the innermost dim in
memory (Kᵀ of K's rows) is fused too, with a `BrgemmCopyB` that packs that B for its Brgemms once per
block. Canonicalization pads the layouts with the ranks.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node, Value
from ..ops import DOMAIN
from ..pass_manager import BodyPass


def _permutation(node: Node) -> tuple[int, ...] | None:
    """The permutation of a Transpose, else None."""
    if node.op != "Transpose" or node.domain or node.inputs[0].type is None or node.inputs[0].type.shape is None:
        return None
    rank = len(node.inputs[0].type.shape)
    perm = node.attrs.get("perm")
    return tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)


def _keeps_innermost(node: Node) -> tuple[int, ...] | None:
    """The permutation of a Transpose that leaves the innermost dim in place, else None."""
    perm = _permutation(node)
    return perm if perm and perm[-1] == len(perm) - 1 else None


def _is_brgemm(node: Node) -> bool:
    return node.op == "Brgemm" and node.domain == DOMAIN


class FuseTransposeBrgemm(BodyPass):
    name = "FuseTransposeBrgemm"

    def run(self, body: Graph) -> bool:
        uses = body.consumers()
        layouts = list(body.meta.get("layouts") or [None] * len(body.inputs))
        output_layouts = list(body.meta.get("output_layouts") or [None] * len(body.outputs))
        fused: set[int] = set()
        packs: list[Node] = []
        for i, v in enumerate(body.inputs):
            readers = uses.get(v, [])
            if len(readers) != 1 or layouts[i] is not None:
                continue
            transpose = readers[0][0]
            perm = _permutation(transpose)
            out = transpose.outputs[0]
            if perm is None or out in body.outputs or not all(_is_brgemm(n) for n, _ in uses.get(out, [])):
                continue
            rank = len(perm)
            if perm[-1] != rank - 1:   # the innermost dim moves: only a B read column by column, then packed
                if rank < 2 or perm[-2] != rank - 1 or any(k != 1 for _, k in uses.get(out, [])):
                    continue
                packed = Value(body.fresh_name(f"{out.name}_packed"), out.type)
                packs.append(Node("BrgemmCopyB", [v], [packed], {}, domain=DOMAIN))
                body.replace_uses(out, packed)
            else:
                body.replace_uses(out, v)
            v.type = out.type
            layouts[i] = tuple(int(d) for d in np.argsort(perm))
            fused.add(id(transpose))
        for j, o in enumerate(body.outputs):
            transpose = o.producer
            perm = _keeps_innermost(transpose) if transpose is not None else None
            if perm is None or output_layouts[j] is not None or body.outputs.count(o) != 1:
                continue
            product = transpose.inputs[0]
            if product.producer is None or not _is_brgemm(product.producer) or len(uses.get(product, [])) != 1 \
                    or product in body.outputs:
                continue
            product.producer.outputs = [o]
            o.producer, o.type = product.producer, product.type
            output_layouts[j] = perm
            fused.add(id(transpose))
        if not fused:
            return False
        body.nodes = packs + [n for n in body.nodes if id(n) not in fused]
        body.meta["layouts"], body.meta["output_layouts"] = layouts, output_layouts
        return True
