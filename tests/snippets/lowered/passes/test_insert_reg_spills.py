"""InsertRegSpills: a Spill after each spill candidate's definition and a Reload before each of its uses,
after which the registers suffice."""
import pytest

from lir_helpers import find, lowered, one
from snipjit.snippets.lowered.linear_ir import LinearIRError
from snipjit.snippets.lowered.passes.assign_registers import AssignRegisters
from snipjit.snippets.lowered.passes.init_live_ranges import InitLiveRanges
from snipjit.snippets.lowered.passes.insert_reg_spills import InsertRegSpills

TINY = {"vec": 3, "gpr": 64}
# too many live values for three registers; Cos, the value spilled, has two users (two reloads)
COS_USED_TWICE = """graph(x: f32[64]) -> [z] {
  [a] = Exp(x)
  [b] = Sin(x)
  [c] = Cos(x)
  [f] = Tanh(x)
  [d] = Add(a, b)
  [e] = Add(c, f)
  [g] = Mul(c, d)
  [z] = Add(g, e)
}"""


def overflowing(text: str = COS_USED_TWICE, registers=TINY):
    lir = lowered(text)
    InitLiveRanges().run(lir)
    assert AssignRegisters(registers).run(lir) is False
    return lir


def test_spill_after_the_definition_and_a_reload_before_each_use():
    lir = overflowing()
    cos = one(lir, "Cos")
    assert lir.spill_candidates == [cos.out_descs[0].reg]
    users = [c.expr for c in cos.consumers(0)]
    assert InsertRegSpills().run(lir) is True
    spill = one(lir, "Spill")
    assert lir.index(spill) == lir.index(cos) + 1 and spill.input_source(0) is cos
    assert spill.attrs == {"slot": 0} and spill.loop_ids == cos.loop_ids
    reloads = find(lir, "Reload")
    assert len(reloads) == len(users) == 2
    for reload, user in zip(reloads, users):
        assert lir.index(reload) == lir.index(user) - 1
        assert reload.input_source(0) is spill and reload.attrs == {"slot": 0}
        assert user.input_source(user.inputs.index(reload.outputs[0])) is reload
        assert reload.out_descs[0].shape == cos.out_descs[0].shape and reload.loop_ids == user.loop_ids
    assert [c.expr for c in cos.consumers(0)] == [spill]
    assert lir.spill_candidates == [] and lir.spill_slots == 1


def test_after_spilling_the_registers_suffice():
    lir = overflowing()
    for _ in range(4):
        InsertRegSpills().run(lir)
        InitLiveRanges().run(lir)
        if AssignRegisters(TINY).run(lir):
            break
    else:
        pytest.fail("still out of registers after 4 rounds of spilling")
    regs = {d.reg for e in lir.expressions for d in e.in_descs + e.out_descs if d.reg is not None}
    assert {r.index for r in regs if r.kind == "vec"} <= {0, 1, 2}
    assert len({s.attrs["slot"] for s in find(lir, "Spill")}) == len(find(lir, "Spill"))


def test_no_candidates_no_change():
    lir = lowered(COS_USED_TWICE)
    InitLiveRanges().run(lir)
    AssignRegisters({"vec": 32, "gpr": 64}).run(lir)
    assert InsertRegSpills().run(lir) is False
    assert find(lir, "Spill") == []


def test_pointers_and_counters_are_not_spilled():
    lir = overflowing("graph(x: f32[8], y: f32[8], w: f32[8]) -> [z] { [a] = Add(x, y)\n [z] = Add(a, w) }",
                      {"vec": 32, "gpr": 3})
    with pytest.raises(LinearIRError, match="more gpr registers than the target has"):
        InsertRegSpills().run(lir)


def test_spilling_a_reload_means_too_much_pressure():
    lir = overflowing()
    InsertRegSpills().run(lir)
    InitLiveRanges().run(lir)
    lir.spill_candidates = [find(lir, "Reload")[0].out_descs[0].reg]
    with pytest.raises(LinearIRError, match="register pressure is too high"):
        InsertRegSpills().run(lir)
