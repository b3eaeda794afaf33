"""InsertRegSpills: when a register class overflows, keep some values out of registers.

For each spill candidate, a `Spill` after its definition writes it to a stack slot and a `Reload`
before each use reads it back, so the value no longer occupies a register between the two. A Scalar
is not spilled but rematerialised: a copy of it is made right before each use (an immediate costs no
memory). The generator then reruns InitLiveRanges and AssignRegisters.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError


class InsertRegSpills(LinearIRPass):
    name = "InsertRegSpills"

    def run(self, lir: LinearIR) -> bool:
        candidates = getattr(lir, "spill_candidates", [])
        if not candidates:
            return False
        slots = getattr(lir, "spill_slots", 0)
        for reg in candidates:
            if reg.kind != "vec":
                raise LinearIRError(f"the kernel needs more {reg.kind} registers than the target has")
            owner = next((e, k) for e in lir.expressions for k, d in enumerate(e.out_descs) if d.reg == reg)
            e, k = owner
            if e.op in ("Spill", "Reload") or e.attrs.get("rematerialized"):
                raise LinearIRError("register pressure is too high even with spilling")
            consumers = e.consumers(k)
            if e.op == "Scalar":
                for c in consumers:
                    lir.insert_node("Scalar", [], lir.index(c.expr), {**e.attrs, "rematerialized": True},
                                    loop_ids=c.expr.loop_ids, out_shape=e.out_descs[0].shape, dtype=e.dtype,
                                    consumers=[c])
                lir.remove(e)
                continue
            spill = lir.insert_node("Spill", [e.output_port(k)], lir.index(e) + 1, {"slot": slots},
                                    loop_ids=e.loop_ids, out_shape=())
            for c in consumers:
                lir.insert_node("Reload", [spill.output_port(0)], lir.index(c.expr), {"slot": slots},
                                loop_ids=c.expr.loop_ids, out_shape=e.out_descs[k].shape, dtype=e.dtype,
                                consumers=[c])
            slots += 1
        lir.spill_slots = slots
        lir.spill_candidates = []
        return True
