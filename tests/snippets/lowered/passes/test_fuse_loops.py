"""FuseLoops: neighbouring nests fuse when each pair of loops has the same dim, increment and work amount,
or one of them does a single iteration (broadcast); they do not fuse otherwise."""
import pytest

from lir_helpers import layout, lowered
from snipjit.snippets.lowered.loop_info import LoopInfo
from snipjit.snippets.lowered.passes.fuse_loops import FuseLoops
from snipjit.snippets.symbolic import Sym

BROADCAST_IN_THE_MIDDLE = """graph(x: f32[3,4,37], s: f32[3,1,37]) -> [z] {
  [a] = Relu(x)
  [t] = Neg(s)
  [z] = Add(a, t)
}"""


def works(lir) -> list:
    return [(i.dim, i.work_amount.value) for i in lir.loop_manager.loops.values()]


def test_a_single_iteration_loop_fuses_into_the_wider_ones_level_by_level():
    lir = lowered(BROADCAST_IN_THE_MIDDLE, "MarkLoops", loop_depth=2)
    assert layout(lir)[2:5] == ["Relu[0, 1]", "Neg[2, 3]", "Add[4, 5]"]
    assert FuseLoops().run(lir) is True
    assert layout(lir)[2:5] == ["Relu[0, 1]", "Neg[0, 1]", "Add[0, 1]"]
    assert list(lir.loop_manager.loops) == [0, 1]
    assert works(lir) == [(1, 4), (2, 37)]


def test_the_first_nest_takes_the_wider_work_amount():
    lir = lowered("""graph(x: f32[3,4,37], s: f32[3,1,37]) -> [z] {
      [t] = Neg(s)
      [z] = Add(x, t)
    }""", "MarkLoops", loop_depth=2)
    assert works(lir) == [(1, 1), (2, 37), (1, 4), (2, 37)]
    FuseLoops().run(lir)
    assert layout(lir)[2:4] == ["Neg[0, 1]", "Add[0, 1]"]
    assert works(lir) == [(1, 4), (2, 37)]


def test_loop_ports_are_recomputed_for_the_fused_nest():
    lir = lowered(BROADCAST_IN_THE_MIDDLE, "FuseLoops", loop_depth=2)
    for info in lir.loop_manager.loops.values():
        assert sorted(p.port.expr.op for p in info.entry_points) == ["Neg", "Relu"]
        assert [p.port.expr.op for p in info.exit_points] == ["Add"]


def test_nothing_to_fuse():
    lir = lowered("graph(x: f32[4,37]) -> [z] { [a] = Relu(x)\n [z] = Neg(a) }", "MarkLoops")
    assert FuseLoops().run(lir) is False


def nest_ir(*loops: LoopInfo):
    lir = lowered(BROADCAST_IN_THE_MIDDLE, "")
    lir.loop_manager.loops.clear()
    return lir, [lir.loop_manager.add(info) for info in loops]


@pytest.mark.parametrize("a, b", [
    (LoopInfo(1, Sym.const(37), 16), LoopInfo(1, Sym.const(16), 16)),      # different work amounts
    (LoopInfo(1, Sym.dim(1), 16), LoopInfo(1, Sym.const(37), 16)),         # dynamic vs static
    (LoopInfo(1, Sym.const(37), 16), LoopInfo(0, Sym.const(37), 16)),      # different dims
    (LoopInfo(1, Sym.const(37), 16), LoopInfo(1, Sym.const(37), 1)),       # different increments
])
def test_different_loops_do_not_fuse(a, b):
    lir, (ia, ib) = nest_ir(a, b)
    assert FuseLoops.can_fuse(lir, [ia], [ib]) is False


def test_nests_of_different_depths_do_not_fuse():
    lir, (ia, ib, ic) = nest_ir(LoopInfo(0, Sym.const(4), 1), LoopInfo(1, Sym.const(37), 16),
                                LoopInfo(1, Sym.const(37), 16))
    assert FuseLoops.can_fuse(lir, [ia, ib], [ic]) is False
    assert FuseLoops.can_fuse(lir, [ib], [ic]) is True
