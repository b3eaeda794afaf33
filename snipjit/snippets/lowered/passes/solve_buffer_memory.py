"""SolveBufferMemory: place buffer clusters in the per-thread scratchpad with the least memory.

Every buffer holds one row of the innermost loop (the same size), so a cluster's offset is counted in
rows; clusters whose lifetimes (first store to last load) do not overlap share rows. The placement is
the graph-level memory solver's, on unit sizes. The scratchpad needs `lir.scratch_rows` rows per thread.
"""
from __future__ import annotations

from ....memory.solver import ALIGNMENT, BufferRequest, solve_buffer_memory
from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from .define_buffer_clusters import buffer_accesses


class SolveBufferMemory(LinearIRPass):
    name = "SolveBufferMemory"

    def run(self, lir: LinearIR) -> bool:
        buffers = [e for e in lir.expressions if e.op == "Buffer"]
        uses = buffer_accesses(lir)
        spans: dict[int, list[int]] = {}
        for e in buffers:
            use = uses.get(e.attrs["index"], {"store": [], "load": []})
            points = use["store"] + use["load"]
            span = spans.setdefault(e.attrs["cluster"], [min(points), max(points)])
            span[0], span[1] = min(span[0], min(points)), max(span[1], max(points))
        plan = solve_buffer_memory([BufferRequest(c, ALIGNMENT, s[0], s[1]) for c, s in spans.items()])
        for e in buffers:
            e.attrs["offset"] = plan.offsets[e.attrs["cluster"]] // ALIGNMENT
        lir.scratch_rows = plan.arena_size // ALIGNMENT
        return bool(buffers)
