"""AllocateBuffers and its steps on the Buffers of reductions' loop nests:

  DefineBufferClusters — a buffer first written in the nest that reads another for the last time, after
                         that read, takes its memory (one member per cluster);
  SetBufferRegGroup    — buffers of different clusters used in one nest need different pointer registers
                         (greedy colouring, most constrained first);
  SolveBufferMemory    — clusters whose lifetimes (first store to last load, in expression positions) do
                         not overlap share scratchpad rows;

then Loads and Stores name their register group and row. Each body is also compiled (bounds-checked)
and run against the reference kernels: the decisions must be safe."""
import numpy as np
import pytest

import snipjit
from lir_helpers import find, lowered
from snipjit.snippets.lowered.passes.allocate_buffers import AllocateBuffers
from snipjit.snippets.lowered.passes.define_buffer_clusters import DefineBufferClusters, buffer_accesses
from snipjit.snippets.lowered.passes.set_buffer_reg_group import SetBufferRegGroup, colour
from snipjit.snippets.lowered.passes.solve_buffer_memory import SolveBufferMemory
from lir_helpers import checked_if_possible

BEFORE = "LoadMoveBroadcastToBroadcastLoad"   # the pass before AllocateBuffers

SOFTMAX = "graph(x: f32[4,37]) -> [z] { [z] = Softmax(x) }"
# the exponentials are written where the sum's input `a` is read for the last time
SOFTMAX_OF_SUM = "graph(x: f32[4,37], y: f32[37]) -> [z] { [a] = Add(x, y)\n [z] = Softmax(a) }"
# `a` is read again in the last nest
SOFTMAX_TIMES_INPUT = "graph(x: f32[4,?], y: f32[?]) -> [z] { [a] = Add(x, y)\n [s] = Softmax(a)\n [z] = Mul(s, a) }"
# a softmax by hand: e is stored before `a` is read for the last time (by w), w after it
STORE_BEFORE_LAST_READ = """graph(x: f32[4,37], y: f32[37]) -> [z] {
  const ax: i64[1] = [-1]
  [a] = Add(x, y)
  [m] = ReduceMax(a, ax)
  [d] = Sub(a, m)
  [e] = Exp(d)
  [w] = Mul(a, x)
  [s] = ReduceSum(e, ax)
  [q] = Div(e, s)
  [z] = Add(q, w)
}"""
CHAIN = "graph(x: f32[4,37]) -> [z] { [r] = Relu(x)\n [s] = Softmax(r)\n [t] = Softmax(s)\n [z] = Softmax(t) }"


def accesses(lir) -> str:
    """Scratch Loads/Stores by buffer index (B0...), nests separated by `|`."""
    index = {id(e): e.attrs["index"] for e in find(lir, "Buffer")}
    out = []
    for e in lir.expressions:
        if e.op == "LoopBegin":
            out.append("|")
        elif e.op == "Load" and e.attrs["buffer"][0] == "scratch":
            out.append(f"L{index[id(e.input_source(0))]}")
        elif e.op == "Store" and e.attrs["buffer"][0] == "scratch":
            out.append(f"S{index[id(e.consumers(0)[0].expr)]}")
    return " ".join(out)


def decided(lir, *keys: str) -> dict[int, tuple]:
    return {e.attrs["index"]: tuple(e.attrs[k] for k in keys) for e in find(lir, "Buffer")}


def steps(text: str, until: type):
    lir = lowered(text, BEFORE)
    for step in (DefineBufferClusters, SetBufferRegGroup, SolveBufferMemory):
        step().run(lir)
        if step is until:
            return lir


def test_one_buffer_one_row():
    lir = lowered(SOFTMAX, BEFORE)
    assert accesses(lir) == "| | S0 | L0"
    assert AllocateBuffers().run(lir) is True
    assert decided(lir, "cluster", "reg_group", "offset") == {0: (0, 0, 0)}
    assert lir.scratch_rows == 1
    scratch = [e for e in lir.expressions if e.op in ("Load", "Store") and e.attrs["buffer"][0] == "scratch"]
    assert [(e.attrs["buffer"], e.attrs["row"]) for e in scratch] == [(("scratch", 0), 0)] * 2


def test_no_buffers_nothing_to_allocate():
    lir = lowered("graph(x: f32[4,37]) -> [z] { const a: i64[1] = [-1]\n [z] = ReduceSum(x, a) }", BEFORE)
    assert AllocateBuffers().run(lir) is False
    assert lir.scratch_rows == 0


def test_written_after_the_last_read_in_the_same_nest_joins_the_cluster():
    lir = lowered(SOFTMAX_OF_SUM, BEFORE)
    assert accesses(lir) == "| S0 | L0 S1 | L1"
    assert buffer_accesses(lir).keys() == {0, 1}
    assert DefineBufferClusters().run(lir) is True
    assert decided(lir, "cluster") == {0: (0,), 1: (0,)}
    SetBufferRegGroup().run(lir)
    assert decided(lir, "reg_group") == {0: (0,), 1: (0,)}    # one cluster: one pointer serves both
    SolveBufferMemory().run(lir)
    assert decided(lir, "offset") == {0: (0,), 1: (0,)} and lir.scratch_rows == 1


def test_a_buffer_read_again_later_keeps_its_memory():
    lir = steps(SOFTMAX_TIMES_INPUT, DefineBufferClusters)
    assert accesses(lir) == "| S0 | L0 S1 | L1 L0"
    assert decided(lir, "cluster") == {0: (0,), 1: (1,)}
    SetBufferRegGroup().run(lir)
    assert decided(lir, "reg_group") == {0: (0,), 1: (1,)}    # both read in the last nest
    SolveBufferMemory().run(lir)
    assert decided(lir, "offset") == {0: (0,), 1: (1,)} and lir.scratch_rows == 2


def test_a_store_before_the_last_read_cannot_take_that_memory():
    lir = steps(STORE_BEFORE_LAST_READ, DefineBufferClusters)
    # nest 1 reads a (B0) for Sub, stores e (B1), reads a again for w, stores w (B2)
    assert accesses(lir) == "| S0 | L0 S1 L0 S2 | L1 L2"
    assert decided(lir, "cluster") == {0: (0,), 1: (1,), 2: (0,)}
    SetBufferRegGroup().run(lir)
    # nest 1 uses clusters 0 and 1: B1 apart from B0 and B2; most constrained (B1, two edges) first
    assert decided(lir, "reg_group") == {0: (1,), 1: (0,), 2: (1,)}
    SolveBufferMemory().run(lir)
    assert decided(lir, "offset") == {0: (0,), 1: (1,), 2: (0,)} and lir.scratch_rows == 2


def test_a_cluster_takes_one_member_and_lifetimes_share_rows():
    lir = steps(CHAIN, DefineBufferClusters)
    assert accesses(lir) == "| S0 | L0 S1 | L1 S2 | L2 S3 | L3 S4 | L4 S5 | L5"
    # B2 is written after B1's last read, but B1 is already cluster 0's member
    assert decided(lir, "cluster") == {0: (0,), 1: (0,), 2: (2,), 3: (2,), 4: (4,), 5: (4,)}
    SetBufferRegGroup().run(lir)
    assert decided(lir, "reg_group") == {0: (0,), 1: (0,), 2: (1,), 3: (0,), 4: (1,), 5: (0,)}
    SolveBufferMemory().run(lir)
    # each cluster's first store follows the previous cluster's last load: all in one row
    assert {o for (o,) in decided(lir, "offset").values()} == {0} and lir.scratch_rows == 1


def test_loads_and_stores_name_the_register_group_and_row():
    lir = lowered(STORE_BEFORE_LAST_READ, BEFORE)
    before = [(e.op, e.attrs["buffer"][1]) for e in lir.expressions
              if e.op in ("Load", "Store") and e.attrs["buffer"][0] == "scratch"]
    AllocateBuffers().run(lir)
    groups = decided(lir, "reg_group", "offset")
    after = [(e.op, e.attrs["buffer"], e.attrs["row"]) for e in lir.expressions
             if e.op in ("Load", "Store") and e.attrs["buffer"][0] == "scratch"]
    assert after == [(op, ("scratch", groups[b][0]), groups[b][1]) for op, b in before]


def test_one_pointer_increment_per_register_in_a_nest():
    # B0 and B1 share register 0 in the middle nest: only the first of its ports moves it
    lir = lowered(SOFTMAX_OF_SUM)
    middle = lir.loop_manager[1]
    scratch = [p for p in middle.ports if p.port.expr.attrs["buffer"][0] == "scratch"]
    assert [(p.port.expr.op, p.is_incremented) for p in scratch] == [("Load", True), ("Store", False)]


@pytest.mark.parametrize("nodes, edges, want", [
    ([0, 1, 2], set(), {0: 0, 1: 0, 2: 0}),
    ([0, 1, 2], {frozenset((0, 1)), frozenset((1, 2))}, {1: 0, 0: 1, 2: 1}),          # a path: the middle first
    ([0, 1, 2], {frozenset((0, 1)), frozenset((1, 2)), frozenset((0, 2))}, {0: 0, 1: 1, 2: 2}),
    ([0, 1, 2, 3], {frozenset((0, 1)), frozenset((2, 3))}, {0: 0, 1: 1, 2: 0, 3: 1}),
])
def test_colouring(nodes, edges, want):
    colours = colour(nodes, edges)
    assert colours == want
    assert all(colours[a] != colours[b] for a, b in map(tuple, edges))




@pytest.mark.parametrize("text", [SOFTMAX_OF_SUM, SOFTMAX_TIMES_INPUT, STORE_BEFORE_LAST_READ, CHAIN],
                         ids=["in_place", "read_again", "store_before_read", "chain"])
def test_the_allocations_compute_what_the_reference_does(text, memory_only_kernel_cache):
    graph = snipjit.parse_graph(text)
    compiled = snipjit.compile(graph, **checked_if_possible())
    assert [s.kind for s in compiled.plan] == ["snippet"]
    reference = snipjit.compile(graph, implementations={"reference"})
    rng = np.random.default_rng(1)
    n = 37 if "37" in text else 45
    feeds = {v.name: rng.normal(0, 2, [4, n] if v.type.rank == 2 else [n]).astype(np.float32) for v in graph.inputs}
    np.testing.assert_allclose(compiled.run(feeds)[0], reference.run(feeds)[0], rtol=2e-5, atol=1e-6)
