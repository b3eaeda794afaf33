"""InsertBroadcastMove: broadcast a one-lane value across the vector before an op that mixes it with
full vectors.

When an input of an op is size 1 along the innermost dim while the op's output is not, the input holds
one meaningful lane (a `count=1` Load, or math on one); `BroadcastMove` fills every lane with it.
Scalars are already full vectors and need none.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from ..memory import BLOCK_OPS

_NO_BROADCAST_NEEDED = ("Scalar", "BroadcastMove", "BroadcastLoad")
_NOT_COMPUTE = ("Parameter", "Result", "Load", "Store", "LoopBegin", "LoopEnd", "BroadcastMove",
                "BroadcastLoad", "Scalar") + BLOCK_OPS   # (a Brgemm's operands are memory, not vectors)


class InsertBroadcastMove(LinearIRPass):
    name = "InsertBroadcastMove"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for e in list(lir.expressions):
            if e.op in _NOT_COMPUTE or not e.out_descs:
                continue
            out_shape = e.out_descs[0].shape
            if not out_shape or out_shape[-1] == 1:
                continue
            for i, desc in enumerate(list(e.in_descs)):
                src = e.inputs[i].source
                if desc.shape[-1] != 1 or src.expr.op in _NO_BROADCAST_NEEDED:
                    continue
                shape = desc.shape[:-1] + (out_shape[-1],)
                bm = lir.insert_node("BroadcastMove", [src], lir.index(e), loop_ids=e.loop_ids,
                                     out_shape=shape, consumers=[e.input_port(i)])
                e.in_descs[i].shape = shape
                bm.out_descs[0].subtensor = (lir.vector_lanes,)
                changed = True
        return changed
