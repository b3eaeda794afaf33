"""The control-flow optimizer: the default pass order over the Linear IR, extensible by position."""
from __future__ import annotations

from ..pass_manager import PassPipeline, PositionedPass
from .passes.allocate_buffers import AllocateBuffers
from .passes.clean_repeated_ptr_shifts import CleanRepeatedDataPointerShifts
from .passes.decompose_reduce import DecomposeReduce
from .passes.fuse_loops import FuseLoops
from .passes.init_loops import InitLoops
from .passes.insert_broadcast_move import InsertBroadcastMove
from .passes.insert_buffers import InsertBuffers
from .passes.insert_load_store import InsertLoadStore
from .passes.insert_loops import InsertLoops
from .passes.load_movebroadcast_to_broadcastload import LoadMoveBroadcastToBroadcastLoad
from .passes.mark_loops import MarkLoops
from .passes.propagate_layout import PropagateLayout


def control_flow_pipeline(loop_depth: int = 1, extra: list[PositionedPass] = ()) -> PassPipeline:
    pipeline = PassPipeline([
        MarkLoops(loop_depth), FuseLoops(), DecomposeReduce(), InsertBuffers(), InsertLoadStore(), InitLoops(),
        InsertLoops(), InsertBroadcastMove(), LoadMoveBroadcastToBroadcastLoad(), AllocateBuffers(),
        CleanRepeatedDataPointerShifts(), PropagateLayout(),
    ])
    for p in extra:
        pipeline.insert(p)
    return pipeline
