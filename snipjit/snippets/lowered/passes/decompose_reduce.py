"""DecomposeReduce: a `ReduceLast` becomes an accumulator around its loop.

    Fill (before the loop: the kind's identity in every lane)
    Accumulate (in the loop: acc = acc op x, in place; tails only update their live lanes)
    Horizon (after the loop: combine the lanes, the result in every lane; mean divides by the count)

so the reduction costs one vector op per loaded vector and one horizontal step per row. A reduction of
a value that is a single element along the innermost axis (no loop) is that element.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from ..memory import update_loop_ports

IDENTITY = {"sum": 0.0, "mean": 0.0, "max": float("-inf"), "min": float("inf"), "prod": 1.0,
            "shift_max": float("-inf")}


class DecomposeReduce(LinearIRPass):
    name = "DecomposeReduce"

    def run(self, lir: LinearIR) -> bool:
        reductions = [e for e in lir.expressions if e.op == "ReduceLast"]
        for r in reductions:
            if not r.loop_ids:   # its input is one element along the innermost axis: that is the result
                for port in r.consumers(0):
                    lir.reconnect(port, r.inputs[0].source)
                lir.remove(r)
                continue
            kind = r.attrs["kind"]
            nest = [i for i, e in enumerate(lir.expressions) if e.loop_ids == r.loop_ids]
            outer = r.loop_ids[:-1]
            loop = lir.loop_manager[r.loop_ids[-1]]
            out_shape = r.out_descs[0].shape
            fill = lir.insert_node("Fill", [], nest[0], {"value": IDENTITY[kind]}, loop_ids=outer,
                                   out_shape=out_shape, dtype=r.dtype)
            acc = lir.insert_node("Accumulate", [fill.output_port(0), r.inputs[0].source], lir.index(r),
                                  {"kind": kind, "inplace": 0}, loop_ids=r.loop_ids, out_shape=out_shape,
                                  dtype=r.dtype)
            last = max(i for i, e in enumerate(lir.expressions) if e.loop_ids == r.loop_ids)
            lir.insert_node("Horizon", [acc.output_port(0)], last + 1,
                                      {"kind": kind, "count": loop.work_amount if kind == "mean" else None},
                                      loop_ids=outer, out_shape=out_shape, dtype=r.dtype,
                                      consumers=r.consumers(0))
            lir.remove(r)
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return bool(reductions)
