"""InsertSpecificIterations: split a vector loop into its main iterations and a tail.

An innermost loop processes `increment` (vector lanes) elements per iteration. When its work amount is
not known to be a multiple of that, the loop body is copied right after the loop as a *tail* loop that
handles the remaining `work_amount % increment` elements with masked loads and stores, once. A loop
whose work amount is statically below the increment becomes a tail loop only. The main loop's
finalization offsets move to the tail, which ends where the whole loop would have ended.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ...symbolic import Sym
from ..expression import Expression
from ..linear_ir import LinearIR
from ..loop_info import LoopPort
from ..expression import PortConnector


class InsertSpecificIterations(LinearIRPass):
    name = "InsertSpecificIterations"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for loop_id, info in list(lir.loop_manager.loops.items()):
            if info.increment == 1 or info.is_tail:
                continue
            work = info.work_amount.value
            if work is not None and work % info.increment == 0:
                continue
            if work is not None and work < info.increment:
                info.is_tail = True
                self._mark_tail(lir, loop_id)
            else:
                self._add_tail(lir, loop_id)
            changed = True
        return changed

    @staticmethod
    def _mark_tail(lir: LinearIR, loop_id: int) -> None:
        for e in lir.expressions:
            if loop_id in e.loop_ids and e.op in ("Load", "Store", "BroadcastLoad"):
                e.attrs["tail"] = True

    def _add_tail(self, lir: LinearIR, loop_id: int) -> None:
        begin = next(i for i, e in enumerate(lir.expressions) if e.op == "LoopBegin" and e.attrs["loop_id"] == loop_id)
        end = next(i for i, e in enumerate(lir.expressions) if e.op == "LoopEnd" and e.attrs["loop_id"] == loop_id)
        info = lir.loop_manager[loop_id]
        tail = info.clone()
        tail.is_tail, tail.parent_id = True, loop_id
        tail_id = lir.loop_manager.add(tail)
        clones = self._clone_range(lir.expressions[begin:end + 1], loop_id, tail_id)
        lir.expressions[end + 1:end + 1] = clones
        self._mark_tail(lir, tail_id)
        by_old = {id(old): new for old, new in zip(lir.expressions[begin:end + 1], clones)}
        tail.entry_points = [LoopPort(by_old[id(p.port.expr)].input_port(p.port.index)) for p in info.entry_points]
        tail.exit_points = [LoopPort(by_old[id(p.port.expr)].output_port(p.port.index)) for p in info.exit_points]
        for new_port, old_port in zip(tail.ports, info.ports):
            new_port.is_incremented = old_port.is_incremented
            new_port.ptr_increment = old_port.ptr_increment
            new_port.finalization_offset = old_port.finalization_offset
            new_port.data_size = old_port.data_size
            old_port.finalization_offset = Sym()

    @staticmethod
    def _clone_range(exprs: list[Expression], old_id: int, new_id: int) -> list[Expression]:
        """Copy expressions, rewiring inputs produced inside the range to the copies; inputs from outside
        (Parameters, Scalars, outer values) are shared. The copies' outputs feed only copies and the
        memory expressions (Results) the originals fed."""
        made: dict[int, Expression] = {}
        out: list[Expression] = []
        for e in exprs:
            c = Expression(e.op, dict(e.attrs), node=e.node, dtype=e.dtype,
                           loop_ids=[new_id if l == old_id else l for l in e.loop_ids],
                           in_descs=[d.clone() for d in e.in_descs], out_descs=[d.clone() for d in e.out_descs])
            if c.op in ("LoopBegin", "LoopEnd"):
                c.attrs["loop_id"] = new_id
            for i, conn in enumerate(e.inputs):
                src = conn.source
                new_src = made[id(src.expr)].output_port(src.index) if id(src.expr) in made else src
                c.inputs.append(new_src.connector)
                new_src.connector.add_consumer(c.input_port(i))
            for i, conn in enumerate(e.outputs):
                c.outputs.append(PortConnector(c.output_port(i)))
                for port in conn.consumers:
                    if port.expr.op == "Result":
                        c.outputs[i].consumers.append(port)  # the copy stores into the same buffer
            made[id(e)] = c
            out.append(c)
        return out
