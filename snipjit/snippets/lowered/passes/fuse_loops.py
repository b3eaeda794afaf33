"""FuseLoops: merge neighbouring loop nests that iterate the same way into one nest.

Two nests over the same dims fuse level by level when each pair of loops has the same work amount, or
one of them does a single iteration (a broadcast along that dim: its expressions are simply recomputed
in every iteration of the other). Fused expressions keep the first nest's ids; the second nest's
loops are dropped. Data flows from the first nest to the second inside one iteration, so no buffer is
needed between them. Nests separated by other expressions, or where the second reads a reduction the
first accumulates (complete only after the first nest), never fuse. Such nests still share their outer
loops when those iterate the same way (`fuse_outer`): a row loop then holds the nests of a softmax, one
after the other, as in a kernel whose Brgemms compute a block of rows.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR
from ..memory import update_loop_ports


class FuseLoops(LinearIRPass):
    name = "FuseLoops"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        nests = self.nests(lir)
        i = 0
        while i + 1 < len(nests):
            a, b = nests[i], nests[i + 1]
            if self.can_fuse(lir, a, b) and self.independent(lir, a, b):
                self.fuse(lir, a, b)
                nests.pop(i + 1)
                changed = True
            else:
                i += 1
        changed |= self.fuse_outer(lir, nests)
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return changed

    def fuse_outer(self, lir: LinearIR, nests: list[list[int]]) -> bool:
        """Neighbouring nests whose outer loops iterate the same way (rows) share them: each row then runs
        the first nest's inner loop, then the second's, so a reduction the first accumulates is complete
        for the second in the same row."""
        changed = False
        for i in range(len(nests) - 1):
            a, b = nests[i], nests[i + 1]
            if len(a) < 2 or len(a) != len(b) or a[:-1] == b[:-1] or not self.adjacent(lir, a, b):
                continue
            if not all(self.same_iterations(lir, x, y) for x, y in zip(a[:-1], b[:-1])):
                continue
            for e in lir.expressions:
                if e.loop_ids == b:
                    e.loop_ids = a[:-1] + [b[-1]]
            for y in b[:-1]:
                lir.loop_manager.remove(y)
            nests[i + 1] = a[:-1] + [b[-1]]
            changed = True
        return changed

    @staticmethod
    def same_iterations(lir: LinearIR, x: int, y: int) -> bool:
        lx, ly = lir.loop_manager[x], lir.loop_manager[y]
        return lx.dim == ly.dim and lx.increment == ly.increment and lx.work_amount == ly.work_amount

    @staticmethod
    def adjacent(lir: LinearIR, a: list[int], b: list[int]) -> bool:
        index_a = [i for i, e in enumerate(lir.expressions) if e.loop_ids == a]
        index_b = [i for i, e in enumerate(lir.expressions) if e.loop_ids == b]
        return bool(index_a and index_b) and index_a[-1] + 1 == index_b[0]

    @staticmethod
    def nests(lir: LinearIR) -> list[list[int]]:
        out: list[list[int]] = []
        for e in lir.expressions:
            if e.loop_ids and (not out or out[-1] != e.loop_ids):
                out.append(list(e.loop_ids))
        return out

    @classmethod
    def independent(cls, lir: LinearIR, a: list[int], b: list[int]) -> bool:
        """Adjacent nests, and nothing in `b` reads a reduction accumulated in `a`."""
        if not cls.adjacent(lir, a, b):
            return False
        return not any(c.source.expr.loop_ids == a and c.source.expr.op in ("ReduceLast", "Accumulate")
                       for e in lir.expressions if e.loop_ids == b for c in e.inputs)

    @staticmethod
    def can_fuse(lir: LinearIR, a: list[int], b: list[int]) -> bool:
        if len(a) != len(b):
            return False
        for la, lb in zip(a, b):
            x, y = lir.loop_manager[la], lir.loop_manager[lb]
            if x.dim != y.dim or x.increment != y.increment:
                return False
            one = x.work_amount.value == 1 or y.work_amount.value == 1
            if x.work_amount != y.work_amount and not one:
                return False
        return True

    @staticmethod
    def fuse(lir: LinearIR, a: list[int], b: list[int]) -> None:
        for la, lb in zip(a, b):
            x, y = lir.loop_manager[la], lir.loop_manager[lb]
            if x.work_amount.value == 1:
                x.work_amount = y.work_amount
            lir.loop_manager.remove(lb)
        for e in lir.expressions:
            if e.loop_ids == b:
                e.loop_ids = list(a)
