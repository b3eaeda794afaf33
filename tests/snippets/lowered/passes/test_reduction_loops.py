"""The control-flow passes on reductions: where loop nests begin and end, what runs between them, and what
crosses them.

  MarkLoops          a value reading a reduction starts a new nest; per-row statistics (size 1 along the
                     innermost dim) run outside the loops, after the nest they wait for, or hoisted before
                     the current nest when they wait for nothing in it;
  FuseLoops          never fuses a nest with the one accumulating a reduction it reads;
  InsertBuffers      values read in a later nest go through one Buffer each, right after their nest;
  InsertLoadStore    reduced outputs are stored one element per row (count=1), outside the loops;
  CleanupLoopOffsets keeps the finalization offset of an input that a later nest reads again;
  InitLiveRanges     accumulators are in place: Fill, Accumulate (and its tail copy) and Horizon's input
                     share a register, live across the whole loop.
"""
import ctypes

import numpy as np
import pytest

from lir_helpers import find, layout, lowered, one, port_of, prepared
from snipjit import parse_graph
from snipjit.snippets.subgraph_compiler import compile_subgraph
from snipjit.snippets.lowered.linear_ir import LinearIRError
from snipjit.snippets.lowered.loop_info import LoopInfo
from snipjit.snippets.lowered.passes.fuse_loops import FuseLoops
from snipjit.snippets.lowered.passes.init_live_ranges import InitLiveRanges
from snipjit.snippets.lowered.passes.insert_buffers import InsertBuffers
from snipjit.snippets.symbolic import Sym
from snipjit.targets.llvm.target import LLVMTarget

SOFTMAX = "graph(x: f32[4,37]) -> [z] { [z] = Softmax(x) }"
LAYER_NORM = "graph(x: f32[4,{n}], g: f32[{n}]) -> [z] {{ [z] = LayerNormalization(x, g) }}"
# `a` is read in all three nests of its softmax; its sum is also an output; z reads x again
SOFTMAX_AND_SUM = """graph(x: f32[4,37], y: f32[37]) -> [z, r] {
  const ax: i64[1] = [-1]
  [a] = Add(x, y)
  [s] = Softmax(a)
  [r] = ReduceSum(a, ax)
  [z] = Mul(s, x)
}"""
# per-row inputs: Exp(s) waits for nothing, so it is hoisted before the nest it appears in
ROW_INPUTS = """graph(x: f32[4,37], s: f32[4,1]) -> [z, w] {
  [m] = Softmax(x)
  [t] = Exp(s)
  [z] = Add(m, t)
  [w] = Neg(s)
}"""


def scratch_ops(lir) -> list[str]:
    return [f"{e.op}{e.attrs['buffer'][1]}{e.loop_ids}" for e in lir.expressions
            if e.op in ("Load", "Store") and e.attrs["buffer"][0] == "scratch"]


# ---- MarkLoops -------------------------------------------------------------------------------------
def test_a_value_reading_a_reduction_starts_a_new_nest():
    lir = lowered(SOFTMAX, "MarkLoops")
    assert layout(lir) == ["Parameter", "ReduceLast[0]", "Sub[1]", "Exp[1]", "ReduceLast[1]", "Reciprocal",
                           "Mul[2]", "Result"]
    assert lir.parallel_rank == 1
    loops = lir.loop_manager.loops.values()
    assert [(i.dim, i.work_amount, i.increment) for i in loops] == [(1, Sym.const(37), 16)] * 3


def test_statistics_run_between_the_nests():
    lir = lowered(LAYER_NORM.format(n=37), "MarkLoops")
    assert layout(lir) == ["Parameter", "Parameter", "Scalar", "Scalar", "ReduceLast[0]", "Sub[1]", "ReduceLast[1]",
                           "Mul[1]", "ReduceLast[1]", "Mul", "Sub", "Max", "Add", "Sqrt", "Reciprocal", "Sub[2]",
                           "Mul[2]", "Mul[2]", "Result"]


def test_a_reduction_of_an_earlier_nests_value_joins_the_current_nest():
    lir = lowered(SOFTMAX_AND_SUM, "MarkLoops")
    assert layout(lir) == ["Parameter", "Parameter", "Add[0]", "ReduceLast[0]", "Sub[1]", "Exp[1]", "ReduceLast[1]",
                           "Reciprocal", "Mul[2]", "ReduceLast[2]", "Mul[2]", "Result", "Result"]
    sum_of_a = find(lir, "ReduceLast")[2]
    assert sum_of_a.attrs["kind"] == "sum" and sum_of_a.input_source(0) is one(lir, "Add")


def test_row_values_that_wait_for_nothing_are_hoisted_before_the_nest():
    lir = lowered(ROW_INPUTS, "MarkLoops")
    assert layout(lir) == ["Parameter", "Parameter", "ReduceLast[0]", "Sub[1]", "Exp[1]", "ReduceLast[1]",
                           "Reciprocal", "Exp", "Neg", "Mul[2]", "Add[2]", "Result", "Result"]


def test_a_reduction_of_a_value_broadcast_along_the_innermost_dim():
    lir = lowered("""graph(x: f32[3,37], s: f32[3,1]) -> [z] {
      [r] = snippets::ReduceLast(s) {kind="sum"}
      [z] = Add(x, r)
    }""")
    # one element along the innermost axis: the reduction is that element, no loop and no Horizon
    assert find(lir, "ReduceLast") == [] and find(lir, "Horizon") == []
    assert [c.source.expr.op for c in find(lir, "Add")[0].inputs] == ["Load", "BroadcastLoad"] or \
        [c.source.expr.op for c in find(lir, "Add")[0].inputs] == ["Load", "BroadcastMove"]


# ---- FuseLoops -------------------------------------------------------------------------------------
def test_nests_split_by_reductions_stay_apart():
    lir = lowered(SOFTMAX, "MarkLoops")
    assert FuseLoops().run(lir) is False
    assert layout(lir) == layout(lowered(SOFTMAX, "MarkLoops"))


def test_fusion_is_refused_only_for_a_reduction_dependency():
    # two adjacent nests of the same size: the second reads the first's reduction, or only its values
    for reads_reduction in (True, False):
        lir = lowered("""graph(x: f32[4,37]) -> [z] {
          [e] = Exp(x)
          [m] = snippets::ReduceLast(e) {kind="max"}
          [z] = Sub(e, m)
        }""", "MarkLoops")
        sub = one(lir, "Sub")
        if not reads_reduction:
            lir.reconnect(sub.input_port(1), one(lir, "Exp").output_port(0))   # Sub(e, e)
        assert sub.loop_ids != one(lir, "Exp").loop_ids
        assert FuseLoops().run(lir) is not reads_reduction
        assert len(lir.loop_manager.loops) == (2 if reads_reduction else 1)


# ---- InsertBuffers ---------------------------------------------------------------------------------
def test_a_value_read_in_later_nests_gets_one_buffer_after_its_nest():
    lir = lowered(SOFTMAX_AND_SUM, "DecomposeReduce")
    assert InsertBuffers().run(lir) is True
    assert layout(lir) == ["Parameter", "Parameter", "Fill", "Add[0]", "Accumulate[0]", "Buffer", "Horizon", "Fill",
                           "Sub[1]", "Exp[1]", "Accumulate[1]", "Buffer", "Horizon", "Reciprocal", "Fill", "Mul[2]",
                           "Accumulate[2]", "Mul[2]", "Horizon", "Result", "Result"]
    a_buf, e_buf = find(lir, "Buffer")
    assert a_buf.input_source(0) is one(lir, "Add") and e_buf.input_source(0) is one(lir, "Exp")
    # Sub (nest 1) and the sum's Accumulate (nest 2) read a from the one buffer; nest 0 reads it directly
    assert sorted(c.expr.op + str(c.expr.loop_ids) for c in a_buf.consumers(0)) == ["Accumulate[2]", "Sub[1]"]
    assert find(lir, "Accumulate")[0].input_source(1) is one(lir, "Add")
    assert [b.out_descs[0].shape for b in (a_buf, e_buf)] == [(1, 37)] * 2
    assert [b.attrs["index"] for b in (a_buf, e_buf)] == [0, 1]


def test_a_buffer_row_follows_a_dynamic_innermost_dim():
    lir = lowered(LAYER_NORM.format(n="?"), "InsertBuffers")
    assert [b.out_descs[0].shape for b in find(lir, "Buffer")] == [(1, None)]


# ---- InsertLoadStore -------------------------------------------------------------------------------
def test_buffers_are_stored_in_their_nest_and_loaded_in_each_reader():
    lir = lowered(SOFTMAX_AND_SUM, "InsertLoadStore")
    assert scratch_ops(lir) == ["Store0[0]", "Load0[1]", "Store1[1]", "Load1[2]", "Load0[2]"]
    assert {e.attrs["count"] for e in find(lir, "Load") + find(lir, "Store") if e.loop_ids} == {16}


def test_a_reduced_output_is_stored_one_element_per_row_after_its_nest():
    lir = lowered(SOFTMAX_AND_SUM, "InsertLoadStore")
    store = [e for e in find(lir, "Store") if e.attrs["buffer"] == ("result", 1)][0]
    assert store.attrs["count"] == 1 and store.loop_ids == [] and store.input_source(0).op == "Horizon"
    assert store.in_descs[0].subtensor == (1,)
    assert lir.index(store) == lir.index(store.input_source(0)) + 1


def test_row_inputs_are_loaded_one_element_outside_the_loops():
    lir = lowered(ROW_INPUTS, "InsertLoadStore")
    loads = [e for e in find(lir, "Load") if e.attrs["buffer"] == ("param", 1)]
    assert [(e.attrs["count"], e.loop_ids, e.consumers(0)[0].expr.op) for e in loads] == [(1, [], "Exp"),
                                                                                          (1, [], "Neg")]
    (w_store,) = [e for e in find(lir, "Store") if e.attrs["buffer"] == ("result", 1)]
    assert (w_store.attrs["count"], w_store.loop_ids) == (1, [])


def test_a_reduced_output_of_a_kernel_with_innermost_dim_1():
    lir = lowered('graph(x: f32[3,1]) -> [r] { [r] = snippets::ReduceLast(x) {kind="sum"} }', "InsertLoadStore")
    store = one(lir, "Store")
    assert store.loop_ids == [] and store.attrs["count"] == 1


# ---- CleanupLoopOffsets ------------------------------------------------------------------------------
@pytest.mark.parametrize("n, back", [("37", Sym.const(-37)), ("?", -Sym.dim(1))])
def test_an_input_read_again_by_a_later_nest_is_rewound(n, back):
    lir = prepared(LAYER_NORM.format(n=n), "CleanupLoopOffsets")
    x_ports = {loop_id: port_of(lir.loop_manager[loop_id], e)
               for e in find(lir, "Load") if e.attrs["buffer"] == ("param", 0) for loop_id in e.loop_ids}
    # nest 0 (mean) and nest 1 (x - mean) read x: main loops 0, 1 and their tails 3, 4
    assert sorted(x_ports) == [0, 1, 3, 4]
    assert x_ports[3].finalization_offset == back          # after nest 0: back to the row start for nest 1
    assert all(x_ports[i].finalization_offset.is_zero for i in (0, 1, 4))   # the last read needs no rewind
    for info in lir.loop_manager.loops.values():           # scratch and outputs are never rewound
        assert all(p.finalization_offset.is_zero for p in info.ports if p.port.expr.attrs["buffer"][0] != "param")


def test_only_the_inputs_read_again_keep_their_offsets():
    lir = prepared(SOFTMAX_AND_SUM, "CleanupLoopOffsets")
    tail0 = next(i for i in lir.loop_manager.loops.values() if i.parent_id == 0)
    kept = {p.port.expr.attrs["buffer"]: p.finalization_offset for p in tail0.ports}
    assert kept == {("param", 0): Sym.const(-37), ("param", 1): Sym(), ("scratch", 0): Sym()}   # x is read by z


# ---- InitLiveRanges ----------------------------------------------------------------------------------
def test_accumulators_are_in_place_and_live_across_their_loop():
    lir = lowered(SOFTMAX)
    InitLiveRanges().run(lir)
    loop_end = {e.attrs["loop_id"]: lir.index(e) for e in find(lir, "LoopEnd")}
    for fill, acc, horizon in zip(find(lir, "Fill"), find(lir, "Accumulate"), find(lir, "Horizon")):
        reg = fill.out_regs[0]
        assert acc.in_regs[0] == acc.out_regs[0] == horizon.in_regs[0] == reg
        assert acc.in_regs[1] != reg
        start, end = lir.live_intervals[reg]
        assert start == lir.index(fill) and end == lir.index(horizon) > loop_end[acc.loop_ids[0]]
        assert all(reg in e.live_regs for e in lir.expressions[start + 1:end])


def test_statistics_live_through_the_nest_that_reads_them():
    lir = lowered(SOFTMAX)
    InitLiveRanges().run(lir)
    h_max = find(lir, "Horizon")[0]
    (reader,) = [c.expr for c in h_max.consumers(0)]
    assert reader.op == "BroadcastMove" and reader.loop_ids
    end_of_reader_loop = next(lir.index(e) for e in find(lir, "LoopEnd") if e.attrs["loop_id"] == reader.loop_ids[0])
    assert lir.live_intervals[h_max.out_regs[0]][1] >= end_of_reader_loop


def test_the_tail_accumulates_into_the_same_register():
    lir = prepared("graph(x: f32[4,37]) -> [z] { const a: i64[1] = [-1]\n [z] = ReduceMax(x, a) }")
    main, tail = find(lir, "Accumulate")
    assert lir.loop_manager[tail.loop_ids[0]].is_tail
    assert main.out_regs == tail.out_regs == tail.in_regs[:1] == one(lir, "Fill").out_regs
    assert one(lir, "Horizon").in_regs == main.out_regs


class FewRegisters(LLVMTarget):
    def __init__(self, vec: int):
        super().__init__()
        self.vec = vec

    @property
    def registers(self) -> dict[str, int]:
        return {"vec": self.vec, "gpr": 64}


def test_accumulators_are_never_spilled():
    body = parse_graph("""graph(x: f32[2,37]) -> [s] {
      const a: i64[1] = [-1]
      [e] = Exp(x)
      [t] = Tanh(x)
      [u] = Mul(e, t)
      [s] = ReduceSum(u, a)
    }""")
    compiled = compile_subgraph(body, FewRegisters(3))   # the accumulator keeps one register throughout
    assert not any(line.split()[0].startswith(("Spill", "Reload")) and "Fill" in line
                   for line in compiled.linear_ir.splitlines()[1:] if line.strip())
    x = np.random.default_rng(0).normal(size=(2, 37)).astype(np.float32)
    out = np.zeros(2, np.float32)
    compiled.kernel.fn((ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data), (ctypes.c_int64 * 2)(2, 37), 0, 2, None)
    np.testing.assert_allclose(out, (np.exp(x) * np.tanh(x)).sum(-1), rtol=1e-5)


def test_more_accumulators_than_registers_is_a_clear_error():
    """Sixteen reductions in one loop need sixteen accumulators plus registers for their inputs."""
    lines = "\n".join(f"[r{i}] = ReduceSum(x{i}, a)" for i in range(16))
    inputs = ", ".join(f"x{i}: f32[2,37]" for i in range(16))
    body = parse_graph(f"""graph({inputs}) -> [z] {{
      const a: i64[1] = [-1]
      {lines}
      [z] = Sum({', '.join(f'r{i}' for i in range(16))})
    }}""")
    with pytest.raises(LinearIRError, match="accumulators are live at once|register pressure is too high"):
        compile_subgraph(body, FewRegisters(16))
    compile_subgraph(body, FewRegisters(32))   # with enough registers it compiles


def test_reductions_force_one_loop_level():
    body = parse_graph("graph(x: f32[2,3,37]) -> [z] { [z] = Softmax(x) }")
    assert compile_subgraph(body, LLVMTarget(), loop_depth=2).parallel_rank == 2
    assert compile_subgraph(parse_graph("graph(x: f32[2,3,37]) -> [z] { [z] = Exp(x) }"), LLVMTarget(),
                            loop_depth=2).parallel_rank == 1
