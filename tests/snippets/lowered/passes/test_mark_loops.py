"""MarkLoops: loop ids over the innermost `loop_depth` dims, a new nest where the loop domain changes,
Scalars hoisted before all loops, the rest of the master shape left to the parallel domain."""
from lir_helpers import find, layout, lowered, one
from snipjit.snippets.symbolic import Sym

BODY = """graph(x: f32[2,?,37], y: f32[37]) -> [z] {
  const c: f32[] = 2.0
  [a] = Mul(x, c)
  [z] = Add(a, y)
}"""


def test_one_loop_over_the_innermost_dim_and_scalars_first():
    lir = lowered(BODY, "MarkLoops")
    assert layout(lir) == ["Parameter", "Parameter", "Scalar", "Mul[0]", "Add[0]", "Result"]
    assert lir.parallel_rank == 2
    info = lir.loop_manager[0]
    assert (info.dim, info.work_amount, info.increment) == (2, Sym.const(37), 16)
    assert [str(p.port) for p in info.entry_points] == [f"{one(lir, 'Mul').name}.in0", f"{one(lir, 'Add').name}.in1"]
    assert [str(p.port) for p in info.exit_points] == [f"{one(lir, 'Add').name}.out0"]


def test_scalars_are_hoisted_from_the_middle_of_the_body():
    lir = lowered("""graph(x: f32[8]) -> [z] {
      [a] = Relu(x)
      [b] = Neg(a)
      const c: f32[] = 3.0
      [z] = Mul(b, c)
    }""", "MarkLoops")
    assert layout(lir) == ["Parameter", "Scalar", "Relu[0]", "Neg[0]", "Mul[0]", "Result"]


def test_loop_depth_two_nests_outermost_first():
    lir = lowered(BODY, "MarkLoops", loop_depth=2)
    assert layout(lir) == ["Parameter", "Parameter", "Scalar", "Mul[0, 1]", "Add[0, 1]", "Result"]
    assert lir.parallel_rank == 1
    outer, inner = lir.loop_manager[0], lir.loop_manager[1]
    assert (outer.dim, outer.work_amount, outer.increment) == (1, Sym.dim(1), 1)
    assert (inner.dim, inner.work_amount, inner.increment) == (2, Sym.const(37), 16)


def test_loop_depth_beyond_the_rank_covers_every_dim():
    lir = lowered("graph(x: f32[3,5]) -> [z] { [z] = Relu(x) }", "MarkLoops", loop_depth=4)
    assert lir.parallel_rank == 0
    assert [(i.dim, i.work_amount.value, i.increment) for i in lir.loop_manager.loops.values()] == \
        [(0, 3, 1), (1, 5, 16)]


def test_a_new_nest_where_the_domain_changes():
    lir = lowered("""graph(x: f32[3,4,37], s: f32[3,1,37]) -> [z] {
      [a] = Relu(x)
      [t] = Neg(s)
      [z] = Add(a, t)
    }""", "MarkLoops", loop_depth=2)
    assert layout(lir)[2:5] == ["Relu[0, 1]", "Neg[2, 3]", "Add[4, 5]"]
    assert [(i.dim, i.work_amount.value) for i in lir.loop_manager.loops.values()] == \
        [(1, 4), (2, 37), (1, 1), (2, 37), (1, 4), (2, 37)]


def test_what_broadcasts_along_every_loop_dim_runs_outside_the_loops():
    # Neg(s) has one element per iteration of the parallel domain: computed once there, before the nest
    lir = lowered("""graph(x: f32[4,37], s: f32[4,1]) -> [z] {
      [a] = Relu(x)
      [t] = Neg(s)
      [z] = Add(a, t)
    }""", "MarkLoops")
    assert layout(lir) == ["Parameter", "Parameter", "Neg", "Relu[0]", "Add[0]", "Result"]
    assert list(lir.loop_manager.loops) == [0]


def test_an_innermost_master_dim_of_one_still_loops():
    lir = lowered("graph(x: f32[4,1]) -> [z] { [z] = Neg(x) }", "MarkLoops")
    assert layout(lir) == ["Parameter", "Neg[0]", "Result"]
    assert lir.loop_manager[0].work_amount == Sym.const(1)


def test_dynamic_innermost_dim():
    lir = lowered("graph(x: f32[?,?]) -> [z] { [z] = Exp(x) }", "MarkLoops")
    assert lir.loop_manager[0].work_amount == Sym.dim(1)
    assert find(lir, "Exp")[0].loop_ids == [0]
