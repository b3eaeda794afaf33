"""AllocateBuffers: the memory of the kernel's buffers, in three steps.

DefineBufferClusters (which buffers can share memory), SetBufferRegGroup (which can share a pointer
register; it needs the clusters, so it runs second here), SolveBufferMemory (offsets in the per-thread
scratchpad from the clusters' lifetimes). Loads and Stores of a buffer then name its register group.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from ..memory import BLOCK_OPS
from .define_buffer_clusters import DefineBufferClusters
from .set_buffer_reg_group import SetBufferRegGroup
from .solve_buffer_memory import SolveBufferMemory


class AllocateBuffers(LinearIRPass):
    name = "AllocateBuffers"

    def run(self, lir: LinearIR) -> bool:
        lir.scratch_rows = 0
        buffers = {e.attrs["index"]: e for e in lir.expressions if e.op == "Buffer"}
        if not buffers:
            return False
        for step in (DefineBufferClusters(), SetBufferRegGroup(), SolveBufferMemory()):
            step.run(lir)
        for e in lir.expressions:
            if e.op in ("Load", "Store") and e.attrs.get("buffer", ("",))[0] == "scratch":
                b = buffers[e.attrs["buffer"][1]]
                e.attrs["buffer"] = ("scratch", b.attrs["reg_group"])
                e.attrs["row"] = b.attrs["offset"]
            if e.op in BLOCK_OPS:   # a block operation addresses its rows itself: (scratch, group, row)
                e.attrs["memory"] = [key if key[0] != "scratch" else
                                     ("scratch", buffers[key[1]].attrs["reg_group"], buffers[key[1]].attrs["offset"])
                                     for key in e.attrs["memory"]]
        return True
