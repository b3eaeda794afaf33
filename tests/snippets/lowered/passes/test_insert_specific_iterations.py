"""InsertSpecificIterations: a vector loop whose work amount is not a known multiple of its increment
gets a tail (a copy of its body right after it, masked loads and stores, the finalization offsets); a
loop statically shorter than a vector becomes a tail itself."""
from lir_helpers import LANES, find, layout, one, port_of, prepared
from snipjit.snippets.lowered.passes.insert_specific_iterations import InsertSpecificIterations
from snipjit.snippets.symbolic import Sym


def body(shape: str) -> str:
    return (f"graph(x: f32[{shape}], y: f32[{shape}]) -> [z] {{ const c: f32[] = 2.0\n"
            " [a] = Add(x, y)\n [z] = Mul(a, c) }")


def split(shape: str, loop_depth: int = 1):
    return prepared(body(shape), "InsertSpecificIterations", loop_depth=loop_depth)


def memory_ops(lir):
    return [e for e in lir.expressions if e.op in ("Load", "Store", "BroadcastLoad")]


def test_static_multiple_of_the_lanes_needs_no_tail():
    lir = prepared(body("4,32"), "AssignRegisters")
    before = layout(lir)
    assert InsertSpecificIterations().run(lir) is False
    assert layout(lir) == before and list(lir.loop_manager.loops) == [0]
    assert not any(e.attrs.get("tail") for e in memory_ops(lir))


def test_static_below_the_lanes_is_a_tail_only():
    lir = split("4,5")
    assert list(lir.loop_manager.loops) == [0]
    info = lir.loop_manager[0]
    assert info.is_tail and info.parent_id is None
    assert len(find(lir, "LoopBegin")) == 1
    assert all(e.attrs["tail"] for e in memory_ops(lir))


def check_main_and_tail(lir, work: Sym):
    assert layout(lir) == ["Parameter", "Parameter", "Scalar",
                           "LoopBegin0", "Load[0]", "Load[0]", "Add[0]", "Mul[0]", "Store[0]", "LoopEnd0",
                           "LoopBegin1", "Load[1]", "Load[1]", "Add[1]", "Mul[1]", "Store[1]", "LoopEnd1",
                           "Result"]
    main, tail = lir.loop_manager[0], lir.loop_manager[1]
    assert not main.is_tail and tail.is_tail and tail.parent_id == 0
    assert main.work_amount == tail.work_amount == work and tail.increment == LANES
    assert not any(e.attrs.get("tail") for e in memory_ops(lir) if e.loop_ids == [0])
    assert all(e.attrs["tail"] for e in memory_ops(lir) if e.loop_ids == [1])
    # the copies read the same Parameters and Scalar, and store into the same Result
    tail_loads = [e for e in find(lir, "Load") if e.loop_ids == [1]]
    assert [ld.input_source(0) for ld in tail_loads] == lir.parameters()
    assert [e for e in find(lir, "Mul") if e.loop_ids == [1]][0].input_source(1) is one(lir, "Scalar")
    tail_store = [e for e in find(lir, "Store") if e.loop_ids == [1]][0]
    assert [c.expr for c in tail_store.consumers(0)] == lir.results()
    # the main loop ends where its last full vector ends; the tail rewinds the whole loop
    for lp in main.ports:
        assert lp.finalization_offset == Sym() and lp.ptr_increment == Sym.const(1)
    assert [p.port.expr for p in tail.ports] == tail_loads + [tail_store]
    for lp in tail.ports:
        assert lp.is_incremented and lp.ptr_increment == Sym.const(1) and lp.finalization_offset == -work


def test_static_with_remainder_gets_main_and_tail():
    check_main_and_tail(split("4,37"), Sym.const(37))


def test_dynamic_gets_main_and_tail():
    check_main_and_tail(split("4,?"), Sym.dim(1))


def test_only_vector_loops_are_split():
    lir = split("?,?,?", loop_depth=2)
    assert [(i, info.dim, info.is_tail, info.parent_id) for i, info in lir.loop_manager.loops.items()] == \
        [(0, 1, False, None), (1, 2, False, None), (2, 2, True, 1)]
    assert [x for x in layout(lir) if x.startswith("Loop")] == ["LoopBegin0", "LoopBegin1", "LoopEnd1",
                                                                "LoopBegin2", "LoopEnd2", "LoopEnd0"]
    assert all(e.loop_ids[0] == 0 for e in memory_ops(lir))
    outer = lir.loop_manager[0]
    assert port_of(outer, find(lir, "Load")[0]).ptr_increment == Sym.dim(2)

