"""CleanupLoopOffsets: an inner loop's finalization offsets fold into the enclosing loop's increments of
the same buffers (for planar data they cancel); outermost loops' offsets are dropped, since the kernel
recomputes every pointer per parallel iteration."""
from lir_helpers import prepared
from snipjit.snippets.lowered.passes.cleanup_loop_offsets import CleanupLoopOffsets
from snipjit.snippets.symbolic import Sym

D2 = Sym.dim(2)
BODY = "graph(x: f32[2,{n1},{n2}], y: f32[{n2}]) -> [z] {{ [a] = Add(x, y)\n [z] = Relu(a) }}"


def offsets(info):
    return [(p.port.expr.op, p.is_incremented, p.ptr_increment, p.finalization_offset) for p in info.ports]


def test_outermost_offsets_are_dropped():
    lir = prepared(BODY.format(n1=3, n2=37), "InsertSpecificIterations")
    tail = lir.loop_manager[1]
    assert {p.finalization_offset for p in tail.ports} == {Sym.const(-37)}
    assert CleanupLoopOffsets().run(lir) is True
    assert all(p.finalization_offset.is_zero for info in lir.loop_manager.loops.values() for p in info.ports)
    assert CleanupLoopOffsets().run(lir) is False


def test_depth_two_planar_full_tensor_sums_to_zero():
    lir = prepared(BODY.format(n1="?", n2="?"), "CleanupLoopOffsets", loop_depth=2)
    outer, main, tail = (lir.loop_manager[i] for i in (0, 1, 2))
    assert (outer.dim, main.dim, tail.is_tail) == (1, 2, True)
    # x and z: one row forward per inner pass, so the outer loop adds nothing
    assert offsets(outer) == [("Load", True, Sym(), Sym()), ("Load", False, Sym(), Sym()),
                              ("Store", True, Sym(), Sym())]
    # y broadcasts along the outer dim: the inner loop rewinds it for the next row
    assert offsets(tail) == [("Load", True, Sym.const(1), Sym()), ("Load", True, Sym.const(1), -D2),
                             ("Store", True, Sym.const(1), Sym())]
    assert all(p.finalization_offset.is_zero for p in main.ports)


def test_depth_two_static_without_tail():
    lir = prepared(BODY.format(n1=3, n2=32), "CleanupLoopOffsets", loop_depth=2)
    outer, inner = lir.loop_manager[0], lir.loop_manager[1]
    assert len(lir.loop_manager.loops) == 2
    assert offsets(outer) == [("Load", True, Sym(), Sym()), ("Load", False, Sym(), Sym()),
                              ("Store", True, Sym(), Sym())]
    assert offsets(inner) == [("Load", True, Sym.const(1), Sym()), ("Load", True, Sym.const(1), Sym.const(-32)),
                              ("Store", True, Sym.const(1), Sym())]


def test_depth_three_folds_level_by_level():
    lir = prepared("graph(x: f32[?,?,?]) -> [z] { [z] = Neg(x) }", "CleanupLoopOffsets", loop_depth=3)
    increments = {i: [p.ptr_increment for p in info.ports] for i, info in lir.loop_manager.loops.items()}
    assert increments == {0: [Sym(), Sym()], 1: [Sym(), Sym()], 2: [Sym.const(1)] * 2, 3: [Sym.const(1)] * 2}
