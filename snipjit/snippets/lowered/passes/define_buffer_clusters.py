"""DefineBufferClusters: buffers that can live in the same memory form a cluster.

When a loop reads buffer A for the last time and writes buffer B of the same size, element i of B is
written after element i of A was read, in the same iteration: B can take A's memory (in place). So can
two buffers of every row of a row loop (a Brgemm's scores and probabilities) when B's row r is written
after A's row r was last read, in the same row iteration. Such buffers share a cluster; every other buffer
is a cluster of its own. Clusters are what SolveBufferMemory places.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from ..memory import BLOCK_OPS


def buffer_accesses(lir: LinearIR) -> dict[int, dict[str, list[int]]]:
    """Buffer index -> {"store": [expression positions], "load": [...]} of its Stores and Loads."""
    uses: dict[int, dict[str, list[int]]] = {}
    for i, e in enumerate(lir.expressions):
        if e.op in ("Load", "Store", "BroadcastLoad") and e.attrs.get("buffer", ("",))[0] == "scratch":
            kind = "store" if e.op == "Store" else "load"
            uses.setdefault(e.attrs["buffer"][1], {"store": [], "load": []})[kind].append(i)
        for k, key in enumerate(e.attrs.get("memory", ()) if e.op in BLOCK_OPS else ()):
            if key[0] == "scratch":   # a block operation's operands, then its result
                kind = "store" if k == len(e.inputs) else "load"
                uses.setdefault(key[1], {"store": [], "load": []})[kind].append(i)
    return uses


class DefineBufferClusters(LinearIRPass):
    name = "DefineBufferClusters"

    def run(self, lir: LinearIR) -> bool:
        buffers = {e.attrs["index"]: e for e in lir.expressions if e.op == "Buffer"}
        uses = buffer_accesses(lir)
        cluster = {b: b for b in buffers}
        for b, use in sorted(uses.items()):
            for a, other in uses.items():
                if a == b or cluster[a] != a or not use["store"] or not other["load"]:
                    continue
                last_read = max(other["load"])
                loops_a = lir.expressions[last_read].loop_ids
                first_write = min(use["store"])
                shape = buffers[a].out_descs[0].shape
                loops_b = lir.expressions[first_write].loop_ids
                rows = len(shape) > 1 and shape[-2] != 1 and len(loops_a) > 1 and loops_b[:1] == loops_a[:1]
                if shape == buffers[b].out_descs[0].shape and loops_a and (loops_b == loops_a or rows) and \
                        first_write > last_read and max(other["store"], default=-1) < last_read and \
                        not any(cluster[x] == a for x in cluster if x != a):
                    cluster[b] = a
                    break
        for b, e in buffers.items():
            e.attrs["cluster"] = cluster[b]
        return any(cluster[b] != b for b in cluster)
