"""ConvertMatMulToBrgemm: a `MatMul` in a body becomes a `Brgemm` (domain "snippets").

A body holding products is an attention block (TokenizeMHA's pattern "mha"): scores = Q·Kᵀ, the
elementwise ops and the softmax on them, then P·V. In the Linear IR a Brgemm is not a vector operation
but a block product reading and writing memory (Parameters, Buffers, Results), which the control-flow
passes place between the loop nests of the elementwise ops; its operands of rank < 2 (a vector times a
matrix) are refused here, so the kernel falls back to the reference.
"""
from __future__ import annotations

from ...ir.graph import Graph
from ..ops import DOMAIN
from ..pass_manager import BodyPass


class ConvertMatMulToBrgemm(BodyPass):
    name = "ConvertMatMulToBrgemm"

    def run(self, body: Graph) -> bool:
        changed = False
        for node in body.nodes:
            if node.op != "MatMul" or node.domain:
                continue
            a, b = node.inputs
            if any(v.type is None or v.type.shape is None or len(v.type.shape) < 2 for v in (a, b, node.outputs[0])):
                raise ValueError(f"{node.label()}: a Brgemm needs operands of rank >= 2")
            if any(v.type.dtype.name != "f32" for v in (a, b)):
                raise ValueError(f"{node.label()}: a Brgemm multiplies f32 operands, not {a.type.dtype.name}")
            node.op, node.domain = "Brgemm", DOMAIN
            changed = True
        return changed
