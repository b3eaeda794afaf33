"""InsertBuffers: route values that cross from one loop nest into another through memory.

A value computed in one nest and read in a later nest over the same dims (a softmax's exponentials,
read again after their sum is known) cannot stay in a register: it goes into a `Buffer` — one row of the
innermost loop in the kernel's per-thread scratchpad, which AllocateBuffers places. The Buffer sits
between the two nests; InsertLoadStore then stores into it in the producer's nest and loads from it in
each consumer's. A block operation (`Brgemm`) reads and writes memory itself: Buffers carry rows between it
and the loop nests, every row the nests iterate over when a row loop holds them.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError
from ..memory import BLOCK_OPS, MEMORY_OPS, update_loop_ports


class InsertBuffers(LinearIRPass):
    name = "InsertBuffers"

    def run(self, lir: LinearIR) -> bool:
        count = 0
        row, block = self.shapes(lir)
        for e in list(lir.expressions):
            if not e.loop_ids or e.op == "Accumulate":
                continue   # accumulators are read after their loop by Horizon, in a register
            for k, conn in enumerate(e.outputs):
                crossing = [c for c in conn.consumers
                            if c.expr.loop_ids and c.expr.loop_ids[:len(e.loop_ids)] != e.loop_ids]
                if not crossing:
                    continue
                end = max(i for i, x in enumerate(lir.expressions) if x.loop_ids == e.loop_ids)
                same_rows = all(c.expr.loop_ids[:-1] == e.loop_ids[:-1] for c in crossing)
                lir.insert_node("Buffer", [e.output_port(k)], end + 1, {"index": count},
                                loop_ids=e.loop_ids[:-1] if same_rows else (),   # (inside a shared row loop)
                                out_shape=row if same_rows else block, dtype=e.dtype, consumers=crossing)
                count += 1
        count = self.around_blocks(lir, count)
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return count > 0

    @staticmethod
    def shapes(lir: LinearIR) -> tuple[tuple, tuple]:
        """A Buffer of one row of the innermost loop, and one of every row of the loop nests (with a row loop
        around the nests: what one nest writes for another in the same row needs one row)."""
        rank = len(lir.master_shape)
        row = (1,) * (rank - 1) + (lir.master_shape[-1],)
        return row, (1,) * lir.parallel_rank + tuple(lir.master_shape[lir.parallel_rank:])

    @classmethod
    def around_blocks(cls, lir: LinearIR, count: int) -> int:
        """A block operation reads and writes memory: what it reads from a loop nest is stored into a
        Buffer after that nest, and what loop nests (or another block) read of its result goes through a
        Buffer it writes. A body output it makes is written straight."""
        _, block = cls.shapes(lir)
        for e in [x for x in lir.expressions if x.op in BLOCK_OPS]:
            for k, conn in enumerate(e.inputs):
                src = conn.source
                if src.expr.op in MEMORY_OPS:
                    continue
                if not src.expr.loop_ids or src.descriptor.shape[-1] != lir.master_shape[-1]:
                    raise LinearIRError(f"{e.name} reads {src.expr.name}, which is not a row of the loop nests")
                outer = src.expr.loop_ids[0]   # after the whole row loop holding its nest, if any
                end = max(i for i, x in enumerate(lir.expressions) if x.loop_ids[:1] == [outer])
                lir.insert_node("Buffer", [src], end + 1, {"index": count}, loop_ids=(), out_shape=block,
                                dtype=src.expr.dtype, consumers=[e.input_port(k)])
                count += 1
            readers = [c for c in e.consumers(0) if c.expr.op not in MEMORY_OPS]
            if readers:
                shape = e.out_descs[0].shape
                if shape[-1] != lir.master_shape[-1]:
                    raise LinearIRError(f"{e.name}: its result is read by the loop nests, not a row of them")
                if all(c.expr.op in BLOCK_OPS for c in readers):   # a block for blocks (a packed B): its rows
                    shape = (1,) * (len(shape) - 2) + tuple(shape[-2:])
                else:
                    shape = block
                lir.insert_node("Buffer", [e.output_port(0)], lir.index(e) + 1, {"index": count}, loop_ids=(),
                                out_shape=shape, dtype=e.dtype, consumers=readers)
                count += 1
        return count
