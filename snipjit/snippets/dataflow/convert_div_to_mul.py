"""ConvertDivToMul: `x / Scalar c` becomes `x * Scalar (1/c)`.

A vector division costs several times a multiplication (on AVX-512 it is often what bounds an
elementwise kernel: erf-GELU's `x / sqrt(2)`). The product differs from the quotient by at most one
rounding when 1/c is not exact — within the tolerance every kernel is held to — and not at all when c is
a power of two. Divisions by 0, by a non-finite constant or by a reciprocal that overflows stay
divisions, so infinities and NaNs come out as IEEE division gives them.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.graph import Graph, Node, Value
from ..ops import DOMAIN
from ..pass_manager import BodyPass


class ConvertDivToMul(BodyPass):
    name = "ConvertDivToMul"

    def run(self, body: Graph) -> bool:
        changed = False
        new_nodes: list[Node] = []
        for n in body.nodes:
            divisor = n.inputs[1].producer if n.op == "Div" and not n.domain and len(n.inputs) == 2 else None
            if divisor is not None and divisor.op == "Scalar" and divisor.domain == DOMAIN \
                    and n.outputs[0].type.dtype.name == "f32":
                c = float(np.float32(divisor.attrs["value"]))
                inverse = float(np.float32(1.0 / c)) if c != 0 and math.isfinite(c) else math.inf
                if math.isfinite(inverse) and inverse != 0:
                    out = Value(body.fresh_name(f"{n.outputs[0].name}_inv"), n.inputs[1].type)
                    new_nodes.append(Node("Scalar", [], [out], {**divisor.attrs, "value": inverse}, domain=DOMAIN))
                    n.op, n.inputs = "Mul", [n.inputs[0], out]
                    changed = True
            new_nodes.append(n)
        body.nodes = new_nodes
        if changed:
            body.remove_dead_nodes()
        return changed
