"""ConvertPowerToPowerStatic: `Pow(x, Scalar p)` becomes `PowerStatic(x){power=p}`.

With the exponent known, the emitter picks x*x for 2, sqrt for 0.5, repeated multiplication for small
integers, instead of the general exp/log form.
"""
from __future__ import annotations

from ...ir.graph import Graph
from ..ops import DOMAIN
from ..pass_manager import BodyPass


class ConvertPowerToPowerStatic(BodyPass):
    name = "ConvertPowerToPowerStatic"

    def run(self, body: Graph) -> bool:
        changed = False
        for n in body.nodes:
            if n.op != "Pow" or n.domain:
                continue
            exp = n.inputs[1].producer
            if exp is None or exp.op != "Scalar" or exp.domain != DOMAIN:
                continue
            if n.inputs[0].type.dtype != n.outputs[0].type.dtype:
                continue
            n.op, n.domain = "PowerStatic", DOMAIN
            n.attrs = {"power": float(exp.attrs["value"])}
            n.inputs = [n.inputs[0]]
            changed = True
        if changed:
            body.remove_dead_nodes()
        return changed
