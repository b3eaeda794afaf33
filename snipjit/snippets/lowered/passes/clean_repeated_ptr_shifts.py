"""CleanRepeatedDataPointerShifts: shift each data pointer once per loop.

Several memory ports of a loop can use the same data pointer register (two Loads of one Parameter feed
two consumers; a Load and a Store of buffers in one register group); only the first port keeps its
increment and finalization offset — otherwise the pointer would move twice per iteration.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ...symbolic import Sym
from ..linear_ir import LinearIR
from ..memory import pointer_key


class CleanRepeatedDataPointerShifts(LinearIRPass):
    name = "CleanRepeatedDataPointerShifts"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for info in lir.loop_manager.loops.values():
            seen: set[tuple] = set()
            for lp in info.ports:
                key = pointer_key(lp.port)
                if key in seen:
                    if lp.is_incremented or not lp.finalization_offset.is_zero:
                        changed = True
                    lp.is_incremented = False
                    lp.ptr_increment = lp.finalization_offset = Sym()
                else:
                    seen.add(key)
        return changed
