"""LoadMoveBroadcastToBroadcastLoad: an adjacent one-element Load + BroadcastMove become one
BroadcastLoad of the same buffer, which takes the Load's place among the loop ports."""
from lir_helpers import find, layout, lowered, one


def test_adjacent_pair_fuses():
    lir = lowered("graph(x: f32[4,37], s: f32[4,1]) -> [z] { [z] = Add(x, s) }", "LoadMoveBroadcastToBroadcastLoad")
    assert layout(lir)[2:] == ["LoopBegin0", "Load[0]", "BroadcastLoad[0]", "Add[0]", "Store[0]", "LoopEnd0",
                               "Result"]
    bl = one(lir, "BroadcastLoad")
    assert bl.attrs == {"buffer": ("param", 1)}
    assert bl.input_source(0) is lir.parameters()[1] and one(lir, "Add").input_source(1) is bl
    assert bl.out_descs[0].shape == (4, 37) and bl.out_descs[0].subtensor == (16,)
    info = lir.loop_manager[0]
    assert bl in [p.port.expr for p in info.entry_points]
    assert all(p.port.expr in lir.expressions for p in info.ports)
    assert [c.expr for c in lir.parameters()[1].consumers(0)] == [bl]


def test_rank_zero_input_fuses():
    lir = lowered("graph(x: f32[40], r: f32[]) -> [z] { [z] = Mul(x, r) }", "LoadMoveBroadcastToBroadcastLoad")
    assert [e.op for e in lir.expressions if e.loop_ids] == ["Load", "BroadcastLoad", "Mul", "Store"]


def test_pairs_that_are_not_adjacent_stay():
    lir = lowered("graph(x: f32[40], lo: f32[], hi: f32[]) -> [z] { [z] = Clip(x, lo, hi) }",
                  "LoadMoveBroadcastToBroadcastLoad")
    assert [e.op for e in lir.expressions if e.loop_ids] == ["Load", "Load", "Load", "BroadcastMove",
                                                             "BroadcastMove", "Clip", "Store"]


def test_broadcast_of_a_computed_value_stays():
    lir = lowered("graph(x: f32[4,37], s: f32[4,1]) -> [z] { [t] = Exp(s)\n [z] = Add(x, t) }",
                  "LoadMoveBroadcastToBroadcastLoad")
    assert find(lir, "BroadcastLoad") == [] and len(find(lir, "BroadcastMove")) == 1
