"""MarkLoops: group expressions into loop nests over the innermost dims of the master shape.

Each computational expression gets loop ids for dims R-depth .. R-1 (outermost first); the dims before
them form the kernel's parallel domain, which the KernelEmitter walks. Consecutive expressions share a
nest while their loop domains (their output sizes on the loop dims) agree; a new nest starts where they
differ, and FuseLoops merges what can be merged. Scalars are hoisted before all loops.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ...symbolic import Sym
from ..linear_ir import LinearIR
from ..loop_info import LoopInfo
from ..memory import LOOP_FREE_OPS, update_loop_ports


class MarkLoops(LinearIRPass):
    name = "MarkLoops"

    def __init__(self, loop_depth: int = 1):
        self.loop_depth = loop_depth

    def run(self, lir: LinearIR) -> bool:
        rank = len(lir.master_shape)
        depth = min(self.loop_depth, rank)
        lir.parallel_rank = rank - depth
        params = [e for e in lir.expressions if e.op == "Parameter"]
        scalars = [e for e in lir.expressions if e.op == "Scalar"]
        rest = [e for e in lir.expressions if e.op not in ("Parameter", "Scalar")]
        lir.expressions = params + scalars + rest
        dims = list(range(rank - depth, rank))
        current: tuple | None = None
        ids: list[int] = []
        for e in rest:
            if e.op in LOOP_FREE_OPS:
                continue
            domain = self.domain(lir, e, dims)
            if domain != current:
                current = domain
                ids = [lir.loop_manager.add(LoopInfo(d, Sym.const(1) if size == 1 else lir.dim(d),
                                                     lir.vector_lanes if d == rank - 1 else 1))
                       for d, size in zip(dims, domain)]
            e.loop_ids = list(ids)
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return bool(lir.loop_manager.loops)

    @staticmethod
    def domain(lir: LinearIR, e, dims: list[int]) -> tuple:
        """Sizes of the loop dims the expression covers: 1 where it broadcasts, else the master dim."""
        shape = e.out_descs[0].shape if e.out_descs else e.in_descs[0].shape
        return tuple(1 if shape[d] == 1 else lir.master_shape[d] for d in dims)
