"""InsertLoadStore: make memory access explicit.

Every consumer of a Parameter gets its own `Load` right before it (inside the consumer's loops), and
every Result gets a `Store` right after the expression producing its value. A Load of a port that
broadcasts along the innermost dim reads one element (`count=1`); the others read a full vector.
Loads and Stores name their buffer (`buffer=("param"|"result", index)`) so the emitters find its data
pointer even in loop copies.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError
from ..memory import update_loop_ports


class InsertLoadStore(LinearIRPass):
    name = "InsertLoadStore"

    def run(self, lir: LinearIR) -> bool:
        lanes = lir.vector_lanes
        inner_master = lir.master_shape[-1] if lir.master_shape else 1
        changed = False
        for p in lir.parameters():
            shape = p.out_descs[0].shape
            count = 1 if shape and shape[-1] == 1 and inner_master != 1 else lanes
            for consumer in p.consumers(0):
                if consumer.expr.op in ("Result", "Load"):
                    if consumer.expr.op == "Result":
                        raise LinearIRError(f"body input '{p.attrs['name']}' is also a body output")
                    continue
                load = lir.insert_node("Load", [p.output_port(0)], lir.index(consumer.expr),
                                       {"count": count, "buffer": ("param", p.attrs["index"])},
                                       loop_ids=consumer.expr.loop_ids, consumers=[consumer], dtype=p.dtype)
                load.in_descs[0].layout = consumer.descriptor.layout
                load.in_descs[0].subtensor = load.out_descs[0].subtensor = (count,)
                changed = True
        for r in lir.results():
            src = r.inputs[0].source
            if src.expr.op in ("Parameter", "Scalar"):
                raise LinearIRError(f"body output '{r.attrs['name']}' is not computed by the kernel")
            store = lir.insert_node("Store", [src], lir.index(src.expr) + 1,
                                    {"count": lanes, "buffer": ("result", r.attrs["index"])},
                                    loop_ids=src.expr.loop_ids, consumers=[r.input_port(0)], dtype=r.dtype)
            store.in_descs[0].subtensor = store.out_descs[0].subtensor = (lanes,)
            changed = True
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return changed
