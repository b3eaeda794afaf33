"""Function expansion in the ONNX frontend: ops defined by an ONNX function body (fixed or
context-dependent) are imported as that body, and compute what onnx's reference evaluator computes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import snipjit
import snipjit.frontend.onnx as frontend
from snipjit.frontend.onnx import FrontendError, load
from snipjit.frontend.onnx_functions import expand

vi = helper.make_tensor_value_info
rng = np.random.default_rng(0)


def model(nodes, inputs, outputs, opset=24):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_against_reference(m, rtol=1e-5, **feeds):
    """snipjit's outputs equal onnx's reference evaluator's (which runs the op's own kernel)."""
    expected = ReferenceEvaluator(m).run(None, feeds)
    got = snipjit.compile(m).run(feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=1e-6)


def ops_of(m):
    return [n.op for n in load(m).nodes]


# ---- fixed function bodies ---------------------------------------------------------------------------
@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.5}])
def test_swish_is_its_body_with_the_alpha_attribute_or_its_default(attrs):
    m = model([helper.make_node("Swish", ["x"], ["y"], **attrs)], [vi("x", TP.FLOAT, [3, 4])],
              [vi("y", TP.FLOAT, None)])
    assert "Swish" not in ops_of(m) and "Sigmoid" in ops_of(m)
    check_against_reference(m, x=rng.standard_normal((3, 4)).astype(np.float32))
    alpha = [v.data for v in load(m).values() if v.is_constant and v.data.dtype == np.float32]
    assert alpha == [attrs.get("alpha", 1.0)]


def test_nested_function_gets_the_attribute_passed_by_reference():
    """SwiGLU's body calls Swish with alpha=@alpha: the reference resolves to SwiGLU's attribute, and
    Swish is expanded in turn."""
    m = model([helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=2.0)],
              [vi("a", TP.FLOAT, [2, 5]), vi("b", TP.FLOAT, [2, 5])], [vi("y", TP.FLOAT, [2, 5])], opset=28)
    assert sorted(set(ops_of(m))) == ["CastLike", "Mul", "Sigmoid"]
    check_against_reference(m, a=rng.standard_normal((2, 5)).astype(np.float32),
                            b=rng.standard_normal((2, 5)).astype(np.float32))


def test_window_function_body_with_constant_size():
    m = model([helper.make_node("HannWindow", ["n"], ["y"], periodic=0)], [vi("n", TP.INT64, [])],
              [vi("y", TP.FLOAT, None)], opset=17)
    check_against_reference(m, n=np.array(7, np.int64))


# ---- context-dependent function bodies ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rms_normalization_body_depends_on_attributes_and_input_types(dtype):
    m = model([helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=-2, epsilon=1e-3)],
              [vi("x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [2, 3, 4]),
               vi("scale", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [3, 4])],
              [vi("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)], opset=23)
    check_against_reference(m, rtol=1e-3 if dtype == np.float16 else 1e-5,
                            x=rng.standard_normal((2, 3, 4)).astype(dtype),
                            scale=rng.standard_normal((3, 4)).astype(dtype))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_expands_through_negative_log_likelihood(reduction):
    """Two levels of context-dependent bodies, a missing optional input (no weight) and both outputs."""
    m = model([helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss", "log_prob"],
                                reduction=reduction, ignore_index=2)],
              [vi("scores", TP.FLOAT, [3, 5, 2]), vi("labels", TP.INT64, [3, 2])],
              [vi("loss", TP.FLOAT, None), vi("log_prob", TP.FLOAT, None)], opset=13)
    ops = ops_of(m)
    assert "SoftmaxCrossEntropyLoss" not in ops and "NegativeLogLikelihoodLoss" not in ops
    check_against_reference(m, scores=rng.standard_normal((3, 5, 2)).astype(np.float32),
                            labels=np.array([[0, 2], [4, 1], [2, 3]], np.int64))


def test_negative_log_likelihood_with_weight_and_omitted_optional_output_of_the_caller():
    m = model([helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels", "w"], ["loss"])],
              [vi("scores", TP.FLOAT, [4, 3]), vi("labels", TP.INT32, [4]), vi("w", TP.FLOAT, [3])],
              [vi("loss", TP.FLOAT, [])], opset=13)
    check_against_reference(m, scores=rng.standard_normal((4, 3)).astype(np.float32),
                            labels=np.array([0, 2, 1, 2], np.int32), w=np.array([0.2, 1.0, 3.0], np.float32))


# ---- naming, versions, errors -------------------------------------------------------------------------------
def test_expansions_get_fresh_names_that_never_collide_with_the_model_or_each_other():
    # the model uses the names an expansion of Swish would pick ("Swish/" + the body's names), and the
    # op twice
    a, b = "Swish/AlphaMulX", "Swish/Alpha"
    nodes = [helper.make_node("Relu", ["x"], [a]), helper.make_node("Swish", [a], ["t"]),
             helper.make_node("Swish", ["t"], [b]), helper.make_node("Add", [b, a], ["y"])]
    m = model(nodes, [vi("x", TP.FLOAT, [6])], [vi("y", TP.FLOAT, [6])])
    g = load(m)
    names = [v.name for v in g.values()]
    assert len(names) == len(set(names))
    assert {"x", a, "t", b, "y", a + "_1", a + "_2"} <= set(names)
    check_against_reference(m, x=rng.standard_normal(6).astype(np.float32))


def test_body_is_read_in_its_own_opset_and_names_follow_the_node():
    node = helper.make_node("Swish", ["x"], ["y"], name="act")
    fresh = iter(f"v{i}" for i in range(100))
    expansion = expand(node, 28, [None], lambda hint: next(fresh))
    assert expansion.opsets == {"": 24} and expansion.function == "Swish"
    assert [n.op_type for n in expansion.nodes] == ["Constant", "CastLike", "Mul", "Sigmoid", "Mul"]
    assert expansion.nodes[-1].output == ["y"] and expansion.nodes[1].input[1] == "x"
    assert all(n.name.startswith("act/") for n in expansion.nodes)
    assert not any(a.ref_attr_name for n in expansion.nodes for a in n.attribute)


def test_ops_without_function_are_not_expanded():
    assert expand(helper.make_node("Add", ["x", "z"], ["y"]), 18, [None, None], str) is None
    assert expand(helper.make_node("NoSuchOp", ["x"], ["y"]), 18, [None], str) is None
    # an opset older than the op's first function version
    assert expand(helper.make_node("Swish", ["x"], ["y"]), 23, [None], str) is None


def test_unsupported_op_inside_a_body_names_the_original_node_and_the_missing_op(monkeypatch):
    supported = frontend.has_op
    monkeypatch.setattr(frontend, "has_op", lambda op, domain="": op != "Sigmoid" and supported(op, domain))
    m = model([helper.make_node("SwiGLU", ["a", "b"], ["y"], name="gate")],
              [vi("a", TP.FLOAT, [2]), vi("b", TP.FLOAT, [2])], [vi("y", TP.FLOAT, None)], opset=28)
    with pytest.raises(FrontendError, match=r"node #0 'gate' \(SwiGLU, domain 'ai.onnx', opset 28\), in its "
                                            r"function body at Swish > Sigmoid: unsupported op Sigmoid"):
        load(m)


def test_a_function_body_with_control_flow_runs(monkeypatch):
    """AffineGrid's body (imported when the registry lacks the op) branches with If on the size's rank:
    it gives what the registry's AffineGrid gives."""
    m = model([helper.make_node("AffineGrid", ["theta", "size"], ["grid"])],
              [vi("theta", TP.FLOAT, [2, 2, 3]), vi("size", TP.INT64, [4])], [vi("grid", TP.FLOAT, None)], opset=20)
    # (a batch of 2: the body squeezes without axes, which a batch of 1 would squeeze away too)
    feeds = {"theta": np.array([[[1.0, 0.2, 0.1], [-0.3, 0.9, 0.0]]] * 2, np.float32),
             "size": np.array([2, 1, 3, 5], np.int64)}
    want = snipjit.compile(m).run(feeds)[0]
    supported = frontend.has_op
    monkeypatch.setattr(frontend, "has_op", lambda op, domain="": op != "AffineGrid" and supported(op, domain))
    assert "If" in [n.op for n in load(m).nodes]
    np.testing.assert_allclose(snipjit.compile(m).run(feeds)[0], want, rtol=1e-6, atol=1e-6)