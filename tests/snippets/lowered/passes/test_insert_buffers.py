"""InsertBuffers: a value computed in one loop nest and read in another goes through a `Buffer` (a row of
the kernel's scratchpad) placed between the nests; values read in their own nest need none."""
from lir_helpers import layout, lowered, one, ops
from snipjit.snippets.lowered.loop_info import LoopInfo
from snipjit.snippets.lowered.passes.insert_buffers import InsertBuffers
from snipjit.snippets.symbolic import Sym

BODY = "graph(x: f32[4,37]) -> [z] { [t] = Exp(x)\n [z] = Add(x, t) }"


def test_one_fused_nest_needs_no_buffer():
    lir = lowered(BODY, "FuseLoops")
    before = ops(lir)
    assert InsertBuffers().run(lir) is False
    assert ops(lir) == before


def test_a_value_crossing_nests_goes_through_a_buffer():
    lir = lowered(BODY, "FuseLoops")
    add = one(lir, "Add")
    add.loop_ids = [lir.loop_manager.add(LoopInfo(1, Sym.const(37), 16))]   # Add in a nest of its own
    assert InsertBuffers().run(lir) is True
    assert layout(lir) == ["Parameter", "Exp[0]", "Buffer", "Add[1]", "Result"]
    buffer = one(lir, "Buffer")
    assert buffer.input_source(0) is one(lir, "Exp") and add.input_source(1) is buffer
    assert buffer.attrs == {"index": 0} and buffer.out_descs[0].shape == (1, 37) and buffer.loop_ids == []
    assert add.input_source(0).op == "Parameter"      # memory already: no buffer
