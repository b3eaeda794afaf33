"""EliminateIdentityArithmetic: drop `x * 1`, `x / 1`, `x + (-0)` and `x - (+0)` with Scalar operands.

These come from exporters (scales of 1, zero biases) and cost a vector op per element. Only exact
identities are removed (the result is bit-identical, signed zeros included: `-0 + 0` is `+0`, so `x + 0`
stays), and only when the shape does not change.
"""
from __future__ import annotations

import math

from ...ir.graph import Graph
from ..ops import DOMAIN
from ..pass_manager import BodyPass

# (op, the constant's value and sign) -> which operand positions x may take
_IDENTITY = {("Mul", 1.0, 1): (0, 1), ("Div", 1.0, 1): (0,), ("Add", 0.0, -1): (0, 1), ("Sub", 0.0, 1): (0,)}


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
                value = float(other.attrs["value"])
                sides = _IDENTITY.get((n.op, value, int(math.copysign(1.0, value))))
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
