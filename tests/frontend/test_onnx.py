"""The ONNX frontend on small models built with onnx.helper: constants, declared types, attributes,
opset rewrites (checked structurally and, where semantics change, numerically) and errors."""
from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import snipjit
from snipjit.frontend.onnx import FrontendError, load
from snipjit.ir import TensorType

vi = helper.make_tensor_value_info


def model(nodes, inputs, outputs, opset=18, inits=(), value_info=(), domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    return helper.make_model(graph, opset_imports=imports)


def run(m, **feeds):
    return snipjit.compile(m).run(feeds)


def node_of(graph, op):
    (n,) = [n for n in graph.nodes if n.op == op]
    return n


def const_data(v):
    assert v is not None and v.is_constant, v
    return v.data


X3 = vi("x", TP.FLOAT, [2, 3, 4])
Y = vi("y", TP.FLOAT, None)


# ---- constants and declared types ------------------------------------------------------------------
def test_initializers_become_constants_and_initializer_inputs_are_not_inputs():
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    m = model([helper.make_node("Add", ["x", "w"], ["y"])],
              [vi("x", TP.FLOAT, [4]), vi("w", TP.FLOAT, [4])], [Y], inits=[w])
    g = load(m)
    assert [v.name for v in g.inputs] == ["x"]
    add = node_of(g, "Add")
    np.testing.assert_array_equal(const_data(add.inputs[1]), np.arange(4, dtype=np.float32))
    assert str(g.outputs[0].type) == "f32[4]"


@pytest.mark.parametrize("attr, value, expected", [
    ("value", numpy_helper.from_array(np.array([[1, 2]], np.int32)), np.array([[1, 2]], np.int32)),
    ("value_float", 1.5, np.array(1.5, np.float32)),
    ("value_floats", [1.0, 2.5], np.array([1.0, 2.5], np.float32)),
    ("value_int", 7, np.array(7, np.int64)),
    ("value_ints", [3, 4], np.array([3, 4], np.int64)),
    ("value_string", "hi", np.array("hi", object)),
    ("value_strings", ["a", "b"], np.array(["a", "b"], object)),
    ("sparse_value", helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, 6.0], np.float32), "v"),
                                               numpy_helper.from_array(np.array([1, 4], np.int64), "i"), [2, 3]),
     np.array([[0, 5, 0], [0, 6, 0]], np.float32)),
])
def test_constant_node_forms_become_constant_values(attr, value, expected):
    m = model([helper.make_node("Constant", [], ["c"], **{attr: value}), helper.make_node("Identity", ["c"], ["y"])],
              [], [vi("y", TP.UNDEFINED, None)])
    g = load(m)
    c = node_of(g, "Identity").inputs[0]
    assert c.name == "c" and c.producer is None
    data = const_data(c)
    assert data.dtype == expected.dtype and data.shape == expected.shape
    if expected.dtype == object:
        assert [x.decode() if isinstance(x, bytes) else x for x in data.reshape(-1)] == list(expected.reshape(-1))
    else:
        np.testing.assert_array_equal(data, expected)


def test_constant_with_no_or_two_values_is_an_error():
    for attrs in ({}, {"value_int": 1, "value_float": 2.0}):
        m = model([helper.make_node("Constant", [], ["c"], **attrs), helper.make_node("Identity", ["c"], ["y"])],
                  [], [Y])
        with pytest.raises(FrontendError, match=r"node #0 \(Constant.*exactly one value attribute"):
            load(m)


def test_declared_types_dim_param_missing_dim_and_missing_shape():
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["N", -1, 4])  # exporters write -1 for "dynamic"
    x.type.tensor_type.shape.dim.add()  # a dim with neither value nor name
    z = helper.make_tensor_value_info("z", TP.FLOAT, None)
    mid = helper.make_tensor_value_info("t", TP.FLOAT, ["N", "C", 4, 5])
    m = model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["z"], ["u"]),
               helper.make_node("Add", ["t", "t"], ["y"])],
              [x, z], [Y, vi("u", TP.FLOAT, None)], value_info=[mid])
    g = load(m)
    assert g.inputs[0].type == TensorType.of("f32", ("N", None, 4, None))
    assert g.inputs[1].type.shape is None
    # the declared value_info names the dim inference leaves open, and it flows on
    assert node_of(g, "Add").inputs[0].type.shape == ("N", "C", 4, 5)
    assert g.outputs[0].type.shape == ("N", "C", 4, 5)
    assert all(v.type is not None for v in g.values())


def test_attributes_become_python_values():
    value = numpy_helper.from_array(np.array([2.5], np.float32))
    m = model([helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
               helper.make_node("LeakyRelu", ["t"], ["u"], alpha=0.25),
               helper.make_node("Gelu", ["u"], ["y"], approximate="tanh"),
               helper.make_node("ConstantOfShape", ["s"], ["z"], value=value)],
              [X3, vi("s", TP.INT64, [2])], [Y, vi("z", TP.FLOAT, None)])
    g = load(m)
    assert node_of(g, "Transpose").attrs == {"perm": [2, 0, 1]}
    alpha = node_of(g, "LeakyRelu").attrs["alpha"]
    assert isinstance(alpha, float) and alpha == 0.25
    assert node_of(g, "Gelu").attrs == {"approximate": "tanh"}
    arr = node_of(g, "ConstantOfShape").attrs["value"]
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr.tolist() == [2.5]


def test_empty_input_name_is_a_missing_optional_input():
    m = model([helper.make_node("Clip", ["x", "", "hi"], ["y"])], [X3, vi("hi", TP.FLOAT, [])], [Y])
    clip = node_of(load(m), "Clip")
    assert clip.inputs[1] is None and clip.inputs[2].name == "hi"


def test_omitted_outputs_get_fresh_values_and_trailing_optional_ones_are_dropped():
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    m = model([helper.make_node("TopK", ["x", "k"], ["", "i"]),
               helper.make_node("Dropout", ["x"], ["y", ""])],
              [X3], [vi("i", TP.INT64, None), Y], inits=[k])
    g = load(m)
    topk = node_of(g, "TopK")
    assert len(topk.outputs) == 2 and topk.outputs[0].name not in ("", "i") and topk.outputs[1].name == "i"
    assert [o.name for o in node_of(g, "Dropout").outputs] == ["y"]


def test_load_from_path_bytes_and_external_data(tmp_path, monkeypatch):
    w = numpy_helper.from_array(np.arange(1000, dtype=np.float32), "w")
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", TP.FLOAT, [1000])], [Y], inits=[w])
    data = m.SerializeToString()
    path = tmp_path / "sub" / "m.onnx"
    path.parent.mkdir()
    onnx.save_model(m, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    monkeypatch.chdir(tmp_path)  # external data is found next to the model, not in the working directory
    for source in (path, str(path)):
        g = load(source)
        np.testing.assert_array_equal(const_data(node_of(g, "Add").inputs[1]), np.arange(1000, dtype=np.float32))
    g = load(data, name="named")
    assert g.name == "named" and g.inputs[0].name == "x"


def test_local_functions_are_inlined():
    f = helper.make_function("local", "Double", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                             [helper.make_opsetid("", 18)])
    m = model([helper.make_node("Double", ["x"], ["y"], domain="local")], [X3], [Y], domains=[("local", 1)])
    m.functions.append(f)
    g = load(m)
    assert [n.op for n in g.nodes] == ["Add"]
    x = np.random.rand(2, 3, 4).astype(np.float32)
    np.testing.assert_allclose(run(m, x=x)[0], 2 * x)


# ---- opset rewrites ---------------------------------------------------------------------------------
def test_squeeze_unsqueeze_axes_attribute_becomes_input():
    m = model([helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 4]),
               helper.make_node("Squeeze", ["u"], ["y"], axes=[0])],
              [X3], [Y], opset=11)
    g = load(m)
    assert const_data(node_of(g, "Unsqueeze").inputs[1]).tolist() == [0, 4]
    assert const_data(node_of(g, "Squeeze").inputs[1]).tolist() == [0]
    assert node_of(g, "Squeeze").attrs == {} and g.outputs[0].type.shape == (2, 3, 4, 1)


def test_split_attribute_becomes_input_and_equal_split_counts_outputs():
    m = model([helper.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])],
              [X3], [vi("a", TP.FLOAT, None), vi("b", TP.FLOAT, None)], opset=11)
    split = node_of(load(m), "Split")
    assert const_data(split.inputs[1]).tolist() == [1, 3] and "num_outputs" not in split.attrs
    m = model([helper.make_node("Split", ["x"], ["a", "b"], axis=2)],
              [X3], [vi("a", TP.FLOAT, None), vi("b", TP.FLOAT, None)], opset=13)
    g = load(m)
    assert node_of(g, "Split").attrs["num_outputs"] == 2
    assert [o.type.shape for o in g.outputs] == [(2, 3, 2), (2, 3, 2)]


@pytest.mark.parametrize("op, opset", [("ReduceSum", 12), ("ReduceMean", 17), ("ReduceMax", 13)])
def test_reduce_axes_attribute_becomes_input(op, opset):
    m = model([helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)], [X3], [Y], opset=opset)
    g = load(m)
    assert const_data(node_of(g, op).inputs[1]).tolist() == [1]
    assert g.outputs[0].type.shape == (2, 4)


def test_reduce_without_axes_keeps_reducing_everything():
    m = model([helper.make_node("ReduceMean", ["x"], ["y"], keepdims=0)], [X3], [Y], opset=13)
    g = load(m)
    assert len(node_of(g, "ReduceMean").inputs) == 1 and g.outputs[0].type.shape == ()


def test_slice_attributes_become_inputs():
    m = model([helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, 2], axes=[2, 0])], [X3], [Y], opset=9)
    g = load(m)
    s = node_of(g, "Slice")
    assert [const_data(v).tolist() for v in s.inputs[1:]] == [[1, 0], [3, 2], [2, 0]]
    x = np.random.rand(2, 3, 4).astype(np.float32)
    np.testing.assert_array_equal(run(m, x=x)[0], x[0:2, :, 1:3])


def test_clip_attributes_become_inputs_of_the_input_dtype():
    m = model([helper.make_node("Clip", ["x"], ["y"], min=-0.5)], [vi("x", TP.DOUBLE, [3])],
              [vi("y", TP.DOUBLE, None)], opset=6)
    clip = node_of(load(m), "Clip")
    lo = const_data(clip.inputs[1])
    assert lo.dtype == np.float64 and lo.shape == () and lo == -0.5 and len(clip.inputs) == 2


def test_pad_attributes_become_inputs_including_opset1_paddings():
    for opset, name in ((2, "pads"), (1, "paddings")):
        m = model([helper.make_node("Pad", ["x"], ["y"], mode="constant", value=1.5, **{name: [0, 0, 1, 0, 0, 2]})],
                  [X3], [Y], opset=opset)
        g = load(m)
        pad = node_of(g, "Pad")
        assert const_data(pad.inputs[1]).tolist() == [0, 0, 1, 0, 0, 2]
        assert const_data(pad.inputs[2]).dtype == np.float32 and float(const_data(pad.inputs[2])) == 1.5
        assert pad.attrs == {"mode": "constant"} and g.outputs[0].type.shape == (2, 3, 7)


def test_topk_k_attribute_becomes_1d_input():
    m = model([helper.make_node("TopK", ["x"], ["y", "i"], k=2)], [X3],
              [Y, vi("i", TP.INT64, None)], opset=9)
    g = load(m)
    k = const_data(node_of(g, "TopK").inputs[1])
    assert k.dtype == np.int64 and k.tolist() == [2]
    assert g.outputs[0].type.shape == (2, 3, 2)


def test_dropout_ratio_becomes_input_and_is_test_is_dropped():
    m = model([helper.make_node("Dropout", ["x"], ["y"], ratio=0.3)], [X3], [Y], opset=10)
    d = node_of(load(m), "Dropout")
    assert const_data(d.inputs[1]).dtype == np.float32 and d.attrs == {}
    m = model([helper.make_node("Dropout", ["x"], ["y"], is_test=1)], [X3], [Y], opset=6)
    assert node_of(load(m), "Dropout").attrs == {}


def test_consumed_inputs_and_batchnorm_spatial_are_dropped():
    c = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "m", "v")]
    m = model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=1, is_test=1,
                                consumed_inputs=[0, 0, 0, 1, 1], epsilon=1e-3),
               helper.make_node("Relu", ["y"], ["r"], consumed_inputs=[0])],
              [X3], [vi("r", TP.FLOAT, None)], inits=c, opset=5)
    g = load(m)
    bn = node_of(g, "BatchNormalization").attrs
    assert set(bn) == {"epsilon"} and bn["epsilon"] == pytest.approx(1e-3) and node_of(g, "Relu").attrs == {}


def test_batchnorm_spatial_zero_is_refused():
    c = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "m", "v")]
    m = model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0)],
              [X3], [Y], inits=c, opset=8)
    with pytest.raises(FrontendError, match="spatial=0"):
        load(m)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_before_13_normalises_the_flattened_rows(op):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    rows = x.reshape(2, 12)
    expected = {"Softmax": np.exp(rows) / np.exp(rows).sum(1, keepdims=True),
                "LogSoftmax": rows - np.log(np.exp(rows).sum(1, keepdims=True)),
                "Hardmax": (rows == rows.max(1, keepdims=True)).astype(np.float32)}[op].reshape(2, 3, 4)
    m = model([helper.make_node(op, ["x"], ["y"], axis=1)], [X3], [Y], opset=11)
    g = load(m)
    assert [n.op for n in g.nodes] == ["Flatten", op, "Reshape"]
    assert node_of(g, op).attrs == {"axis": -1} and g.outputs[0].type.shape == (2, 3, 4)
    np.testing.assert_allclose(run(m, x=x)[0], expected, rtol=1e-5, atol=1e-6)


def test_softmax_before_13_on_the_last_axis_stays_one_node():
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=2)], [X3], [Y], opset=9)
    g = load(m)
    assert [n.op for n in g.nodes] == ["Softmax"] and g.nodes[0].attrs == {"axis": -1}


def test_softmax_before_13_with_dynamic_dims_reshapes_to_the_runtime_shape():
    m = model([helper.make_node("Softmax", ["x"], ["y"])], [vi("x", TP.FLOAT, ["N", 3, 4])], [Y], opset=11)
    g = load(m)
    assert [n.op for n in g.nodes] == ["Flatten", "Softmax", "Shape", "Reshape"]
    x = np.random.rand(5, 3, 4).astype(np.float32)
    np.testing.assert_allclose(run(m, x=x)[0].sum(axis=(1, 2)), np.ones(5), rtol=1e-5)


@pytest.mark.parametrize("opset, scales_as", [(7, "attr"), (9, "input")])
def test_upsample_becomes_asymmetric_resize(opset, scales_as):
    scales = [1.0, 1.0, 2.0, 3.0]
    if scales_as == "attr":
        nodes, inits = [helper.make_node("Upsample", ["x"], ["y"], scales=scales)], []
    else:
        nodes = [helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")]
        inits = [numpy_helper.from_array(np.array(scales, np.float32), "s")]
    m = model(nodes, [vi("x", TP.FLOAT, [1, 1, 2, 2])], [Y], inits=inits, opset=opset)
    g = load(m)
    r = node_of(g, "Resize")
    assert r.inputs[1] is None and const_data(r.inputs[2]).tolist() == scales
    assert r.attrs["coordinate_transformation_mode"] == "asymmetric" and r.attrs["nearest_mode"] == "floor"
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    np.testing.assert_array_equal(run(m, x=x)[0], x.repeat(2, axis=2).repeat(3, axis=3))


def test_resize_10_gets_an_empty_roi_and_asymmetric_coordinates():
    s = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")
    m = model([helper.make_node("Resize", ["x", "s"], ["y"], mode="linear")], [vi("x", TP.FLOAT, [1, 1, 2, 2])],
              [Y], inits=[s], opset=10)
    r = node_of(load(m), "Resize")
    assert r.inputs[1] is None and r.inputs[2].name == "s"
    assert r.attrs == {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}


def test_reshape_4_cast_5_concat_3_and_scatter_10_forms():
    m = model([helper.make_node("Reshape", ["x"], ["r"], shape=[6, 4]),
               helper.make_node("Cast", ["r"], ["c"], to="DOUBLE"),
               helper.make_node("Concat", ["c", "c"], ["y"])],
              [X3], [vi("y", TP.DOUBLE, None)], opset=3)
    g = load(m)
    assert const_data(node_of(g, "Reshape").inputs[1]).tolist() == [6, 4]
    assert node_of(g, "Cast").attrs == {"to": TP.DOUBLE}
    assert node_of(g, "Concat").attrs == {"axis": 1} and g.outputs[0].type == TensorType.of("f64", (6, 8))

    m = model([helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=1)],
              [vi("d", TP.FLOAT, [1, 5]), vi("i", TP.INT64, [1, 2]), vi("u", TP.FLOAT, [1, 2])], [Y], opset=10)
    assert [n.op for n in load(m).nodes] == ["ScatterElements"]


def test_legacy_broadcast_with_axis_aligns_b_at_the_axis():
    b = numpy_helper.from_array(np.array([10.0, 20.0, 30.0], np.float32), "b")
    m = model([helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)], [X3], [Y], inits=[b], opset=6)
    g = load(m)
    assert [n.op for n in g.nodes] == ["Unsqueeze", "Add"] and node_of(g, "Add").attrs == {}
    x = np.zeros((2, 3, 4), np.float32)
    np.testing.assert_array_equal(run(m, x=x)[0], np.broadcast_to(np.array([10, 20, 30], np.float32)[:, None],
                                                                  (2, 3, 4)))


def test_prelu_before_7_applies_a_1d_slope_along_the_channel_axis():
    s = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "s")
    m = model([helper.make_node("PRelu", ["x", "s"], ["y"])], [X3], [Y], inits=[s], opset=6)
    assert [n.op for n in load(m).nodes] == ["Unsqueeze", "PRelu"]
    x = -np.ones((2, 3, 4), np.float32)
    np.testing.assert_array_equal(run(m, x=x)[0], np.broadcast_to(-np.array([1, 2, 3], np.float32)[:, None],
                                                                  (2, 3, 4)))


def test_current_forms_pass_through_unchanged():
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    m = model([helper.make_node("ReduceSum", ["x", "axes"], ["s"]), helper.make_node("Softmax", ["s"], ["y"], axis=0)],
              [X3], [Y], inits=[axes], opset=13)
    g = load(m)
    assert [n.op for n in g.nodes] == ["ReduceSum", "Softmax"]
    assert node_of(g, "Softmax").attrs == {"axis": 0} and node_of(g, "ReduceSum").inputs[1].name == "axes"


# ---- errors -----------------------------------------------------------------------------------------
def test_unsupported_op_error_names_node_index_name_op_domain_and_opset():
    m = model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("NoSuchOp", ["t"], ["y"], name="weird")],
              [X3], [Y], opset=17)
    with pytest.raises(FrontendError, match=r"node #1 'weird' \(NoSuchOp, domain 'ai.onnx', opset 17\): "
                                            r"unsupported op NoSuchOp"):
        load(m)


def test_op_of_another_domain_is_unsupported_and_unknown_domain_is_an_error():
    m = model([helper.make_node("Relu", ["x"], ["y"], domain="com.example")], [X3], [Y], domains=[("com.example", 2)])
    with pytest.raises(FrontendError, match=r"node #0 \(Relu, domain 'com.example', opset 2\): unsupported op"):
        load(m)
    m = model([helper.make_node("Relu", ["x"], ["y"], domain="com.nowhere")], [X3], [Y])
    with pytest.raises(FrontendError, match=r"node #0 \(Relu, domain 'com.nowhere'.*unknown domain"):
        load(m)


def test_subgraph_attributes_of_other_ops_are_refused():
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "b", [], [vi("o", TP.FLOAT, None)])
    m = model([helper.make_node("Relu", ["x"], ["y"], body=branch)], [X3], [Y])
    with pytest.raises(FrontendError, match=r"node #0 \(Relu.*'body' is a subgraph; only If, Loop and Scan"):
        load(m)


def test_dangling_input_names_the_node_and_the_input():
    m = model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], [X3], [Y])
    with pytest.raises(FrontendError, match=r"node #0 'r' \(Relu.*input 0 'nowhere' is not produced"):
        load(m)
    m = model([helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Relu", ["x"], ["t"])], [X3], [Y])
    with pytest.raises(FrontendError, match="later node"):
        load(m)


def test_graph_input_without_type_or_of_non_tensor_type_is_an_error():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [onnx.ValueInfoProto(name="x")], [Y])
    with pytest.raises(FrontendError, match="graph input 'x' has no type"):
        load(m)
    seq = helper.make_tensor_sequence_value_info("x", TP.FLOAT, None)
    m = model([helper.make_node("Relu", ["x"], ["y"])], [seq], [Y])
    with pytest.raises(FrontendError, match="graph input 'x' has type sequence_type"):
        load(m)


def test_bad_attribute_is_an_error_naming_the_node():
    m = model([helper.make_node("LeakyRelu", ["x"], ["y"], name="lr", beta=1.0)], [X3], [Y])
    with pytest.raises(FrontendError, match=r"node #0 'lr' \(LeakyRelu.*unknown attribute"):
        load(m)
    bad = helper.make_node("Gelu", ["x"], ["y"])
    bad.attribute.append(onnx.AttributeProto(name="approximate", type=onnx.AttributeProto.STRING, s=b"\xff\xfe"))
    with pytest.raises(FrontendError, match="not valid UTF-8"):
        load(model([bad], [X3], [Y]))


def test_shape_errors_name_the_node():
    m = model([helper.make_node("Add", ["x", "z"], ["y"], name="add")], [X3, vi("z", TP.FLOAT, [5])], [Y])
    with pytest.raises(FrontendError, match=r"node #0 'add' \(Add, domain 'ai.onnx', opset 18\)"):
        load(m)


def test_malformed_models():
    with pytest.raises(FrontendError, match="not a valid ONNX model"):
        load(b"\x08\x07garbage that is not a protobuf \xff\xff")
    m = model([helper.make_node("Relu", ["x"], ["t"])], [X3], [vi("missing", TP.FLOAT, None)])
    with pytest.raises(FrontendError, match="graph output 'missing' is not produced"):
        load(m)
    m = model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])], [X3], [Y])
    with pytest.raises(FrontendError, match=r"node #1 .*output 'y' is already defined"):
        load(m)
    with pytest.raises(TypeError):
        load(42)
