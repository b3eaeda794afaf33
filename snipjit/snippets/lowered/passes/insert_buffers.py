"""InsertBuffers: route values that cross from one loop nest into another through memory.

A value computed in one nest and read in a later nest over the same dims (a softmax's exponentials,
read again after their sum is known) cannot stay in a register: it goes into a `Buffer` — one row of the
innermost loop in the kernel's per-thread scratchpad, which AllocateBuffers places. The Buffer sits
between the two nests; InsertLoadStore then stores into it in the producer's nest and loads from it in
each consumer's.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from ..memory import update_loop_ports


class InsertBuffers(LinearIRPass):
    name = "InsertBuffers"

    def run(self, lir: LinearIR) -> bool:
        count = 0
        for e in list(lir.expressions):
            if not e.loop_ids or e.op == "Accumulate":
                continue   # accumulators are read after their loop by Horizon, in a register
            for k, conn in enumerate(e.outputs):
                crossing = [c for c in conn.consumers if c.expr.loop_ids and c.expr.loop_ids != e.loop_ids]
                if not crossing:
                    continue
                end = max(i for i, x in enumerate(lir.expressions) if x.loop_ids == e.loop_ids)
                shape = (1,) * (len(lir.master_shape) - 1) + (lir.master_shape[-1],)
                lir.insert_node("Buffer", [e.output_port(k)], end + 1, {"index": count}, loop_ids=(),
                                out_shape=shape, dtype=e.dtype, consumers=crossing)
                count += 1
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return count > 0
