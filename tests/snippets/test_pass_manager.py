"""Positioned passes: a backend inserts its passes before or after a named pass of either pipeline (or at
the pipeline's start or end); an unknown anchor is an error; compile_subgraph runs them in place."""
import ctypes

import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.snippets.subgraph_compiler import compile_subgraph
from snipjit.snippets.dataflow.pipeline import data_flow_pipeline
from snipjit.snippets.lowered.pipeline import control_flow_pipeline
from snipjit.snippets.pass_manager import BodyPass, LinearIRPass, PassPipeline, PassPosition, PositionedPass
from snipjit.targets import get_target

DATA_FLOW = data_flow_pipeline().names
CONTROL_FLOW = control_flow_pipeline().names


class Probe(LinearIRPass):
    """Records the ops of the Linear IR when it runs."""
    name = "Probe"

    def __init__(self, seen: list):
        self.seen = seen

    def run(self, lir) -> bool:
        self.seen.append([e.op for e in lir.expressions])
        return False


class ReluToAbs(BodyPass):
    name = "ReluToAbs"

    def run(self, body) -> bool:
        for n in body.nodes:
            if n.op == "Relu":
                n.op = "Abs"
        return True


def is_subsequence(part: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(name in it for name in part)


def test_default_orders():
    assert is_subsequence(["Canonicalization", "ConvertConstantsToScalars", "ConvertPowerToPowerStatic",
                           "EliminateIdentityArithmetic"], DATA_FLOW)
    assert is_subsequence(["MarkLoops", "FuseLoops", "InsertBuffers", "InsertLoadStore", "InitLoops", "InsertLoops",
                           "InsertBroadcastMove", "LoadMoveBroadcastToBroadcastLoad", "CleanRepeatedDataPointerShifts",
                           "PropagateLayout"], CONTROL_FLOW)


@pytest.mark.parametrize("position, index", [
    (PassPosition.after("InsertLoops"), CONTROL_FLOW.index("InsertLoops") + 1),
    (PassPosition.before("InsertLoops"), CONTROL_FLOW.index("InsertLoops")),
    (PassPosition.before("MarkLoops"), 0), (PassPosition.after("PropagateLayout"), len(CONTROL_FLOW)),
    (PassPosition("", "before"), 0), (PassPosition("", "after"), len(CONTROL_FLOW)),
], ids=["after", "before", "before-first", "after-last", "start", "end"])
def test_insert_at_a_position(position, index):
    pipeline = control_flow_pipeline(extra=[PositionedPass(position, lambda: Probe([]))])
    assert pipeline.names == CONTROL_FLOW[:index] + ["Probe"] + CONTROL_FLOW[index:]


def test_unknown_anchor_raises_naming_the_passes():
    with pytest.raises(ValueError, match="no pass named 'Nope'.*MarkLoops"):
        control_flow_pipeline(extra=[PositionedPass(PassPosition.after("Nope"), lambda: Probe([]))])


def test_several_passes_at_one_anchor_keep_their_order_and_are_made_fresh():
    made = []

    def make():
        made.append(Probe([]))
        return made[-1]
    pipeline = PassPipeline([Probe([])])
    pipeline.passes[0].name = "First"
    for _ in range(2):
        pipeline.insert(PositionedPass(PassPosition.after("First"), make))
    assert pipeline.passes[1:] == made[::-1] and made[0] is not made[1]


def test_compile_subgraph_runs_positioned_passes_where_they_belong():
    seen: list = []
    order: list = []
    body = parse_graph("graph(x: f32[40]) -> [y] { [y] = Relu(x) }")
    cs = compile_subgraph(
        body, get_target(),
        data_flow_passes=[PositionedPass(PassPosition.before("ConvertConstantsToScalars"), ReluToAbs)],
        control_flow_passes=[PositionedPass(PassPosition.before("InsertLoops"), lambda: Probe(seen)),
                             PositionedPass(PassPosition.after("InsertLoops"), lambda: Probe(seen))],
        observer=lambda stage, name, ir: order.append((stage, name)))
    anchor = DATA_FLOW.index("ConvertConstantsToScalars")
    assert [n for s, n in order if s == "dataflow"] == DATA_FLOW[:anchor] + ["ReluToAbs"] + DATA_FLOW[anchor:]
    control = [n for s, n in order if s == "control_flow"]
    anchor = CONTROL_FLOW.index("InsertLoops")
    assert control == CONTROL_FLOW[:anchor] + ["Probe", "InsertLoops", "Probe"] + CONTROL_FLOW[anchor + 1:]
    assert "LoopBegin" not in seen[0] and "LoopBegin" in seen[1]
    assert "Abs" in seen[0] and "Relu" not in seen[0]
    # the data-flow pass changed what the kernel computes
    x = np.linspace(-3, 3, 40, dtype=np.float32)
    y = np.empty(40, np.float32)
    ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data)
    cs.kernel.fn(ptrs, (ctypes.c_int64 * 1)(40), 0, 1, None)
    np.testing.assert_array_equal(y, np.abs(x))
