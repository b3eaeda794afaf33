"""EliminateIdentityArithmetic: drop `x * 1`, `x + 0`, `x - 0` and `x / 1` with Scalar operands.

These come from exporters (scales of 1, zero biases) and cost a vector op per element. Only exact
identities are removed (the result is bit-identical), and only when the shape does not change.
"""
from __future__ import annotations

from ...ir.graph import Graph
from ..ops import DOMAIN
from ..pass_manager import BodyPass

_IDENTITY = {("Mul", 1.0): (0, 1), ("Add", 0.0): (0, 1), ("Sub", 0.0): (0,), ("Div", 1.0): (0,)}


class EliminateIdentityArithmetic(BodyPass):
    name = "EliminateIdentityArithmetic"

    def run(self, body: Graph) -> bool:
        changed = False
        for n in list(body.nodes):
            if n.domain or len(n.inputs) != 2:
                continue
            for keep in (0, 1):
                other = n.inputs[1 - keep].producer
                if other is None or other.op != "Scalar" or other.domain != DOMAIN:
                    continue
                sides = _IDENTITY.get((n.op, float(other.attrs["value"])))
                x = n.inputs[keep]
                if (sides is None or keep not in sides or x.type != n.outputs[0].type
                        or n.outputs[0] in body.outputs):  # a body output keeps its producer
                    continue
                body.replace_uses(n.outputs[0], x)
                changed = True
                break
        if changed:
            body.remove_dead_nodes()
        return changed
