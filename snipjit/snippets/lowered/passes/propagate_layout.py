"""PropagateLayout: give Parameter and Result expressions the layout their memory ports use.

The KernelEmitter computes each buffer's offset for an iteration of the parallel domain from that
layout. All ports of one buffer must agree on it.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError


class PropagateLayout(LinearIRPass):
    name = "PropagateLayout"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for p in lir.parameters():
            layouts = {c.descriptor.layout for c in p.consumers(0)}
            if len(layouts) > 1:
                raise LinearIRError(f"parameter '{p.attrs['name']}' is read with layouts {sorted(layouts)}")
            if layouts:
                layout = layouts.pop()
                changed |= p.out_descs[0].layout != layout
                p.out_descs[0].layout = layout
        for r in lir.results():
            layout = r.inputs[0].source.descriptor.layout
            changed |= r.in_descs[0].layout != layout
            r.in_descs[0].layout = layout
        return changed
