"""AssignRegisters: map abstract registers to physical ones, per register class.

Linear scan over the live intervals: a physical register is reused once the interval holding it has
ended. If a class runs out, the values that would overflow are recorded in `lir.spill_candidates`
(furthest end first) for InsertRegSpills, and nothing is assigned. Accumulators are never chosen.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError
from ..expression import Reg


class AssignRegisters(LinearIRPass):
    name = "AssignRegisters"

    def __init__(self, physical: dict[str, int]):
        self.physical = physical   # register class -> how many the target has

    def run(self, lir: LinearIR) -> bool:
        mapping: dict[Reg, Reg] = {}
        spills: list[Reg] = []
        for kind, count in self.physical.items():
            items = sorted(((s, t, r) for r, (s, t) in lir.live_intervals.items() if r.kind == kind),
                           key=lambda x: (x[0], x[1]))
            active: list[tuple[int, Reg, Reg]] = []   # (end, abstract, physical)
            free = list(range(count))
            for start, end, reg in items:
                for item in [a for a in active if a[0] <= start]:
                    active.remove(item)
                    free.append(item[2].index)
                if not free:
                    pinned = getattr(lir, "unspillable", set())
                    options = [a for a in active + [(end, reg, None)] if a[1] not in pinned]
                    if not options:
                        raise LinearIRError(f"more accumulators are live at once than the {count} {kind} "
                                            "registers can hold")
                    victim = max(options, key=lambda a: a[0])
                    spills.append(victim[1])
                    if victim[1] is reg:
                        continue
                    active.remove(victim)
                    free.append(victim[2].index)
                free.sort()
                phys = Reg(kind, free.pop(0))
                mapping[reg] = phys
                active.append((end, reg, phys))
        lir.spill_candidates = spills
        if spills:
            return False
        for e in lir.expressions:
            for d in e.in_descs + e.out_descs:
                if d.reg is not None:
                    d.reg = mapping[d.reg]
            e.live_regs = {mapping[r] for r in e.live_regs}
        return True
