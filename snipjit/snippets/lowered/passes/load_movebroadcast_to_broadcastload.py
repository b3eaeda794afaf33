"""LoadMoveBroadcastToBroadcastLoad: fuse a one-element `Load` followed by `BroadcastMove` into one
`BroadcastLoad` (a single broadcasting load instruction)."""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR


class LoadMoveBroadcastToBroadcastLoad(LinearIRPass):
    name = "LoadMoveBroadcastToBroadcastLoad"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for bm in [e for e in lir.expressions if e.op == "BroadcastMove"]:
            load = bm.inputs[0].source.expr
            if load.op != "Load" or load.attrs.get("count") != 1 or len(load.consumers(0)) != 1:
                continue
            if lir.index(load) != lir.index(bm) - 1:
                continue
            new = lir.replace_with_node([load, bm], "BroadcastLoad", {"buffer": load.attrs["buffer"]})
            new.in_descs[0].layout = load.in_descs[0].layout
            new.out_descs[0].subtensor = (lir.vector_lanes,)
            self._retarget_loop_ports(lir, load, new)
            changed = True
        return changed

    @staticmethod
    def _retarget_loop_ports(lir: LinearIR, old, new) -> None:
        for info in lir.loop_manager.loops.values():
            for lp in info.entry_points:
                if lp.port.expr is old:
                    lp.port = new.input_port(0)
