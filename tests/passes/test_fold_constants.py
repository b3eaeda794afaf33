"""FoldConstants: the compile-time constant subgraph is evaluated once and replaced by constants, with
the numbers the graph computes unchanged."""
import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.ir.graph import Graph
from snipjit.ops import OpError
from snipjit.passes.fold_constants import FOLDING_META, fold_constants
from snipjit.ops.interpreter import run_graph_reference


def parse_random(text: str, seed: int = 0) -> Graph:
    """Parse `text`; elided float constants get random values."""
    g = parse_graph(text, elided="zeros")
    rng = np.random.default_rng(seed)
    for v in g.constants:
        if v.dtype.is_float and not v.data.any():
            v.data = rng.standard_normal(v.data.shape).astype(v.data.dtype)
    return g


def folded(text: str, sizes: dict[str, int] | None = None, **options) -> tuple[Graph, Graph]:
    """(the graph before, the graph after folding), checked to compute the same on random inputs
    (dynamic dims get the `sizes` given by name)."""
    g = parse_random(text)
    before = g.copy()
    after = fold_constants(g, options)
    after.validate()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal([(sizes or {}).get(d, d) for d in v.shape]).astype(v.dtype.np)
              for v in before.inputs]
    for want, got in zip(run_graph_reference(before, inputs), run_graph_reference(after, inputs)):
        assert want.dtype == got.dtype and want.shape == got.shape
        np.testing.assert_array_equal(got, want)
    return before, after


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def const(g: Graph, name: str) -> np.ndarray:
    return next(v.data for v in g.constants if v.name == name)


def test_weight_preparation_folds_and_the_sources_are_dropped():
    before, after = folded("""graph(x: f32[2,8]) -> [y: f32[2,16]] {
      const w: f32[16,8] = <elided>
      const scale: f32[] = 0.5
      [wt] = Transpose(w) {perm=[1, 0]}
      [ws] = Mul(wt, scale)
      [y] = MatMul(x, ws)
    }""")
    assert ops(after) == ["MatMul"]
    assert [v.name for v in after.constants] == ["ws"]
    np.testing.assert_array_equal(const(after, "ws"), const(before, "w").T * np.float32(0.5))
    stats = after.meta[FOLDING_META]
    assert (stats.nodes_folded, stats.constants_created, stats.bytes_created) == (2, 1, 16 * 8 * 4)
    assert (stats.constants_freed, stats.bytes_freed) == (2, 16 * 8 * 4 + 4)


def test_constant_of_shape_weights_fold():
    _, after = folded("""graph(x: f32[1,3,4,4]) -> [y: f32[1,2,4,4]] {
      const wshape: i64[4] = [2, 3, 1, 1]
      [w] = ConstantOfShape(wshape) {value=tensor<f32[1]>[0.02]}
      [y] = Conv(x, w)
    }""")
    assert ops(after) == ["Conv"]
    np.testing.assert_array_equal(const(after, "w"), np.full((2, 3, 1, 1), 0.02, np.float32))


def test_exported_shape_computation_folds_in_one_sweep():
    # PyTorch's x.view(x.size(0), x.size(1), 4, 2) and then a Shape of the result, whose type is only
    # known once the first target shape has folded.
    text = """graph(x: f32[2,3,8]) -> [y, z] {
      const zero: i64[] = 0
      const one: i64[] = 1
      const axes: i64[1] = [0]
      const tail: i64[2] = [4, 2]
      const minus_one: i64[1] = [-1]
      [s] = Shape(x)
      [b] = Gather(s, zero) {axis=0}
      [n] = Gather(s, one) {axis=0}
      [bu] = Unsqueeze(b, axes)
      [nu] = Unsqueeze(n, axes)
      [target] = Concat(bu, nu, tail) {axis=0}
      [y] = Reshape(x, target)
      [ys] = Shape(y) {start=2}
      [t2] = Concat(minus_one, ys) {axis=0}
      [z] = Reshape(y, t2)
    }"""
    g = parse_graph(text)
    assert [v.shape for v in g.outputs] == [(None,) * 4, (None,) * 3]  # unknown before folding
    _, after = folded(text)
    assert ops(after) == ["Reshape", "Reshape"]
    assert [list(n.inputs[1].data) for n in after.nodes] == [[2, 3, 4, 2], [-1, 4, 2]]
    assert [v.shape for v in after.outputs] == [(2, 3, 4, 2), (6, 4, 2)]


def test_shape_of_a_dynamic_value_does_not_fold():
    _, after = folded("""graph(x: f32[batch,8]) -> [y: f32[batch,8]] {
      [s] = Shape(x)
      [y] = Reshape(x, s)
    }""", sizes={"batch": 5})
    assert ops(after) == ["Shape", "Reshape"]


def test_a_folded_value_can_be_a_graph_output():
    _, after = folded("""graph(x: f32[3]) -> [y: f32[3], c: f32[3]] {
      const a: f32[3] = [1.0, 2.0, 3.0]
      [c] = Exp(a)
      [y] = Add(x, c)
    }""")
    assert ops(after) == ["Add"] and after.outputs[1].is_constant


def test_identity_of_a_constant_shares_its_buffer():
    before, after = folded("""graph(x: f32[16]) -> [y: f32[16]] {
      const w: f32[16] = <elided>
      [alias] = Identity(w)
      [y] = Add(x, alias)
    }""")
    assert const(after, "alias") is const(before, "w")
    stats = after.meta[FOLDING_META]
    assert (stats.constants_created, stats.constants_freed) == (0, 0)


@pytest.mark.parametrize("limit, remaining", [(None, ["Expand", "Add"]), (1 << 20, ["Add"])])
def test_large_broadcasts_stay_unless_the_limit_allows(limit, remaining):
    options = {} if limit is None else {"max_folded_broadcast_bytes": limit}
    _, after = folded("""graph(x: f32[256,128]) -> [y: f32[256,128]] {
      const row: f32[128] = <elided>
      const shape: i64[2] = [256, 128]
      [big] = Expand(row, shape)
      [y] = Add(x, big)
    }""", **options)  # 128 KiB
    assert ops(after) == remaining


def test_dead_nodes_are_dropped_before_folding():
    # the dead Gather would fail: its index is out of range
    after = fold_constants(parse_graph("""graph(x: f32[3]) -> [y: f32[3]] {
      const a: f32[3] = [1.0, 2.0, 3.0]
      const bad: i64[] = 7
      [dead] = Gather(a, bad) {axis=0}
      [y] = Relu(x)
    }"""), {})
    assert ops(after) == ["Relu"] and [v.name for v in after.constants] == []


def test_a_constant_node_that_fails_raises_naming_it():
    g = parse_graph("""graph(x: f32[3]) -> [y: f32[3]] {
      const a: f32[3] = [1.0, 2.0, 3.0]
      const bad: i64[] = 7
      [g] = Gather(a, bad) {axis=0} @broken
      [y] = Add(x, g)
    }""")
    with pytest.raises(OpError, match="Gather node 'broken'.*out of range"):
        fold_constants(g, {})


def test_stats_accumulate_over_passes_and_stay_net():
    g = parse_random("""graph(x: f32[4]) -> [y: f32[4]] {
      const a: f32[4] = <elided>
      [e] = Exp(a)
      [y] = Add(x, e)
    }""")
    fold_constants(g, {})
    first = g.meta[FOLDING_META]
    g2 = g.copy()
    fold_constants(g2, {})
    assert g2.meta[FOLDING_META] == first and g.meta[FOLDING_META] is first
