"""InsertBroadcastMove: a value with one meaningful lane (size 1 along the innermost dim) gets a
BroadcastMove before an op that mixes it with full vectors; Scalars and one-lane ops need none."""
from lir_helpers import find, layout, lowered, one


def test_one_element_load_and_computed_value_get_broadcast():
    lir = lowered("""graph(x: f32[4,37], s: f32[4,1]) -> [z] {
      [t] = Neg(s)
      [a] = Add(x, t)
      [z] = Mul(a, s)
    }""", "InsertBroadcastMove")
    # Neg runs once per row, before the loop; both its result and the one-element load of s are broadcast
    assert layout(lir)[2:] == ["Load", "Neg", "LoopBegin0", "Load[0]", "BroadcastMove[0]", "Add[0]", "Load[0]",
                               "BroadcastMove[0]", "Mul[0]", "Store[0]", "LoopEnd0", "Result"]
    neg_bm, load_bm = find(lir, "BroadcastMove")
    assert neg_bm.input_source(0) is one(lir, "Neg") and one(lir, "Add").input_source(1) is neg_bm
    assert load_bm.input_source(0).op == "Load" and one(lir, "Mul").input_source(1) is load_bm
    assert neg_bm.out_descs[0].shape == (4, 37) and neg_bm.out_descs[0].subtensor == (16,)
    assert one(lir, "Add").in_descs[1].shape == (4, 37)


def test_one_lane_ops_inside_a_loop_are_broadcast_too():
    lir = lowered("""graph(x: f32[3,4,37], s: f32[3,4,1]) -> [z] {
      [t] = Exp(s)
      [z] = Add(x, t)
    }""", "InsertBroadcastMove", loop_depth=2)
    assert [e.op for e in lir.expressions if e.loop_ids == [0, 1]] == ["Load", "Exp", "Load", "BroadcastMove",
                                                                       "Add", "Store"]


def test_scalars_and_one_lane_ops_need_no_broadcast():
    lir = lowered("""graph(x: f32[4,37], s: f32[4,1]) -> [z, w] {
      const c: f32[] = 2.0
      [z] = Mul(x, c)
      [w] = Relu(s)
    }""", "InsertBroadcastMove")
    assert find(lir, "BroadcastMove") == []


def test_broadcast_along_an_outer_dim_needs_none():
    lir = lowered("graph(x: f32[4,37], y: f32[37]) -> [z] { [z] = Add(x, y) }", "InsertBroadcastMove")
    assert find(lir, "BroadcastMove") == []
