"""In-place execution: a purely elementwise step writes its output over the memory of an input that no
later step reads, when that input lives in the arena (not a graph input, constant or graph output) and
has the output's dtype and size. The results are those of `inplace=False`, in a smaller arena; the plan
dump names the steps that run in place."""
import numpy as np
import pytest

import snipjit
from snipjit.runtime.implementations.snippet_dumps import plan_dump

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def compile_both(text: str, **options):
    """The graph compiled with and without in-place execution (static shapes: planned at compile time)."""
    return [snipjit.compile(snipjit.parse_graph(text), inplace=flag, **options) for flag in (True, False)]


def plan_of(cm):
    (plan,) = cm.program.plans().values()
    return plan


def slot(cm, name):
    return cm.program.slots[id(next(v for v in cm.graph.values() if v.name == name))]


def names(cm, mapping):
    """`inplace_of` with value names: output -> the input whose memory it overwrites."""
    by_slot = {s: v.name for v in cm.graph.values() if (s := cm.program.slots.get(id(v))) is not None}
    return {by_slot[o]: by_slot[i] for o, i in mapping.items()}


def step_of(cm, op):
    return next(s for s in cm.plan if op in s.ops)


def claims(cm, op):
    """The inputs the snippet step running `op` may overwrite."""
    step = step_of(cm, op)
    assert step.kind == "snippet"
    return step.kernel.inplace_inputs()


def run_same(on, off, feeds):
    """Both programs give identical results, over several runs (the arena is reused between them)."""
    for _ in range(2):
        for a, b in zip(on.run(feeds), off.run(feeds)):
            np.testing.assert_array_equal(a, b)


# the elementwise steps between MatMuls are fused snippets: Tanh+Add and Exp may overwrite m and m2
CHAIN = """graph(x: f32[64,256], w: f32[256,256]) -> [y] {
  [p] = Relu(x)
  [m] = MatMul(p, w)
  [t] = Tanh(m)
  [s] = Add(t, p)
  [m2] = MatMul(s, w)
  [e] = Exp(m2)
  [m3] = MatMul(e, w)
  [y] = Sigmoid(m3)
}"""


def test_elementwise_chain_runs_in_place_with_the_same_results_in_a_smaller_arena():
    on, off = compile_both(CHAIN)
    assert [(s.kind, s.ops) for s in on.plan] == [
        ("snippet", ["Relu"]), ("blas", ["MatMul"]), ("snippet", ["Tanh", "Add"]), ("blas", ["MatMul"]),
        ("snippet", ["Exp"]), ("blas", ["MatMul", "Sigmoid"])]
    plan, plain = plan_of(on), plan_of(off)
    assert names(on, plan.inplace_of) == {"s": "m", "e": "m2"}   # p is read by Tanh+Add too: both dead there
    assert plain.inplace_of == {}
    size = 64 * 256 * 4
    assert len(plan.arena_slots) == 3 and len(plain.arena_slots) == 5
    assert plan.memory.arena_size == 2 * size < plain.memory.arena_size == 3 * size   # p, m, s live at once
    assert plan.modes == plain.modes == ["into"] * 6   # an in-place step still runs
    dump = plan_dump(on.program, plan)
    assert "in place snippet    Tanh+Add" in dump and "-> s (over m)" in dump and "2 in place" in dump
    feeds = {"x": randn(64, 256), "w": randn(256, 256) / 16}
    run_same(on, off, feeds)
    req = on.create_request()
    req.run(feeds)
    slots = next(iter(req._bound.values())).slots
    assert np.shares_memory(slots[slot(on, "s")], slots[slot(on, "m")])
    assert np.shares_memory(slots[slot(on, "e")], slots[slot(on, "m2")])


def test_in_place_chains_through_views_share_one_buffer():
    """A value written in place can itself be overwritten, here through a view: m, a and c share m's
    buffer (the Reshape keeps the two snippets apart; Sin is no BLAS epilogue)."""
    on, off = compile_both("""graph(x: f32[64,256], w: f32[256,256], w2: f32[128,256]) -> [y] {
      const s: i64[2] = [128, 128]
      [m] = MatMul(x, w)
      [a] = Sin(m)
      [v] = Reshape(a, s)
      [c] = Neg(v)
      [y] = MatMul(c, w2)
    }""")
    assert [s.kind for s in on.plan] == ["blas", "snippet", "reference", "snippet", "blas"]
    plan = plan_of(on)
    assert names(on, plan.inplace_of) == {"a": "m", "c": "a"} and list(plan.arena_slots) == [slot(on, "m")]
    assert plan.memory.arena_size == 64 * 256 * 4 < plan_of(off).memory.arena_size
    run_same(on, off, {"x": randn(64, 256), "w": randn(256, 256) / 16, "w2": randn(128, 256) / 16})


def test_no_in_place_over_an_input_read_later():
    on, off = compile_both("""graph(x: f32[64,256], w: f32[256,256]) -> [y] {
      [m] = MatMul(x, w)
      [a] = Tanh(m)
      [m2] = MatMul(a, w)
      [y] = Add(m2, m)
    }""")
    # Tanh may not overwrite m (the Add reads it); the Add's output is the graph output: not planned
    assert claims(on, "Tanh") == (0,) and claims(on, "Add") == (0, 1) and plan_of(on).inplace_of == {}
    run_same(on, off, {"x": randn(64, 256), "w": randn(256, 256) / 16})


def test_no_in_place_over_an_input_read_later_through_a_view():
    on, off = compile_both("""graph(x: f32[64,256], w: f32[256,256], w2: f32[128,256]) -> [y, z] {
      const s: i64[2] = [128, 128]
      [m] = MatMul(x, w)
      [a] = Tanh(m)
      [y] = MatMul(a, w)
      [v] = Reshape(m, s)
      [z] = MatMul(v, w2)
    }""")
    assert claims(on, "Tanh") == (0,) and plan_of(on).inplace_of == {}   # m is read after Tanh, as v
    run_same(on, off, {"x": randn(64, 256), "w": randn(256, 256) / 16, "w2": randn(128, 256) / 16})


def test_in_place_over_a_view_writes_its_root():
    on, off = compile_both("""graph(x: f32[64,256], w: f32[256,256], w2: f32[128,256]) -> [y] {
      const s: i64[2] = [128, 128]
      [m] = MatMul(x, w)
      [v] = Reshape(m, s)
      [a] = Exp(v)
      [y] = MatMul(a, w2)
    }""")
    plan = plan_of(on)
    assert names(on, plan.inplace_of) == {"a": "m"} and list(plan.arena_slots) == [slot(on, "m")]
    run_same(on, off, {"x": randn(64, 256), "w": randn(256, 256) / 16, "w2": randn(128, 256) / 16})


def test_no_in_place_over_a_graph_input():
    on, off = compile_both("""graph(x: f32[64,256], w: f32[256,256]) -> [y] {
      [a] = Tanh(x)
      [y] = MatMul(a, w)
    }""")
    assert claims(on, "Tanh") == (0,)   # the kernel could, the plan must not
    assert plan_of(on).inplace_of == {}
    x = randn(64, 256)
    kept = x.copy()
    run_same(on, off, {"x": x, "w": randn(256, 256) / 16})
    np.testing.assert_array_equal(x, kept)


def test_no_in_place_over_a_constant():
    values = ", ".join(f"{v:.1f}" for v in range(32))
    text = f"""graph(x: f32[4,8], w: f32[8,8]) -> [y] {{
      const c: f32[4,8] = [{values}]
      [n] = Neg(c)
      [y] = MatMul(n, w)
    }}"""
    on, off = compile_both(text, fold=False)
    assert claims(on, "Neg") == (0,) and plan_of(on).inplace_of == {}
    run_same(on, off, {"x": randn(4, 8), "w": randn(8, 8)})
    np.testing.assert_array_equal(on.run({"x": randn(4, 8), "w": np.eye(8, dtype=np.float32)})[0],
                                  -np.arange(32, dtype=np.float32).reshape(4, 8))   # c is intact


def test_no_in_place_over_a_graph_output():
    on, off = compile_both("""graph(x: f32[64,256], w: f32[256,256]) -> [y, m] {
      [m] = MatMul(x, w)
      [a] = Tanh(m)
      [y] = MatMul(a, w)
    }""")
    assert claims(on, "Tanh") == (0,) and plan_of(on).inplace_of == {}
    run_same(on, off, {"x": randn(64, 256), "w": randn(256, 256) / 16})


def test_no_in_place_over_a_broadcast_input():
    on, off = compile_both("""graph(x: f32[64,256], x1: f32[1,256], w: f32[256,256]) -> [y2] {
      [m] = MatMul(x, w)
      [b] = MatMul(x1, w)
      [a] = Add(b, m)
      [n] = Neg(m)
      [y] = MatMul(a, w)
      [z] = MatMul(n, w)
      [y2] = Add(y, z)
    }""")
    assert step_of(on, "Add").ops == ["Add"] and claims(on, "Add") == (1,)   # b broadcasts: only m may be overwritten
    # m is read later (Neg) and b broadcasts: the Add writes its own buffer; Neg may overwrite m
    assert names(on, plan_of(on).inplace_of) == {"n": "m"}
    run_same(on, off, {"x": randn(64, 256), "x1": randn(1, 256), "w": randn(256, 256) / 16})


@pytest.mark.parametrize("body", ["[a] = Softmax(m) {axis=-1}", "[r] = ReduceSum(m, ax) {keepdims=1}\n [a] = Sub(m, r)"])
def test_reductions_do_not_claim_in_place(body):
    on, off = compile_both(f"""graph(x: f32[64,256], w: f32[256,256]) -> [y] {{
      const ax: i64[1] = [-1]
      [m] = MatMul(x, w)
      {body}
      [y] = MatMul(a, w)
    }}""")
    step = on.plan[1]
    assert step.kind == "snippet" and step.kernel.inplace_inputs() == ()
    assert plan_of(on).inplace_of == {}
    run_same(on, off, {"x": randn(64, 256), "w": randn(256, 256) / 16})


def test_reference_kernels_do_not_claim_in_place():
    cm, _ = compile_both(CHAIN, implementations={"reference", "blas"})
    assert {s.kind for s in cm.plan} == {"reference", "blas"}
    assert all(s.kernel.inplace_inputs() == () for s in cm.plan) and plan_of(cm).inplace_of == {}


def test_inplace_false_turns_it_off_and_dynamic_shapes_plan_it_per_signature():
    text = CHAIN.replace("x: f32[64,256]", "x: f32[n,256]")
    on, off = compile_both(text)
    assert claims(on, "Tanh") == (0, 1) and claims(off, "Tanh") == ()   # Tanh+Add: m and p
    w = randn(256, 256) / 16
    for n in (32, 64, 32):   # BLAS outputs over 4096 elements are planned too
        run_same(on, off, {"x": randn(n, 256), "w": w})
    assert all(names(on, p.inplace_of) == {"s": "m", "e": "m2"} for p in on.program.plans().values())
    assert all(p.inplace_of == {} for p in off.program.plans().values())
