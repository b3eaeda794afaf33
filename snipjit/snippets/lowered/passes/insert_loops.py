"""InsertLoops: make loops explicit with `LoopBegin`/`LoopEnd` expressions around each loop body.

Inner loops are handled first, so an outer loop's body starts at the inner loop's LoopBegin. A loop's
expressions must be contiguous by now (MarkLoops/FuseLoops ordered them); LoopEnd reads LoopBegin's
output so the pair stays connected, and carries the loop id the emitters look up.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError


class InsertLoops(LinearIRPass):
    name = "InsertLoops"

    def run(self, lir: LinearIR) -> bool:
        depth_of: dict[int, int] = {}
        for e in lir.expressions:
            for depth, loop_id in enumerate(e.loop_ids):
                depth_of[loop_id] = depth
        for loop_id in sorted(depth_of, key=lambda i: -depth_of[i]):
            members = [i for i, e in enumerate(lir.expressions) if loop_id in e.loop_ids]
            first, last = members[0], members[-1]
            if members != list(range(first, last + 1)):
                raise LinearIRError(f"loop {loop_id} is not contiguous in the Linear IR")
            outer = lir.expressions[first].loop_ids[:depth_of[loop_id]]
            begin = lir.insert_node("LoopBegin", [], first, {"loop_id": loop_id}, loop_ids=outer,
                                    out_shape=(), dtype="i64")
            lir.insert_node("LoopEnd", [begin.output_port(0)], last + 2, {"loop_id": loop_id},
                            loop_ids=outer, out_shape=(), dtype="i64")
        return bool(depth_of)
