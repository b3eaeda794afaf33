"""OptimizeLoopSingleEvaluation: loops whose body runs at most once need no back edge.

A loop whose work amount equals its increment, or a tail loop, is marked `evaluate_once`; the emitter
then emits its body as straight-line code. For a full single iteration, the per-iteration pointer
increments move into the finalization offsets (one shift after the body instead of one per iteration).
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ...symbolic import Sym
from ..linear_ir import LinearIR


class OptimizeLoopSingleEvaluation(LinearIRPass):
    name = "OptimizeLoopSingleEvaluation"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for info in lir.loop_manager.loops.values():
            if info.evaluate_once:
                continue
            if info.is_tail:
                info.evaluate_once = changed = True
                continue
            if info.work_amount.value is not None and info.work_amount.value == info.increment:
                info.evaluate_once = changed = True
                for lp in info.ports:
                    if lp.is_incremented:
                        lp.finalization_offset = lp.finalization_offset + lp.ptr_increment * info.increment
                        lp.ptr_increment = Sym()
        return changed
