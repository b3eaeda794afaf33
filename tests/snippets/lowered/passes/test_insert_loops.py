"""InsertLoops: LoopBegin/LoopEnd around each loop body, inner loops nested inside outer ones."""
import pytest

from lir_helpers import find, layout, lowered, one
from snipjit.snippets.lowered.linear_ir import LinearIRError
from snipjit.snippets.lowered.passes.insert_loops import InsertLoops

BODY = "graph(x: f32[4,6,37], y: f32[37]) -> [z] { [a] = Add(x, y)\n [z] = Relu(a) }"


def test_one_loop():
    lir = lowered(BODY, "InsertLoops")
    assert layout(lir) == ["Parameter", "Parameter", "LoopBegin0", "Load[0]", "Load[0]", "Add[0]", "Relu[0]",
                           "Store[0]", "LoopEnd0", "Result"]
    begin, end = one(lir, "LoopBegin"), one(lir, "LoopEnd")
    assert end.input_source(0) is begin and begin.loop_ids == end.loop_ids == []
    assert begin.dtype == "i64" and begin.out_descs[0].shape == ()


def test_nested_loops():
    lir = lowered(BODY, "InsertLoops", loop_depth=2)
    assert layout(lir) == ["Parameter", "Parameter", "LoopBegin0", "LoopBegin1", "Load[0, 1]", "Load[0, 1]",
                           "Add[0, 1]", "Relu[0, 1]", "Store[0, 1]", "LoopEnd1", "LoopEnd0", "Result"]
    outer_begin, inner_begin = find(lir, "LoopBegin")
    inner_end, outer_end = find(lir, "LoopEnd")
    assert inner_begin.loop_ids == inner_end.loop_ids == [0]
    assert outer_begin.loop_ids == outer_end.loop_ids == []
    assert inner_end.input_source(0) is inner_begin and outer_end.input_source(0) is outer_begin


def test_three_deep():
    lir = lowered(BODY, "InsertLoops", loop_depth=3)
    markers = [x for x in layout(lir) if x.startswith("Loop")]
    assert markers == ["LoopBegin0", "LoopBegin1", "LoopBegin2", "LoopEnd2", "LoopEnd1", "LoopEnd0"]


def test_a_loop_that_is_not_contiguous_is_refused():
    lir = lowered(BODY, "InitLoops")
    y = lir.parameters()[1]
    lir.expressions.remove(y)
    lir.expressions.insert(lir.index(one(lir, "Relu")), y)   # a loop-free expression inside the loop
    with pytest.raises(LinearIRError, match="loop 0 is not contiguous"):
        InsertLoops().run(lir)
