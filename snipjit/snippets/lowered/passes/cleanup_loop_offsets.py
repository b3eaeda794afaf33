"""CleanupLoopOffsets: fold finalization offsets into the enclosing loop's pointer increments.

When an inner loop ends right before its outer loop's end, the inner finalization offset of a pointer
and the outer increment of the same pointer are applied back to back; their sum becomes the outer
increment (for planar data they often cancel to zero). An outermost loop's offset is dropped when no
later expression uses that pointer (the kernel recomputes every data pointer for each iteration of its
parallel domain) and for scratch buffers (their pointers are set again where each nest begins); it is
kept when a later nest reads the same input again.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ...symbolic import Sym
from ..linear_ir import LinearIR
from ..memory import pointer_key


class CleanupLoopOffsets(LinearIRPass):
    name = "CleanupLoopOffsets"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        exprs = lir.expressions
        for i, e in enumerate(exprs):
            if e.op != "LoopEnd":
                continue
            info = lir.loop_manager[e.attrs["loop_id"]]
            if not e.loop_ids:
                later = {tuple(x.attrs["buffer"]) for x in exprs[i + 1:] if "buffer" in x.attrs}
                for lp in info.ports:
                    key = pointer_key(lp.port)
                    if key[0] == "scratch" or key not in later:
                        changed |= not lp.finalization_offset.is_zero
                        lp.finalization_offset = Sym()
                continue
            nxt = exprs[i + 1] if i + 1 < len(exprs) else None
            if nxt is None or nxt.op != "LoopEnd" or nxt.attrs["loop_id"] != e.loop_ids[-1]:
                continue
            outer = lir.loop_manager[nxt.attrs["loop_id"]]
            outer_ports = {pointer_key(lp.port): lp for lp in outer.ports if lp.is_incremented}
            for lp in info.ports:
                target = outer_ports.get(pointer_key(lp.port))
                if target is None or lp.finalization_offset.is_zero:
                    continue
                target.ptr_increment = target.ptr_increment + lp.finalization_offset
                lp.finalization_offset = Sym()
                changed = True
        return changed
