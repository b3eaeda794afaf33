"""CleanRepeatedDataPointerShifts: ports of one loop sharing a buffer shift its pointer once."""
from lir_helpers import find, lowered, port_of
from snipjit.snippets.lowered.passes.clean_repeated_ptr_shifts import CleanRepeatedDataPointerShifts
from snipjit.snippets.symbolic import Sym

BODY = "graph(x: f32[4,37]) -> [z] { [e] = Exp(x)\n [z] = Mul(e, x) }"


def test_a_parameter_read_twice_shifts_once():
    lir = lowered(BODY, "LoadMoveBroadcastToBroadcastLoad")
    info = lir.loop_manager[0]
    first, second = find(lir, "Load")
    assert port_of(info, second).is_incremented      # InitLoops gave both loads the full shift
    assert CleanRepeatedDataPointerShifts().run(lir) is True
    assert (port_of(info, first).is_incremented, port_of(info, first).ptr_increment,
            port_of(info, first).finalization_offset) == (True, Sym.const(1), Sym.const(-37))
    assert (port_of(info, second).is_incremented, port_of(info, second).ptr_increment,
            port_of(info, second).finalization_offset) == (False, Sym(), Sym())
    assert port_of(info, find(lir, "Store")[0], "out").is_incremented
    assert CleanRepeatedDataPointerShifts().run(lir) is False


def test_each_loop_of_a_nest_is_cleaned():
    lir = lowered(BODY, "CleanRepeatedDataPointerShifts", loop_depth=2)
    second = find(lir, "Load")[1]
    for info in lir.loop_manager.loops.values():
        assert not port_of(info, second).is_incremented
        assert port_of(info, find(lir, "Load")[0]).is_incremented


def test_distinct_buffers_keep_their_shifts():
    lir = lowered("graph(x: f32[37], y: f32[37]) -> [z] { [z] = Add(x, y) }", "LoadMoveBroadcastToBroadcastLoad")
    assert CleanRepeatedDataPointerShifts().run(lir) is False
    assert all(p.is_incremented for p in lir.loop_manager[0].ports)
