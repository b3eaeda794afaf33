"""InitLiveRanges: give every value an abstract register and compute its live interval.

Data values get "vec" registers; data pointers (Parameter/Result) and loop counters (LoopBegin) get
"gpr" registers. A value's interval runs from its definition to its last use, extended to the end of
any loop that uses it without defining it (the value must survive every iteration). Parameters and
Scalars are set once, before the kernel's loop over its parallel domain, so they live to the end (a
Scalar rematerialised by InsertRegSpills is made where it is used instead). Each expression's
`live_regs` are the registers live across it. An accumulator (`inplace=k`) writes the register of its
input k, whose interval then lasts until the accumulated value's last use. Intervals are kept in
`lir.live_intervals`.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from ..expression import Reg
from ..memory import BLOCK_OPS

_NO_VALUE = ("Store", "Result", "LoopEnd", "Spill", "Buffer") + BLOCK_OPS   # what writes memory holds no value
_GPR_OPS = ("Parameter", "Result", "LoopBegin")


class InitLiveRanges(LinearIRPass):
    name = "InitLiveRanges"

    def run(self, lir: LinearIR) -> bool:
        loop_end_at = {e.attrs["loop_id"]: i for i, e in enumerate(lir.expressions) if e.op == "LoopEnd"}
        counters = {"vec": 0, "gpr": 0}
        intervals: dict[Reg, tuple[int, int]] = {}
        for i, e in enumerate(lir.expressions):
            for k, d in enumerate(e.in_descs):
                d.reg = e.inputs[k].source.descriptor.reg if e.op != "Result" else None
            if e.op == "Result":
                reg = Reg("gpr", counters["gpr"])
                counters["gpr"] += 1
                e.in_descs[0].reg = reg
                intervals[reg] = (0, len(lir.expressions))
                continue
            if e.op in _NO_VALUE:
                for d in e.out_descs:
                    d.reg = None
                continue
            for k, d in enumerate(e.out_descs):
                kind = "gpr" if e.op in _GPR_OPS else "vec"
                if "inplace" in e.attrs:
                    reg = e.in_descs[e.attrs["inplace"]].reg
                else:
                    reg = Reg(kind, counters[kind])
                    counters[kind] += 1
                d.reg = reg
                end = intervals[reg][1] if reg in intervals else i
                for c in e.outputs[k].consumers:
                    j = lir.index(c.expr)
                    outer = [l for l in c.expr.loop_ids if l not in e.loop_ids]
                    end = max(end, j, *(loop_end_at.get(l, j) for l in outer))
                if e.op == "Parameter" or (e.op == "Scalar" and not e.attrs.get("rematerialized")):
                    end = len(lir.expressions)   # set once before the parallel domain's loop: live in all of it
                intervals[reg] = (intervals[reg][0] if reg in intervals else i, end)
        for i, e in enumerate(lir.expressions):
            e.live_regs = {r for r, (s, t) in intervals.items() if s < i < t}
        lir.live_intervals = intervals
        # an accumulator lives in one register from its Fill to its last use: it cannot be spilled
        lir.unspillable = {e.out_descs[0].reg for e in lir.expressions if e.op in ("Fill", "Accumulate")}
        return True
