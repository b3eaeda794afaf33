"""InitLoops: pointer increments (elements per loop iteration unit) and finalization offsets (back to the
start) for every loop port, as polynomials over the master dims."""
from lir_helpers import find, lowered, port_of
from snipjit.snippets.symbolic import Sym

D0, D1, D2 = Sym.dim(0), Sym.dim(1), Sym.dim(2)


def shifts(info, expr, kind="in"):
    lp = port_of(info, expr, kind)
    return lp.is_incremented, lp.ptr_increment, lp.finalization_offset


def test_full_tensor_depth_one():
    lir = lowered("graph(x: f32[4,37]) -> [z] { [z] = Neg(x) }", "InitLoops")
    info = lir.loop_manager[0]
    load, store = find(lir, "Load")[0], find(lir, "Store")[0]
    assert shifts(info, load) == (True, Sym.const(1), Sym.const(-37))
    assert shifts(info, store, "out") == (True, Sym.const(1), Sym.const(-37))
    assert port_of(info, load).data_size == 4


def test_dynamic_work_amount_gives_symbolic_offsets():
    lir = lowered("graph(x: f32[?,?]) -> [z] { [z] = Neg(x) }", "InitLoops")
    assert shifts(lir.loop_manager[0], find(lir, "Load")[0]) == (True, Sym.const(1), -D1)


def test_broadcast_along_the_loop_dim_is_not_incremented():
    lir = lowered("graph(x: f32[4,37], s: f32[4,1]) -> [z] { [z] = Add(x, s) }", "InitLoops")
    info = lir.loop_manager[0]
    assert shifts(info, find(lir, "Load")[1]) == (False, Sym(), Sym())


def test_depth_two_nest():
    lir = lowered("graph(x: f32[2,?,?], y: f32[1,1,?], s: f32[2,?,1]) -> [z] { [a] = Add(x, y)\n [z] = Mul(a, s) }",
                  "InitLoops", loop_depth=2)
    outer, inner = lir.loop_manager[0], lir.loop_manager[1]
    x, y, s = find(lir, "Load")
    store = find(lir, "Store")[0]
    # the inner loop walks dim 2 one element at a time
    assert shifts(inner, x) == (True, Sym.const(1), -D2)
    assert shifts(inner, y) == (True, Sym.const(1), -D2)
    assert shifts(inner, s) == (False, Sym(), Sym())
    # the outer loop walks dim 1: one row (D2 elements) per iteration
    assert shifts(outer, x) == (True, D2, -(D1 * D2))
    assert shifts(outer, y) == (False, Sym(), Sym())
    assert shifts(outer, s) == (True, Sym.const(1), -D1)
    assert shifts(outer, store, "out") == (True, D2, -(D1 * D2))


def test_static_dims_fold_into_numbers():
    lir = lowered("graph(x: f32[3,5,7]) -> [z] { [z] = Neg(x) }", "InitLoops", loop_depth=3)
    load = find(lir, "Load")[0]
    assert [shifts(i, load) for i in lir.loop_manager.loops.values()] == [
        (True, Sym.const(35), Sym.const(-105)), (True, Sym.const(7), Sym.const(-35)),
        (True, Sym.const(1), Sym.const(-7))]


def test_single_iteration_loops_do_not_increment():
    lir = lowered("graph(x: f32[4,1], y: f32[4,1]) -> [z] { [z] = Add(x, y) }", "InitLoops")
    info = lir.loop_manager[0]
    assert info.work_amount == Sym.const(1)
    assert shifts(info, find(lir, "Load")[0]) == (False, Sym(), Sym())


def test_bool_buffers_have_one_byte_elements():
    lir = lowered("graph(c: bool[8], x: f32[8]) -> [m] { [m] = Less(x, x)\n }", "InitLoops")
    info = lir.loop_manager[0]
    assert port_of(info, find(lir, "Store")[0], "out").data_size == 1
    assert port_of(info, find(lir, "Load")[0]).data_size == 4
