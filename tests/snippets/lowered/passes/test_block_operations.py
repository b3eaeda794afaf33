"""A `Brgemm` (a block operation) through the control-flow passes: MarkLoops puts it outside the loop
nests, ending the open one; InsertBuffers gives it Buffers for what it reads from a nest and for its result
the nests read; InsertLoadStore names its memory instead of adding Loads and Stores; AllocateBuffers gives
its scratch operands rows."""
import pytest

from lir_helpers import layout, lowered, one, optimized
from snipjit.snippets.lowered.linear_ir import LinearIR, LinearIRError

ATTENTION = """graph(q: f32[2,5,16], kt: f32[2,16,37], v: f32[2,37,24]) -> [o] {
 [s] = MatMul(q, kt)
 [t] = Tanh(s)
 [o] = MatMul(t, v) }"""


def test_the_master_shape_leaves_out_what_a_brgemm_walks():
    lir = LinearIR.from_body(optimized(ATTENTION), 16)
    assert lir.master_shape == (2, 5, 37)   # rows of q, keys of kt; not the head sizes 16 and 24
    q, kt, v = lir.parameters()
    assert q.attrs["own_dims"] == [2] and kt.attrs["own_dims"] == [1] and v.attrs["own_dims"] == [1, 2]
    assert lir.results()[0].attrs["own_dims"] == [2]


def test_mark_loops_puts_brgemms_outside_the_nests():
    lir = lowered(ATTENTION, "MarkLoops")
    assert layout(lir) == ["Parameter", "Parameter", "Parameter", "Brgemm", "Tanh[0]", "Brgemm", "Result"]


def test_buffers_carry_rows_between_brgemms_and_nests():
    lir = lowered(ATTENTION, "InsertBuffers")
    assert layout(lir) == ["Parameter", "Parameter", "Parameter", "Brgemm", "Buffer", "Tanh[0]", "Buffer",
                           "Brgemm", "Result"]
    first, second = [e for e in lir.expressions if e.op == "Brgemm"]
    assert [c.expr.op for c in first.consumers(0)] == ["Buffer"]
    assert second.input_source(0).op == "Buffer" and second.input_source(1).op == "Parameter"
    assert [c.expr.op for c in second.consumers(0)] == ["Result"]   # a body output is written straight
    for buffer in [e for e in lir.expressions if e.op == "Buffer"]:
        assert buffer.out_descs[0].shape == (1, 1, 37)


def test_brgemms_name_their_memory_instead_of_loads_and_stores():
    lir = lowered(ATTENTION, "AllocateBuffers")
    first, second = [e for e in lir.expressions if e.op == "Brgemm"]
    assert first.attrs["memory"][:2] == [("param", 0), ("param", 1)] and first.attrs["memory"][2][0] == "scratch"
    assert second.attrs["memory"][0][0] == "scratch" and second.attrs["memory"][1:] == [("param", 2), ("result", 0)]
    assert all(len(key) == 3 for key in (first.attrs["memory"][2], second.attrs["memory"][0]))   # group, row
    tanh = one(lir, "Tanh")
    assert tanh.input_source(0).op == "Load" and tanh.consumers(0)[0].expr.op == "Store"
    assert not [e for e in lir.expressions if e.op in ("Load", "Store") and e.attrs["buffer"][0] != "scratch"]


def test_an_input_read_by_a_brgemm_and_a_loop_is_refused():
    text = """graph(q: f32[5,16], kt: f32[16,37], x: f32[5,16]) -> [s, y] {
     [s] = MatMul(q, kt)
     [y] = Add(q, x) }"""
    with pytest.raises(LinearIRError, match="read by a Brgemm and by"):
        LinearIR.from_body(optimized(text), 16)


def test_dynamic_dims_a_brgemm_walks_are_refused():
    text = "graph(q: f32[5,?], kt: f32[?,37]) -> [s] { [s] = MatMul(q, kt) }"
    with pytest.raises(LinearIRError, match="must be static"):
        LinearIR.from_body(optimized(text), 16)
