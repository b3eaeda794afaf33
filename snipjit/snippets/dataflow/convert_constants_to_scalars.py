"""ConvertConstantsToScalars: single-value constants in a body become `Scalar` ops.

A Scalar's value is baked into the kernel (an immediate broadcast to a vector register), so it needs no
kernel argument and no memory load.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node, Value
from ..ops import DOMAIN
from ..pass_manager import BodyPass


class ConvertConstantsToScalars(BodyPass):
    name = "ConvertConstantsToScalars"

    def run(self, body: Graph) -> bool:
        scalars: dict[int, Value] = {}
        new_nodes: list[Node] = []
        for c in body.constants:
            if c.data.size != 1:
                raise ValueError(f"body '{body.name}': constant '{c.name}' of {c.type} has more than one "
                                 "value; only scalars may live inside a kernel")
            out = Value(body.fresh_name(c.name + "_scalar"), c.type)
            new_nodes.append(Node("Scalar", [], [out], {"value": c.data.reshape(()).item(),
                                                        "dtype": c.type.dtype.name,
                                                        "shape": list(c.type.shape)}, domain=DOMAIN))
            scalars[id(c)] = out
        for n in body.nodes:
            n.inputs = [scalars.get(id(v), v) if v is not None else None for v in n.inputs]
        body.outputs = [scalars.get(id(v), v) for v in body.outputs]
        body.nodes = new_nodes + body.nodes
        return bool(new_nodes)
