"""DecomposeReductions: Softmax, LogSoftmax, LayerNormalization, MeanVarianceNormalization and Reduce* over
the innermost axis become `snippets::ReduceLast` plus elementwise ops, writing the source node's output
value; the decomposed body computes what the original did (both on the reference kernels). Also which
reductions reach a body at all (`support.is_supported`)."""
import numpy as np
import pytest

import snipjit
from lir_helpers import feeds_for, optimized
from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.snippets.dataflow.decompose_reductions import DecomposeReductions
from snipjit.snippets.supported_ops import is_supported


def decomposed(text: str):
    original = parse_graph(text)
    body = original.copy()
    changed = DecomposeReductions().run(body)
    body.validate()
    return original, body, changed


def form(body) -> list[str]:
    """Each node as `out = Op(inputs)`, with ReduceLast's kind and Scalar's value in brackets."""
    lines = []
    for n in body.nodes:
        extra = {"ReduceLast": f"[{n.attrs.get('kind')}]", "Scalar": f"[{n.attrs.get('value')!r}]"}.get(n.op, "")
        lines.append(f"{n.outputs[0].name} = {n.op}{extra}({', '.join(v.name for v in n.inputs)})")
    return lines


def assert_close(original, body, feeds=None, rtol=2e-6, atol=1e-6) -> None:
    feeds = feeds if feeds is not None else feeds_for(original)
    want = run_graph_reference(original, feeds)
    got = run_graph_reference(body, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_softmax_subtracts_the_row_maximum_and_multiplies_by_the_reciprocal_sum():
    original, body, changed = decomposed("graph(x: f32[4,37]) -> [z] { [z] = Softmax(x) }")
    assert changed is True
    assert form(body) == ["z_reducelast = ReduceLast[shift_max](x)", "z_sub = Sub(x, z_reducelast)",
                          "z_exp = Exp(z_sub)", "z_reducelast1 = ReduceLast[sum](z_exp)",
                          "z_reciprocal = Reciprocal(z_reducelast1)", "z = Mul(z_exp, z_reciprocal)"]
    assert all(n.domain == "snippets" for n in body.nodes if n.op == "ReduceLast")
    types = {v.name: str(v.type) for v in body.values()}
    assert types["z_reducelast"] == types["z_reducelast1"] == "f32[4,1]" and types["z"] == "f32[4,37]"
    assert body.outputs[0] is body.nodes[-1].outputs[0] and body.outputs[0].name == "z"
    assert_close(original, body)


def test_softmax_of_large_values_does_not_overflow():
    original, body, _ = decomposed("graph(x: f32[2,5]) -> [z] { [z] = Softmax(x) {axis=1} }")
    x = np.array([[1000, 999, 998, -5, 1000], [-1e4, -1e4, -1e4, -1e4, -1e4]], np.float32)
    z = run_graph_reference(body, [x])[0]
    assert np.isfinite(z).all()
    assert_close(original, body, [x])


def test_log_softmax_reads_the_shifted_values_twice():
    original, body, _ = decomposed("graph(x: f32[3,17]) -> [z] { [z] = LogSoftmax(x) {axis=-1} }")
    assert form(body) == ["z_reducelast = ReduceLast[shift_max](x)", "z_sub = Sub(x, z_reducelast)",
                          "z_exp = Exp(z_sub)", "z_reducelast1 = ReduceLast[sum](z_exp)", "z_log = Log(z_reducelast1)",
                          "z = Sub(z_sub, z_log)"]
    assert_close(original, body)


def test_layer_norm_is_the_corrected_two_pass_with_epsilon_as_a_scalar_of_the_output_rank():
    original, body, _ = decomposed("""graph(x: f32[2,3,37], g: f32[37], b: f32[37]) -> [z] {
      [z] = LayerNormalization(x, g, b) {epsilon=0.001}
    }""")
    assert form(body) == [
        "z_reducelast = ReduceLast[mean](x)", "z_sub = Sub(x, z_reducelast)",
        "z_reducelast1 = ReduceLast[mean](z_sub)", "z_mul = Mul(z_sub, z_sub)", "z_reducelast2 = ReduceLast[mean](z_mul)",
        "z_mul1 = Mul(z_reducelast1, z_reducelast1)", "z_sub1 = Sub(z_reducelast2, z_mul1)", "z_scalar = Scalar[0.0]()",
        "z_max = Max(z_sub1, z_scalar)", "z_sub2 = Sub(z_sub, z_reducelast1)", "z_scalar1 = Scalar[0.001]()",
        "z_add = Add(z_max, z_scalar1)", "z_sqrt = Sqrt(z_add)", "z_reciprocal = Reciprocal(z_sqrt)",
        "z_mul2 = Mul(z_sub2, z_reciprocal)", "z_mul3 = Mul(z_mul2, g)", "z = Add(z_mul3, b)"]
    scalar = next(n for n in body.nodes if n.op == "Scalar" and n.attrs["value"] != 0)
    assert scalar.attrs["shape"] == [1, 1, 1] and scalar.attrs["value"] == pytest.approx(0.001)
    assert_close(original, body, rtol=1e-5, atol=1e-5)


def test_layer_norm_without_bias_ends_with_the_scale_and_uses_the_default_epsilon():
    original, body, _ = decomposed("graph(x: f32[4,9], g: f32[9]) -> [z] { [z] = LayerNormalization(x, g) }")
    assert form(body)[-2:] == ["z_mul2 = Mul(z_sub2, z_reciprocal)", "z = Mul(z_mul2, g)"]
    assert next(n for n in body.nodes if n.op == "Scalar" and n.attrs["value"] != 0).attrs["value"] == \
        pytest.approx(1e-5)
    assert_close(original, body, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value, n", [(3.0, 6), (-70001.5, 6), (0.1, 7), (27.194138, 37), (-70001.3, 300)])
def test_layer_norm_of_a_constant_row_is_the_bias(value, n):
    # also where the rounded mean is not the row's value (all but the first two): x - mean is then the same
    # small offset everywhere, which the correction removes exactly, so the output is the bias
    original, body, _ = decomposed(f"""graph(x: f32[2,{n}], g: f32[{n}], b: f32[{n}]) -> [z] {{
      [z] = LayerNormalization(x, g, b)
    }}""")
    x = np.array([[value] * n, [1.0] * n], np.float32)
    g, b = np.linspace(1, 6, n, dtype=np.float32), np.linspace(-1, 1, n, dtype=np.float32)
    np.testing.assert_array_equal(run_graph_reference(body, [x, g, b])[0], np.stack([b, b]))
    np.testing.assert_array_equal(run_graph_reference(original, [x, g, b])[0], np.stack([b, b]))
    np.testing.assert_array_equal(snipjit.compile(original).run({"x": x, "g": g, "b": b})[0], np.stack([b, b]))


def test_mean_variance_normalization_adds_epsilon_to_the_standard_deviation():
    original, body, _ = decomposed("""graph(x: f32[2,3,11]) -> [z] {
      [z] = MeanVarianceNormalization(x) {axes=[2]}
    }""")
    assert form(body)[-6:] == ["z_sub2 = Sub(z_sub, z_reducelast1)", "z_sqrt = Sqrt(z_max)",
                               "z_scalar1 = Scalar[1e-09]()", "z_add = Add(z_sqrt, z_scalar1)",
                               "z_reciprocal = Reciprocal(z_add)", "z = Mul(z_sub2, z_reciprocal)"]
    assert_close(original, body, rtol=1e-5, atol=1e-5)


REDUCE_FORMS = {
    "ReduceSum": ["z = ReduceLast[sum](x)"],
    "ReduceMean": ["z = ReduceLast[mean](x)"],
    "ReduceMax": ["z = ReduceLast[max](x)"],
    "ReduceMin": ["z = ReduceLast[min](x)"],
    "ReduceProd": ["z = ReduceLast[prod](x)"],
    "ReduceL1": ["z_abs = Abs(x)", "z = ReduceLast[sum](z_abs)"],
    "ReduceL2": ["z_mul = Mul(x, x)", "z_reducelast = ReduceLast[sum](z_mul)", "z = Sqrt(z_reducelast)"],
    "ReduceSumSquare": ["z_mul = Mul(x, x)", "z = ReduceLast[sum](z_mul)"],
    "ReduceLogSum": ["z_reducelast = ReduceLast[sum](x)", "z = Log(z_reducelast)"],
    "ReduceLogSumExp": ["z_reducelast = ReduceLast[max](x)", "z_isinf = IsInf(z_reducelast)", "z_scalar = Scalar[0.0]()",
                        "z_where = Where(z_isinf, z_scalar, z_reducelast)", "z_sub = Sub(x, z_where)",
                        "z_exp = Exp(z_sub)", "z_reducelast1 = ReduceLast[sum](z_exp)", "z_log = Log(z_reducelast1)",
                        "z = Add(z_log, z_where)"],
}


@pytest.mark.parametrize("op", sorted(REDUCE_FORMS))
def test_reduce_ops(op):
    text = f"""graph(x: f32[3,?,21]) -> [z] {{
      const axes: i64[1] = [-1]
      [z] = {op}(x, axes)
    }}"""
    original, body, _ = decomposed(text)
    assert form(body) == REDUCE_FORMS[op]
    assert [v.name for v in body.constants] == []          # the axes went with the node
    assert str(body.outputs[0].type) == "f32[3,?,1]"
    feeds = [np.abs(a) + 0.5 if op == "ReduceLogSum" else a for a in feeds_for(original, dynamic=4)]
    assert_close(original, body, feeds, rtol=1e-5, atol=1e-5)


def test_reduce_log_sum_exp_of_infinite_rows():
    original, body, _ = decomposed("""graph(x: f32[2,3]) -> [z] {
      const axes: i64[1] = [1]
      [z] = ReduceLogSumExp(x, axes)
    }""")
    x = np.array([[-np.inf, -np.inf, -np.inf], [1.0, np.inf, 2.0]], np.float32)
    want = run_graph_reference(original, [x])[0]
    np.testing.assert_array_equal(want.ravel(), [-np.inf, np.inf])
    np.testing.assert_array_equal(run_graph_reference(body, [x])[0], want)


def test_several_reductions_get_distinct_names_beside_existing_ones():
    original, body, _ = decomposed("""graph(x: f32[4,16], z_exp: f32[4,16]) -> [z, w, v] {
      [z] = Softmax(x)
      [w] = Softmax(z_exp)
      [v] = Add(z, w)
    }""")
    names = [n.outputs[0].name for n in body.nodes]
    assert len(set(names)) == len(names)
    assert "z_exp1" in names and names.count("z_exp") == 0       # the input's name is taken
    assert_close(original, body)


def test_other_nodes_are_kept_in_order_and_nothing_changes_without_reductions():
    _, body, changed = decomposed("""graph(x: f32[4,16], y: f32[4,1]) -> [z] {
      [a] = Relu(x)
      [s] = Softmax(a)
      [z] = Add(s, y)
    }""")
    assert changed is True
    assert [n.op for n in body.nodes][0] == "Relu" and [n.op for n in body.nodes][-1] == "Add"
    _, body, changed = decomposed("graph(x: f32[4,16]) -> [z] { [z] = Relu(x) }")
    assert changed is False and form(body) == ["z = Relu(x)"]


def test_a_snippets_node_is_left_alone():
    _, body, changed = decomposed('graph(x: f32[4,16]) -> [z] { [z] = snippets::ReduceLast(x) {kind="max"} }')
    assert changed is False and form(body) == ["z = ReduceLast[max](x)"]


def test_axis_attributes_refer_to_the_ranks_before_canonicalization():
    # x has rank 1 in a rank-3 body: axis=0 is its last axis; the pipeline decomposes before padding ranks
    text = """graph(x: f32[37], y: f32[2,3,37]) -> [z] {
      [s] = Softmax(x) {axis=0}
      [z] = Add(s, y)
    }"""
    body = optimized(text)
    reduce_shapes = [(n.inputs[0].type.shape, n.outputs[0].type.shape) for n in body.nodes if n.op == "ReduceLast"]
    assert reduce_shapes == [((1, 1, 37), (1, 1, 1))] * 2
    original = parse_graph(text)
    feeds = feeds_for(original)
    want = run_graph_reference(original, feeds)[0]
    got = run_graph_reference(body, [a.reshape((1,) * (3 - a.ndim) + a.shape) for a in feeds])[0]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


# ---- which reductions reach a body --------------------------------------------------------------
SUPPORT = {
    "Softmax(x)": True, "Softmax(x) {axis=2}": True, "Softmax(x) {axis=1}": False,
    "LogSoftmax(x) {axis=-1}": True, "LogSoftmax(x) {axis=0}": False,
    "LayerNormalization(x, g, b)": True, "LayerNormalization(x, g)": True,
    "LayerNormalization(x, g2)": False,                     # the scale must be 1-D
    "LayerNormalization(x, g) {axis=1}": False, "LayerNormalization(x, g) {stash_type=11}": False,
    "MeanVarianceNormalization(x) {axes=[2]}": True, "MeanVarianceNormalization(x) {axes=[-1]}": True,
    "MeanVarianceNormalization(x) {axes=[1, 2]}": False,
    "ReduceSum(x, last)": True, "ReduceMean(x, minus1)": True, "ReduceMax(x, last) {keepdims=1}": True,
    "ReduceMin(x, last) {keepdims=0}": False, "ReduceSum(x, first)": False, "ReduceSum(x, both)": False,
    "ReduceSum(x)": False, "ReduceSum(x, dyn_axes)": False, "ReduceL2(x, last) {noop_with_empty_axes=1}": False,
    "ReduceProd(h, minus1)": False,                         # f16
    "ArgMax(x) {axis=2}": False,
}


@pytest.mark.parametrize("call", sorted(SUPPORT))
def test_only_reductions_of_the_innermost_axis_with_kept_dims_fuse(call):
    inputs = "x: f32[2,?,8], g: f32[8], b: f32[8], g2: f32[1,8], h: f16[2,8], dyn_axes: i64[1]"
    graph = parse_graph(f"""graph({inputs}) -> [z] {{
      const last: i64[1] = [2]
      const minus1: i64[1] = [-1]
      const first: i64[1] = [0]
      const both: i64[2] = [1, 2]
      [z] = {call}
    }}""")
    assert is_supported(graph.nodes[0]) is SUPPORT[call]


def test_layer_norm_with_its_statistics_outputs_does_not_fuse():
    graph = parse_graph("""graph(x: f32[2,8], g: f32[8]) -> [z, m, s] {
      [z, m, s] = LayerNormalization(x, g)
    }""")
    assert is_supported(graph.nodes[0]) is False
