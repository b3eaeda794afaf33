"""SolveBufferMemory: place buffer clusters in the per-thread scratchpad with the least memory.

A buffer holds one row of the innermost loop, or every row of a row loop (the Buffers of a Brgemm computing
a block of rows), so sizes and offsets are counted in rows; clusters whose lifetimes (first store to last
load, over the whole of a row loop holding the access) do not overlap share rows. The placement is
the graph-level memory solver's, on unit sizes. The scratchpad needs `lir.scratch_rows` rows per thread.
"""
from __future__ import annotations

from ....memory.solver import ALIGNMENT, BufferRequest, solve_buffer_memory
from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError
from .define_buffer_clusters import buffer_accesses


class SolveBufferMemory(LinearIRPass):
    name = "SolveBufferMemory"

    def run(self, lir: LinearIR) -> bool:
        buffers = [e for e in lir.expressions if e.op == "Buffer"]
        uses = buffer_accesses(lir)
        extent = _outer_loop_extents(lir)
        spans: dict[int, list[int]] = {}
        rows: dict[int, int] = {}
        for e in buffers:
            rows[e.attrs["cluster"]] = max(rows.get(e.attrs["cluster"], 1), _rows(e.out_descs[0].shape))
            use = uses.get(e.attrs["index"], {"store": [], "load": []})
            points = [p for i in use["store"] + use["load"] for p in extent.get(i, (i, i))]
            span = spans.setdefault(e.attrs["cluster"], [min(points), max(points)])
            span[0], span[1] = min(span[0], min(points)), max(span[1], max(points))
        plan = solve_buffer_memory([BufferRequest(c, ALIGNMENT * rows[c], s[0], s[1]) for c, s in spans.items()])
        for e in buffers:
            e.attrs["offset"] = plan.offsets[e.attrs["cluster"]] // ALIGNMENT
        lir.scratch_rows = plan.arena_size // ALIGNMENT
        return bool(buffers)


def _rows(shape: tuple) -> int:
    """Rows of the innermost dim a Buffer holds: one, or every row of the loop nests around a row loop."""
    n = 1
    for d in shape[:-1]:
        if not isinstance(d, int):
            raise LinearIRError(f"a Buffer of {list(shape)}: its rows must be static")
        n *= d
    return n


def _outer_loop_extents(lir: LinearIR) -> dict[int, tuple[int, int]]:
    """For an expression inside a loop that holds other loops (a row loop around nests), the first and last
    position of that loop: a buffer accessed there is live in all of it, from one row to the next."""
    members: dict[int, list[int]] = {}
    for i, e in enumerate(lir.expressions):
        if len(e.loop_ids) > 1:
            members.setdefault(e.loop_ids[0], []).append(i)
    out: dict[int, tuple[int, int]] = {}
    for i, e in enumerate(lir.expressions):
        if e.loop_ids and e.loop_ids[0] in members:
            out[i] = (min(members[e.loop_ids[0]]), max(members[e.loop_ids[0]]))
    return out
