"""SimplifyShapes: shape computations of dynamic-shape models are replaced by constants (Reshape targets
with 0 / -1 entries, partially static Shapes) or dropped (Expand to the input's own shape), only where
that is provable; results are checked for several run-time sizes."""
import os

import numpy as np
import onnx
import pytest

from snipjit.frontend.onnx import load
from snipjit import parse_graph
from snipjit.ir.graph import Graph
from snipjit.passes.fold_batchnorm import fold_batchnorm
from snipjit.passes.fold_constants import fold_constants
from snipjit.passes.postpone_broadcast import postpone_broadcast
from snipjit.passes.simplify_shapes import simplify_shapes
from snipjit.ops.interpreter import run_graph_reference


def simplified(text: str, *sizes: dict[str, int]) -> tuple[Graph, Graph]:
    """(before, after), checked to agree for each assignment of sizes to the dynamic dims."""
    before = parse_graph(text)
    after = simplify_shapes(before.copy(), {})
    after.validate()
    for k, dims in enumerate(sizes):
        rng = np.random.default_rng(k)
        inputs = [rng.standard_normal([dims.get(d, d) for d in v.shape]).astype(v.dtype.np) for v in before.inputs]
        for want, got in zip(run_graph_reference(before, inputs), run_graph_reference(after, inputs)):
            assert want.shape == got.shape
            np.testing.assert_array_equal(got, want)
    return before, after


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def target(g: Graph) -> list[int] | None:
    """The constant target of the graph's (last) Reshape, None when it is still computed."""
    shape = [n for n in g.nodes if n.op == "Reshape"][-1].inputs[1]
    return shape.data.tolist() if shape.is_constant else None


HEADS = """graph(x: f32[batch,seq,64]) -> [y] {{
  const zero: i64[] = 0
  const one: i64[] = 1
  const axes: i64[1] = [0]
  const heads: i64[2] = [4, 16]
  [h] = Relu(x)
  [s] = Shape({source})
  [b] = Gather(s, zero) {{axis=0}}
  [n] = Gather(s, one) {{axis=0}}
  [bu] = Unsqueeze(b, axes)
  [nu] = Unsqueeze(n, axes)
  [t] = Concat(bu, nu, heads) {{axis=0}}
  [y] = Reshape(h, t){allowzero}
}}"""
SIZES = ({"batch": 2, "seq": 5}, {"batch": 1, "seq": 1}, {"batch": 0, "seq": 3})


@pytest.mark.parametrize("source", ["h", "x"])  # the same tensor, or another with the same named dims
def test_reshape_to_the_inputs_own_dims_gets_a_constant_target_with_zeros(source):
    before, after = simplified(HEADS.format(source=source, allowzero=""), *SIZES)
    assert ops(after) == ["Relu", "Reshape"] and target(after) == [0, 0, 4, 16]
    assert after.outputs[0].shape == ("batch", "seq", 4, 16)
    assert before.outputs[0].shape == (None,) * 4


def test_with_allowzero_a_zero_cannot_copy():
    _, after = simplified(HEADS.format(source="h", allowzero=" {allowzero=1}"), *SIZES)
    assert target(after) is None


def test_a_single_unknown_dim_among_positive_ones_becomes_minus_one():
    # x.view(x.size(1), 3): the dim moves, so 0 cannot copy it
    _, after = simplified("""graph(x: f32[3,n]) -> [y] {
      const one: i64[] = 1
      const axes: i64[1] = [0]
      const three: i64[1] = [3]
      [s] = Shape(x)
      [n1] = Gather(s, one) {axis=0}
      [nu] = Unsqueeze(n1, axes)
      [t] = Concat(nu, three) {axis=0}
      [y] = Reshape(x, t)
    }""", {"n": 4}, {"n": 1})
    assert ops(after) == ["Reshape"] and target(after) == [-1, 3]


@pytest.mark.parametrize("why, tail", [
    # a copied dim may be 0 at run time, and -1 beside a 0 is ambiguous
    ("a copy beside the unknown dim", "[t] = Concat(bu, six, nu) {axis=0}"),
    ("two unknown dims", "[t] = Concat(nu, bu, six) {axis=0}"),
])
def test_no_minus_one_when(why, tail):
    _, after = simplified("""graph(x: f32[b,n,6]) -> [y] {
      const zero: i64[] = 0
      const one: i64[] = 1
      const axes: i64[1] = [0]
      const six: i64[1] = [6]
      [s] = Shape(x)
      [b0] = Gather(s, zero) {axis=0}
      [n1] = Gather(s, one) {axis=0}
      [bu] = Unsqueeze(b0, axes)
      [nu] = Unsqueeze(n1, axes)
      """ + tail + """
      [y] = Reshape(x, t)
    }""", {"b": 2, "n": 3}, {"b": 3, "n": 2})
    assert target(after) is None


def test_static_entries_of_a_partially_static_shape_become_constants():
    _, after = simplified("""graph(x: f32[batch,3,4]) -> [y, z, w] {
      const inner: i64[2] = [1, 2]
      const first: i64[1] = [0]
      [s] = Shape(x)
      [st] = Gather(s, inner) {axis=0}
      [y] = ConstantOfShape(st)
      [dyn] = Gather(s, first) {axis=0}
      [z] = ConstantOfShape(dyn)
      [tail] = Shape(x) {start=-2}
      [w] = ConstantOfShape(tail)
    }""", {"batch": 2})
    assert sorted(ops(after)) == ["ConstantOfShape"] * 3 + ["Gather", "Shape"]
    assert [n.inputs[0].data.tolist() for n in after.nodes if n.op == "ConstantOfShape" and n.inputs[0].is_constant] \
        == [[3, 4], [3, 4]]


@pytest.mark.parametrize("shape_of, removed", [
    ("Shape(x)", True),
    ("Shape(twin)", True),      # same named dims
    ("Shape(other)", False),    # "rows" may differ from "batch"
    ("Identity(ones)", True),   # [1, 4]: broadcasting x to it leaves x as it is
    ("Identity(wide)", False),  # [2, 4] would grow a batch of 1
])
def test_expand_to_the_inputs_own_shape_is_dropped(shape_of, removed):
    _, after = simplified(f"""graph(x: f32[batch,4], twin: f32[batch,4], other: f32[rows,4]) -> [y] {{
      const ones: i64[2] = [1, 4]
      const wide: i64[2] = [2, 4]
      [s] = {shape_of}
      [e] = Expand(x, s)
      [y] = Neg(e)
    }}""", *([{"batch": 2, "rows": 2}, {"batch": 1, "rows": 1}] if removed else [{"batch": 2, "rows": 2}]))
    assert ("Expand" not in ops(after)) == removed


def test_an_expand_that_is_a_graph_output_stays():
    _, after = simplified("""graph(x: f32[batch,4]) -> [e] {
      [s] = Shape(x)
      [e] = Expand(x, s)
    }""", {"batch": 3})
    assert ops(after) == ["Shape", "Expand"]


TINY_BERT = os.path.join(os.path.dirname(__file__), "..", "data", "tiny_bert.onnx")
SHAPE_OPS = {"Shape", "Unsqueeze", "Concat", "ConstantOfShape", "Range", "Equal", "Expand", "Slice"}


@pytest.mark.skipif(not os.path.exists(TINY_BERT), reason="tests/data/tiny_bert.onnx is not there")
def test_the_static_tiny_bert_keeps_no_shape_computation():
    expected = np.load(os.path.join(os.path.dirname(TINY_BERT), "tiny_bert_expected.npz"))
    batch, sequence = expected["cases"][1]
    model = onnx.load(TINY_BERT)
    for vi in model.graph.input:
        for dim, n in zip(vi.type.tensor_type.shape.dim, (batch, sequence)):
            dim.Clear()
            dim.dim_value = int(n)
    g = load(model)
    for p in (simplify_shapes, fold_batchnorm, fold_constants, postpone_broadcast, fold_constants):
        g = p(g, {})
    assert not SHAPE_OPS & set(ops(g)), sorted(SHAPE_OPS & set(ops(g)))
    # what is left of the attention mask computation works on the mask input itself
    assert all(n.op != "Gather" or not n.inputs[1].is_constant or not n.inputs[0].is_constant for n in g.nodes)
    got = run_graph_reference(g, [expected["input_ids_1"], expected["attention_mask_1"]])
    np.testing.assert_allclose(got[0], expected["last_hidden_state_1"], atol=1e-4)
    np.testing.assert_allclose(got[1], expected["pooler_output_1"], atol=1e-4)


SPLIT_HEADS = """graph(x: f32[?,?,24]) -> [q, y] {{
  const zero: i64[] = 0
  const one: i64[] = 1
  const axes: i64[1] = [0]
  const sizes: i64[2] = [8, 16]
  const heads: i64[2] = [-1, 4]
  [q, v] = Split({split}
  [s] = Shape(q)
  [b] = Gather(s, zero) {{axis=0}}
  [n] = Gather(s, one) {{axis=0}}
  [bu] = Unsqueeze(b, axes)
  [nu] = Unsqueeze(n, axes)
  [t] = Concat(bu, nu, heads) {{axis=0}}
  [y] = Reshape(v, t)
}}"""


@pytest.mark.parametrize("split, constant", [("x, sizes) {axis=2}", [0, 0, -1, 4]),
                                             ("x) {axis=1, num_outputs=2}", None)])
def test_outputs_of_a_split_share_its_inputs_dims_off_the_split_axis(split, constant):
    """GPT-2 reshapes V with the dims of K, both from one Split: the target is known when the dims taken
    are off the split axis (split in halves along axis 1, dim 1 of q and of v may differ)."""
    before = parse_graph(SPLIT_HEADS.format(split=split))
    after = simplify_shapes(before.copy(), {})
    after.validate()
    assert target(after) == constant
    assert ("Shape" in ops(after)) == (constant is None)
    x = np.random.default_rng(0).standard_normal((2, 4, 24)).astype(np.float32)
    for want, got in zip(run_graph_reference(before, [x]), run_graph_reference(after, [x])):
        np.testing.assert_array_equal(got, want)
