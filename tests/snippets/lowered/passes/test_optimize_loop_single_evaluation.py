"""OptimizeLoopSingleEvaluation: loops whose body runs at most once (work amount equal to the increment,
or tails) are marked to be emitted without a back edge; a full single iteration moves its pointer
increments into the finalization offsets."""
from lir_helpers import prepared
from snipjit.snippets.lowered.passes.optimize_loop_single_evaluation import OptimizeLoopSingleEvaluation
from snipjit.snippets.symbolic import Sym

BODY = "graph(x: f32[3,{n}]) -> [z] {{ [z] = Exp(x) }}"


def flags(lir):
    return [(info.evaluate_once, info.is_tail) for info in lir.loop_manager.loops.values()]


def test_one_full_vector_is_evaluated_once_with_shifts_at_the_end():
    lir = prepared(BODY.format(n=16), "CleanupLoopOffsets")
    assert OptimizeLoopSingleEvaluation().run(lir) is True
    assert flags(lir) == [(True, False)]
    info = lir.loop_manager[0]
    assert [(p.ptr_increment, p.finalization_offset) for p in info.ports] == [(Sym(), Sym.const(16))] * 2
    assert OptimizeLoopSingleEvaluation().run(lir) is False


def test_tails_are_evaluated_once_and_keep_their_increments():
    lir = prepared(BODY.format(n=21))
    assert flags(lir) == [(False, False), (True, True)]
    assert {p.ptr_increment for p in lir.loop_manager[1].ports} == {Sym.const(1)}
    lir = prepared(BODY.format(n=7))
    assert flags(lir) == [(True, True)]


def test_several_iterations_stay_a_loop():
    assert flags(prepared(BODY.format(n=32))) == [(False, False)]
    assert flags(prepared(BODY.format(n="?"))) == [(False, False), (True, True)]


def test_inside_a_nest():
    lir = prepared("graph(x: f32[2,?,16]) -> [z] { [z] = Exp(x) }", loop_depth=2)
    outer, inner = lir.loop_manager[0], lir.loop_manager[1]
    assert (outer.evaluate_once, inner.evaluate_once) == (False, True)
    # the inner pass moves the pointers one row on; the outer loop adds nothing more
    assert [(p.ptr_increment, p.finalization_offset) for p in inner.ports] == [(Sym(), Sym.const(16))] * 2
    assert [(p.ptr_increment, p.finalization_offset) for p in outer.ports] == [(Sym(), Sym())] * 2
