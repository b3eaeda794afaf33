"""InitLiveRanges: an abstract register per value ("vec" for data, "gpr" for data pointers and loop
counters) with its live interval; values used inside a loop they are not defined in live to its end;
Parameters and Scalars, set once before the parallel domain's loop, live to the end of the kernel."""
from lir_helpers import find, lowered, one
from snipjit.snippets.lowered.passes.init_live_ranges import InitLiveRanges
from snipjit.snippets.lowered.expression import Reg

BODY = """graph(x: f32[4,37]) -> [z] {
  const c: f32[] = 2.0
  [a] = Mul(x, c)
  [b] = Exp(a)
  [z] = Add(b, a)
}"""


def live(text: str, loop_depth: int = 1):
    lir = lowered(text, loop_depth=loop_depth)
    assert InitLiveRanges().run(lir) is True
    return lir


def interval(lir, expr, k: int = 0):
    return lir.live_intervals[expr.out_descs[k].reg]


def test_registers_and_intervals():
    lir = live(BODY)
    assert [e.op for e in lir.expressions] == ["Parameter", "Scalar", "LoopBegin", "Load", "Mul", "Exp", "Add",
                                               "Store", "LoopEnd", "Result"]
    param, scalar, begin, load, mul, exp, add, store, end, result = lir.expressions
    assert [e.out_descs[0].reg.kind for e in (param, begin)] == ["gpr", "gpr"]
    assert [e.out_descs[0].reg.kind for e in (scalar, load, mul, exp, add)] == ["vec"] * 5
    assert len({e.out_descs[0].reg for e in (scalar, load, mul, exp, add)}) == 5
    assert store.out_descs[0].reg is None and end.out_descs[0].reg is None
    assert interval(lir, param) == (0, 10)          # data pointers live through the whole kernel
    assert lir.live_intervals[result.in_descs[0].reg] == (0, 10) and result.in_descs[0].reg.kind == "gpr"
    assert interval(lir, scalar) == (1, 10)         # set once for every iteration of the parallel domain
    assert interval(lir, begin) == (2, 8)
    assert interval(lir, load) == (3, 4)
    assert interval(lir, mul) == (4, 6)             # to its last use
    assert interval(lir, exp) == (5, 6)
    assert interval(lir, add) == (6, 7)
    # inputs see their producers' registers
    assert add.in_regs == [exp.out_descs[0].reg, mul.out_descs[0].reg]
    assert store.in_regs == [add.out_descs[0].reg]


def test_live_registers_are_those_live_across_an_expression():
    lir = live(BODY)
    param, scalar, begin, load, mul, exp, add, store, end, result = lir.expressions
    assert exp.live_regs == {param.out_descs[0].reg, scalar.out_descs[0].reg, begin.out_descs[0].reg,
                             mul.out_descs[0].reg, result.in_descs[0].reg}


def test_a_value_used_in_a_loop_it_is_not_defined_in_lives_to_the_loop_end():
    # Neg(s) runs once per row before the loop (it broadcasts along the loop's dim) and is read inside it
    lir = live("graph(x: f32[4,37], s: f32[4,1]) -> [z] { [t] = Neg(s)\n [z] = Add(x, t) }")
    neg, end = one(lir, "Neg"), one(lir, "LoopEnd")
    assert lir.index(neg) < lir.index(one(lir, "LoopBegin"))
    assert interval(lir, neg) == (lir.index(neg), lir.index(end))


def test_in_a_nest_the_outermost_loop_end_counts():
    # Neg(s) runs before the two-deep nest and is read in the inner loop: live until the outer loop ends
    lir = live("graph(x: f32[3,4,37], s: f32[3,1,1]) -> [z] { [t] = Neg(s)\n [z] = Add(x, t) }", loop_depth=2)
    neg = one(lir, "Neg")
    ends = {e.attrs["loop_id"]: lir.index(e) for e in find(lir, "LoopEnd")}
    begins = {e.attrs["loop_id"]: e for e in find(lir, "LoopBegin")}
    assert neg.loop_ids == [] and ends[1] < ends[0]
    assert interval(lir, neg) == (lir.index(neg), ends[0])
    for loop_id in (0, 1):
        assert interval(lir, begins[loop_id]) == (lir.index(begins[loop_id]), ends[loop_id])


def test_rerunning_renumbers_from_scratch():
    lir = live(BODY)
    first = dict(lir.live_intervals)
    InitLiveRanges().run(lir)
    assert lir.live_intervals == first
    assert Reg("vec", 0) in first and Reg("gpr", 0) in first
