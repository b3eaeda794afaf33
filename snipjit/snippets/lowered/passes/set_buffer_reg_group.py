"""SetBufferRegGroup: which buffers can share one data pointer register (graph colouring).

Buffer pointers are set at the start of each loop nest that uses them, so two buffers need different
registers only when one nest uses both while they live at different addresses (different clusters).
Those pairs are the edges of an interference graph; a greedy colouring (most constrained first) gives
each buffer a register group.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR


def colour(nodes: list[int], edges: set[frozenset]) -> dict[int, int]:
    """Greedy graph colouring, highest degree first; returns node -> colour."""
    degree = {n: sum(1 for e in edges if n in e) for n in nodes}
    colours: dict[int, int] = {}
    for n in sorted(nodes, key=lambda n: (-degree[n], n)):
        taken = {colours[m] for m in colours if frozenset((n, m)) in edges}
        colours[n] = next(c for c in range(len(nodes) + 1) if c not in taken)
    return colours


class SetBufferRegGroup(LinearIRPass):
    name = "SetBufferRegGroup"

    def run(self, lir: LinearIR) -> bool:
        buffers = {e.attrs["index"]: e for e in lir.expressions if e.op == "Buffer"}
        if not buffers:
            return False
        by_nest: dict[tuple, set[int]] = {}
        for e in lir.expressions:
            if e.op in ("Load", "Store") and e.attrs.get("buffer", ("",))[0] == "scratch":
                by_nest.setdefault(tuple(e.loop_ids[:1]), set()).add(e.attrs["buffer"][1])
        edges = {frozenset((a, b)) for used in by_nest.values() for a in used for b in used
                 if a != b and buffers[a].attrs["cluster"] != buffers[b].attrs["cluster"]}
        for b, group in colour(sorted(buffers), edges).items():
            buffers[b].attrs["reg_group"] = group
        return True
