"""MarkLoops: group expressions into loop nests over the innermost dims of the master shape.

Each computational expression gets loop ids for dims R-depth .. R-1 (outermost first); the dims before
them form the kernel's parallel domain, which the KernelEmitter walks. Consecutive expressions share a
nest while their loop domains (their sizes on the loop dims) agree; a new nest starts where they differ,
and FuseLoops merges what can be merged. A reduction (`ReduceLast`) accumulates in the nest of its input,
and its result exists only once that nest has ended: an expression reading it starts a new nest.

Expressions that broadcast along every loop dim (size 1 where the master is not, such as the statistics
of a normalisation after their reductions) run outside the loops, once per iteration of the parallel
domain; those that do not depend on the current nest are hoisted before it. Scalars go first. A block
operation (`Brgemm`) ends the open nest and runs outside loops: it walks its blocks itself.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ...symbolic import Sym
from ..expression import Expression
from ..linear_ir import LinearIR
from ..loop_info import LoopInfo
from ..memory import BLOCK_OPS, LOOP_FREE_OPS, update_loop_ports


class MarkLoops(LinearIRPass):
    name = "MarkLoops"

    def __init__(self, loop_depth: int = 1):
        self.loop_depth = loop_depth

    def run(self, lir: LinearIR) -> bool:
        rank = len(lir.master_shape)
        depth = min(self.loop_depth, rank)
        lir.parallel_rank = rank - depth
        dims = list(range(rank - depth, rank))
        params = [e for e in lir.expressions if e.op == "Parameter"]
        scalars = [e for e in lir.expressions if e.op == "Scalar"]
        rest = [e for e in lir.expressions if e.op not in ("Parameter", "Scalar")]
        ordered: list[Expression] = params + scalars
        nest_start = len(ordered)          # where the open nest begins in `ordered`
        current: tuple | None = None       # the open nest's domain
        ids: list[int] = []
        pending: set[int] = set()          # values only ready once the open nest ends
        for e in rest:
            if e.op in LOOP_FREE_OPS:
                ordered.append(e)
                continue
            if e.op in BLOCK_OPS:   # after the open nest (it may read what the nest wrote), outside loops
                ordered.append(e)
                current, pending, nest_start = None, {id(e)}, len(ordered)
                continue
            waits = any(id(c.source.expr) in pending for c in e.inputs)
            domain = self.domain(lir, e, dims)
            if self.broadcasts_everywhere(lir, domain, dims):
                if waits:
                    pending.add(id(e))
                    current = None     # placed after the nest: the nest must end here
                    ordered.append(e)
                else:
                    ordered.insert(nest_start, e)
                    nest_start += 1
                continue
            if domain != current or waits:
                current, pending, nest_start = domain, set(), len(ordered)
                ids = [lir.loop_manager.add(LoopInfo(d, Sym.const(1) if size == 1 else lir.dim(d),
                                                     lir.vector_lanes if d == rank - 1 else 1))
                       for d, size in zip(dims, domain)]
            e.loop_ids = list(ids)
            if e.op == "ReduceLast":
                pending.add(id(e))
            ordered.append(e)
        lir.expressions = ordered
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return bool(lir.loop_manager.loops)

    @staticmethod
    def domain(lir: LinearIR, e: Expression, dims: list[int]) -> tuple:
        """Sizes of the loop dims the expression covers: 1 where it broadcasts, else the master dim.
        A reduction covers the domain of its input, where it accumulates."""
        shape = e.in_descs[0].shape if e.op == "ReduceLast" or not e.out_descs else e.out_descs[0].shape
        return tuple(1 if shape[d] == 1 else lir.master_shape[d] for d in dims)

    @staticmethod
    def broadcasts_everywhere(lir: LinearIR, domain: tuple, dims: list[int]) -> bool:
        return all(size == 1 and lir.master_shape[d] != 1 for size, d in zip(domain, dims))
