"""AssignRegisters: linear scan per register class; a physical register is reused once the interval
holding it has ended; when a class overflows, spill candidates are reported and nothing is assigned."""
import itertools

from lir_helpers import lowered
from snipjit.snippets.lowered.passes.assign_registers import AssignRegisters
from snipjit.snippets.lowered.passes.init_live_ranges import InitLiveRanges

# four results of one input live together until they are summed pairwise
MANY_LIVE = """graph(x: f32[64]) -> [z] {
  [a] = Exp(x)
  [b] = Sin(x)
  [c] = Cos(x)
  [f] = Tanh(x)
  [d] = Add(a, b)
  [e] = Add(c, f)
  [z] = Add(d, e)
}"""


def ranged(text: str):
    lir = lowered(text)
    InitLiveRanges().run(lir)
    return lir, dict(lir.live_intervals)


def max_overlap(intervals, kind: str) -> int:
    """The most intervals of a class live at one point ([start, end), an end meets the next start)."""
    spans = [iv for r, iv in intervals.items() if r.kind == kind]
    points = {s for s, _ in spans}
    return max(sum(s <= p < t for s, t in spans) for p in points)


def assignment(text: str, physical: dict[str, int]):
    """The Linear IR, its live intervals and the abstract -> physical register map AssignRegisters made
    (read off every port descriptor, so it must be one map)."""
    lir, intervals = ranged(text)
    descs = [d for e in lir.expressions for d in e.in_descs + e.out_descs if d.reg is not None]
    abstract = [d.reg for d in descs]
    assert AssignRegisters(physical).run(lir) is True
    mapping = {}
    for d, reg in zip(descs, abstract):
        assert mapping.setdefault(reg, d.reg) == d.reg, f"{reg} became both {mapping[reg]} and {d.reg}"
    return lir, intervals, mapping


def test_registers_are_reused_and_overlapping_values_never_share():
    lir, intervals, mapping = assignment(MANY_LIVE, {"vec": 32, "gpr": 64})
    assert set(mapping) == set(intervals)
    for kind in ("vec", "gpr"):
        used = {p for a, p in mapping.items() if a.kind == kind}
        assert all(r.kind == kind for r in used)
        assert len(used) == max_overlap(intervals, kind)    # linear scan is optimal on intervals
    for r1, r2 in itertools.combinations(intervals, 2):
        (s1, t1), (s2, t2) = intervals[r1], intervals[r2]
        if r1.kind == r2.kind and s1 < t2 and s2 < t1:
            assert mapping[r1] != mapping[r2], (r1, r2)
    assert lir.spill_candidates == []


def test_a_chain_of_unary_ops_needs_one_data_register():
    lir, _ = ranged("graph(x: f32[64]) -> [z] { [a] = Neg(x)\n [b] = Exp(a)\n [c] = Relu(b)\n [z] = Abs(c) }")
    AssignRegisters({"vec": 32, "gpr": 64}).run(lir)
    vec = {d.reg for e in lir.expressions for d in e.out_descs if d.reg is not None and d.reg.kind == "vec"}
    assert [r.index for r in vec] == [0]


def test_live_registers_are_mapped_too():
    lir, _ = ranged(MANY_LIVE)
    AssignRegisters({"vec": 32, "gpr": 64}).run(lir)
    defined = {d.reg for e in lir.expressions for d in e.out_descs + e.in_descs if d.reg is not None}
    assert set().union(*(e.live_regs for e in lir.expressions)) <= defined


def test_a_tiny_budget_reports_the_furthest_ending_value_and_assigns_nothing():
    lir, intervals = ranged(MANY_LIVE)
    cos = next(e for e in lir.expressions if e.op == "Cos")
    before = [[d.reg for d in e.in_descs + e.out_descs] for e in lir.expressions]
    assert AssignRegisters({"vec": 3, "gpr": 64}).run(lir) is False
    assert lir.spill_candidates == [cos.out_descs[0].reg]
    assert max(intervals[r][1] for r in lir.spill_candidates) == 11
    assert [[d.reg for d in e.in_descs + e.out_descs] for e in lir.expressions] == before


def test_gpr_overflow_is_reported_as_gpr_candidates():
    lir, _ = ranged("graph(x: f32[8], y: f32[8], w: f32[8]) -> [z] { [a] = Add(x, y)\n [z] = Add(a, w) }")
    assert AssignRegisters({"vec": 32, "gpr": 3}).run(lir) is False
    assert {r.kind for r in lir.spill_candidates} == {"gpr"}
