"""InsertLoadStore: make memory access explicit.

Every consumer of a Parameter or Buffer gets its own `Load` right before it (inside the consumer's
loops), and every Result or Buffer gets a `Store` right after the expression producing its value. A port
that is size 1 along the innermost dim while the master is not (a broadcast input, a reduced output)
moves one element (`count=1`), and so does any access outside loops; the others move full vectors. Loads and Stores name their memory
(`buffer=("param"|"result"|"scratch", index)`) so the emitters find its data pointer even in loop copies.
A block operation (`Brgemm`) gets no Loads or Stores: its `memory` attribute names what it reads and writes
in the same way.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ..linear_ir import LinearIR, LinearIRError
from ..memory import BLOCK_OPS, update_loop_ports

_SOURCES = {"Parameter": "param", "Buffer": "scratch"}
_SINKS = {"Result": "result", "Buffer": "scratch"}


class InsertLoadStore(LinearIRPass):
    name = "InsertLoadStore"

    def run(self, lir: LinearIR) -> bool:
        changed = False
        for mem in [e for e in lir.expressions if e.op in _SOURCES]:
            for consumer in mem.consumers(0):
                if consumer.expr.op in BLOCK_OPS:
                    continue
                count = self.count(lir, mem.out_descs[0].shape, consumer.expr.loop_ids)
                if consumer.expr.op == "Result":
                    raise LinearIRError(f"body input '{mem.attrs['name']}' is also a body output")
                load = lir.insert_node("Load", [mem.output_port(0)], lir.index(consumer.expr),
                                       {"count": count, "buffer": (_SOURCES[mem.op], mem.attrs["index"])},
                                       loop_ids=consumer.expr.loop_ids, consumers=[consumer], dtype=mem.dtype)
                load.in_descs[0].layout = consumer.descriptor.layout
                load.in_descs[0].subtensor = load.out_descs[0].subtensor = (count,)
                changed = True
        for mem in [e for e in lir.expressions if e.op in _SINKS]:
            src = mem.inputs[0].source
            if src.expr.op in BLOCK_OPS:
                continue
            if src.expr.op in ("Parameter", "Scalar"):
                raise LinearIRError(f"body output '{mem.attrs.get('name')}' is not computed by the kernel")
            count = self.count(lir, src.descriptor.shape, src.expr.loop_ids)
            store = lir.insert_node("Store", [src], lir.index(src.expr) + 1,
                                    {"count": count, "buffer": (_SINKS[mem.op], mem.attrs["index"])},
                                    loop_ids=src.expr.loop_ids, consumers=[mem.input_port(0)], dtype=mem.dtype)
            store.in_descs[0].subtensor = store.out_descs[0].subtensor = (count,)
            changed = True
        for e in lir.expressions:
            if e.op in BLOCK_OPS:
                e.attrs["memory"] = [self.memory(e, c.source.expr) for c in e.inputs] + [self.written(e)]
                changed = True
        for loop_id in lir.loop_manager.loops:
            update_loop_ports(lir, loop_id)
        return changed

    @staticmethod
    def memory(block, mem) -> tuple:
        if mem.op not in _SOURCES:
            raise LinearIRError(f"{block.name} reads {mem.name}, not memory (run InsertBuffers first)")
        return (_SOURCES[mem.op], mem.attrs["index"])

    @staticmethod
    def written(block) -> tuple:
        """Where a block operation writes its result: the one Result or Buffer reading it."""
        sinks = [c.expr for c in block.consumers(0)]
        if len(sinks) != 1 or sinks[0].op not in _SINKS:
            raise LinearIRError(f"{block.name} must write one Result or Buffer, not {[x.name for x in sinks]}")
        return (_SINKS[sinks[0].op], sinks[0].attrs["index"])

    @staticmethod
    def count(lir: LinearIR, shape: tuple, loop_ids) -> int:
        """One element outside loops (a per-row value: no loop gives a tail mask) or for a port that is
        size 1 along the innermost dim; else a full vector."""
        inner_master = lir.master_shape[-1] if lir.master_shape else 1
        one = not loop_ids or (shape and shape[-1] == 1 and inner_master != 1)
        return 1 if one else lir.vector_lanes


__all__ = ["InsertLoadStore"]
