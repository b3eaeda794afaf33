"""InsertBuffers: find values that cross from one loop nest into another.

Such a value must go through memory (a `Buffer` in the kernel's scratchpad). Elementwise bodies always
end up in one fused nest, so nothing crosses; buffers and their allocation arrive with reductions. Until
then the pass reports a crossing as an error naming the value, and the runtime keeps that subgraph on
its reference kernels instead of compiling a wrong kernel.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError
from ..memory import LOOP_FREE_OPS


class InsertBuffers(LinearIRPass):
    name = "InsertBuffers"

    def run(self, lir: LinearIR) -> bool:
        for e in lir.expressions:
            if not e.loop_ids:
                continue
            for conn in e.outputs:
                for c in conn.consumers:
                    if c.expr.op in LOOP_FREE_OPS or c.expr.loop_ids == e.loop_ids:
                        continue
                    raise LinearIRError(f"{e.name} feeds {c.expr.name} in another loop nest; this needs a "
                                        "Buffer, which this version does not allocate yet")
        return False
