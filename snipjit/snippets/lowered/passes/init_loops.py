"""InitLoops: compute each loop port's pointer increment and finalization offset.

Along a loop over dim d, a port's pointer moves by the buffer's stride along d per element (times the
loop increment per iteration), unless the buffer broadcasts along d (size 1) or the loop does a single
element. After the loop, the finalization offset `-work_amount * increment` brings it back.
"""
from __future__ import annotations

from ...pass_manager import LinearIRPass
from ...symbolic import Sym
from ..linear_ir import LinearIR
from ..memory import memory_of, memory_shape, row_pitch, stride

_ITEMSIZE = {"f32": 4, "bool": 1, "f16": 2, "i32": 4, "i64": 8}


class InitLoops(LinearIRPass):
    name = "InitLoops"

    def run(self, lir: LinearIR) -> bool:
        for info in lir.loop_manager.loops.values():
            for lp in info.ports:
                shape = memory_shape(lp.port)
                layout = lp.port.descriptor.layout
                mem = memory_of(lp.port)
                # scratch Buffers hold every value as a 4-byte lane (bool masks included)
                lp.data_size = 4 if mem.op == "Buffer" else _ITEMSIZE.get(mem.dtype, 4)
                lp.is_incremented = shape[info.dim] != 1 and info.work_amount.value != 1
                if lp.is_incremented:
                    lp.ptr_increment = stride(lir, shape, layout, info.dim, row_pitch(mem))
                    lp.finalization_offset = -(info.work_amount * lp.ptr_increment)
                else:
                    lp.ptr_increment = lp.finalization_offset = Sym()
        return bool(lir.loop_manager.loops)
