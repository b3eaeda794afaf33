"""Shape resolution per input signature: every value gets a concrete type, shape computations
(Shape → Gather → Unsqueeze → Concat) are evaluated once and their steps never run per inference."""
import numpy as np
import pytest

import snipjit
from snipjit.ir.graph import TensorType
from snipjit.ops import OpError
from snipjit.runtime.planning.resolver import resolve

rng = np.random.default_rng(0)

# the head split of an attention layer, as exporters write it
HEAD_SPLIT = """graph(x: f32[B,S,64]) -> [y] {
  const i0: i64[] = 0
  const i1: i64[] = 1
  const ax: i64[1] = [0]
  const heads: i64[1] = [4]
  const hd: i64[1] = [16]
  [sh] = Shape(x)
  [b] = Gather(sh, i0)
  [s] = Gather(sh, i1)
  [bu] = Unsqueeze(b, ax)
  [su] = Unsqueeze(s, ax)
  [newshape] = Concat(bu, su, heads, hd) {axis=0}
  [r] = Reshape(x, newshape)
  [t] = Transpose(r) {perm=[0,2,1,3]}
  [y] = Softmax(t) {axis=-1}
}"""
SHAPE_STEPS = 6   # Shape, 2 Gathers, 2 Unsqueezes, Concat


def head_split_expected(x):
    t = x.reshape(x.shape[0], x.shape[1], 4, 16).transpose(0, 2, 1, 3)
    e = np.exp(t - t.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def slot_of(cm, name):
    return cm.program.slots[id(next(v for v in cm.graph.values() if v.name == name))]


@pytest.fixture(scope="module")
def head_split():
    return snipjit.compile(snipjit.parse_graph(HEAD_SPLIT), fuse=False, fold=False)


@pytest.mark.parametrize("batch, seq", [(2, 5), (3, 7)])
def test_shape_computations_are_evaluated_once_per_signature(head_split, batch, seq):
    res = resolve(head_split.program, [TensorType.of("f32", (batch, seq, 64))])
    assert res.skipped == set(range(SHAPE_STEPS))
    np.testing.assert_array_equal(res.values[slot_of(head_split, "sh")], [batch, seq, 64])
    np.testing.assert_array_equal(res.values[slot_of(head_split, "newshape")], [batch, seq, 4, 16])
    assert res.types[slot_of(head_split, "r")].shape == (batch, seq, 4, 16)
    assert res.types[slot_of(head_split, "y")].shape == (batch, 4, seq, 16)
    assert all(t is not None and t.is_static for t in res.types)


def test_skipped_steps_never_run():
    cm = snipjit.compile(snipjit.parse_graph(HEAD_SPLIT), fuse=False, fold=False)

    class MustNotRun:
        def __call__(self, inputs):
            raise AssertionError("a shape step ran at inference time")

        run_into = __call__

    for step in cm.plan[:SHAPE_STEPS]:
        step.kernel = MustNotRun()
    for batch, seq in [(2, 5), (3, 7), (2, 5)]:
        x = rng.standard_normal((batch, seq, 64)).astype(np.float32)
        np.testing.assert_allclose(cm.run({"x": x})[0], head_split_expected(x), rtol=1e-5, atol=1e-7)
    modes = [plan.modes for plan in cm.program.plans().values()]
    assert len(modes) == 2 and all(m[:SHAPE_STEPS] == ["skip"] * SHAPE_STEPS and m[SHAPE_STEPS] == "view"
                                   for m in modes)


def test_named_dims_become_concrete():
    g = snipjit.parse_graph("""graph(x: f32[n,m], w: f32[m,8]) -> [y] {
      [a] = MatMul(x, w)
      [t] = Transpose(a) {perm=[1,0]}
      [y] = Relu(t)
    }""")
    cm = snipjit.compile(g, fuse=False, fold=False)
    res = resolve(cm.program, [TensorType.of("f32", (5, 3)), TensorType.of("f32", (3, 8))])
    assert [res.types[slot_of(cm, n)].shape for n in ("a", "t", "y")] == [(5, 8), (8, 5), (8, 5)]
    assert res.skipped == set() and res.values == {}


def test_values_known_only_at_run_time_leave_types_open():
    g = snipjit.parse_graph("""graph(x: f32[n,4], s: i64[2]) -> [y] {
      [r] = Reshape(x, s)
      [y] = Relu(r)
    }""")
    cm = snipjit.compile(g, fuse=False, fold=False)
    res = resolve(cm.program, [TensorType.of("f32", (6, 4)), TensorType.of("i64", (2,))])
    assert res.types[slot_of(cm, "r")] is None and res.types[slot_of(cm, "y")] is None
    plan = cm.program.plan_for([TensorType.of("f32", (6, 4)), TensorType.of("i64", (2,))])
    assert plan.modes == ["call", "call"] and plan.memory.arena_size == 0
    x = rng.standard_normal((6, 4)).astype(np.float32)
    for shape in ([3, 8], [12, 2]):
        np.testing.assert_array_equal(cm.run({"x": x, "s": np.array(shape)})[0], np.maximum(x, 0).reshape(shape))


def test_float_constants_are_not_evaluated_at_resolution():
    g = snipjit.parse_graph("""graph(x: f32[2]) -> [y] {
      const c: f32[2] = [1.0, -2.0]
      [n] = Neg(c)
      [y] = Add(x, n)
    }""")
    cm = snipjit.compile(g, fuse=False, fold=False)
    res = resolve(cm.program, [TensorType.of("f32", (2,))])
    assert res.skipped == set()
    np.testing.assert_array_equal(cm.run({"x": np.zeros(2, np.float32)})[0], [-1, 2])


def test_small_integer_computations_on_constants_are_evaluated():
    g = snipjit.parse_graph("""graph(x: f32[n,2]) -> [y] {
      const a: i64[2] = [2, 1]
      const b: i64[2] = [1, 2]
      [s] = Mul(a, b)
      [y] = Reshape(x, s)
    }""")
    cm = snipjit.compile(g, fuse=False, fold=False)
    res = resolve(cm.program, [TensorType.of("f32", (2, 2))])
    assert res.skipped == {0}
    np.testing.assert_array_equal(res.values[slot_of(cm, "s")], [2, 2])
    assert res.types[slot_of(cm, "y")].shape == (2, 2)


def test_incompatible_concrete_shapes_name_the_node():
    g = snipjit.parse_graph("graph(x: f32[n,k], w: f32[m,4]) -> [y] {\n [y] = MatMul(x, w) @mm\n}")
    cm = snipjit.compile(g)
    with pytest.raises(OpError, match=r"MatMul node 'mm': cannot run with input types \['f32\[2,3\]', 'f32\[5,4\]'\]"):
        cm.run({"x": np.ones((2, 3), np.float32), "w": np.ones((5, 4), np.float32)})
    np.testing.assert_array_equal(cm.run({"x": np.ones((2, 3), np.float32), "w": np.ones((3, 4), np.float32)})[0],
                                  np.full((2, 4), 3, np.float32))



def test_position_ids_of_a_sequence_are_evaluated_once_per_signature():
    """Exporters slice position ids [1, seq] out of a constant [1, 512] (BERT, GPT-2): resolved, not run."""
    b = snipjit.GraphBuilder()
    x = b.input("x", "f32", [1, "n", 4])
    length = b.Slice(b.Shape(x), b.const(np.array([1])), b.const(np.array([2])))
    ids = b.const(np.arange(512, dtype=np.int64)[None])
    positions = b.Slice(ids, b.const(np.array([0])), length, b.const(np.array([1])))
    table = b.const(rng.standard_normal((512, 4)).astype(np.float32))
    b.output(b.Add(x, b.Gather(table, positions)), "y")
    cm = snipjit.compile(b.build(), fuse=False, fold=False)
    res = resolve(cm.program, [TensorType.of("f32", (1, 300, 4))])
    gather = next(i for i, step in enumerate(cm.program.steps) if step.node.op == "Gather")
    np.testing.assert_array_equal(res.values[cm.program.steps[gather].in_slots[1]], np.arange(300)[None])
    assert gather not in res.skipped   # (a float gather of 1,200 values runs: only integers are evaluated)
