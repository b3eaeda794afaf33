"""The int8 steps of a QDQ model's convolutions: chosen for the marked Convs, results within a requantization
step of the float path at every ISA level, uint8 and int8 activations; kept by a saved model (the int8
weights are what it stores); the float convolution where the weights are not exactly int8 products or
their sums could pass int32."""
import pickle

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import snipjit
from snipjit.runtime.implementations import gemm_launch
from snipjit.runtime.implementations.conv_int8_launch import pack_int8_conv

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


def kinds(cm) -> list[str]:
    return [s.kind for s in cm.program.steps]


def qdq_model(rng, activation_type=TensorProto.UINT8, zero=7):
    """x -> Q/DQ -> Conv 3x3 (per-channel int8 weights, bias) -> Relu -> Q/DQ -> Conv 1x1 -> y."""
    np_type = np.uint8 if activation_type == TensorProto.UINT8 else np.int8
    inits = [numpy_helper.from_array(np.array(0.04, np.float32), "s"),
             numpy_helper.from_array(np.array(zero, np_type), "z"),
             numpy_helper.from_array(np.array(0.03, np.float32), "s1"),
             numpy_helper.from_array(np.array(zero, np_type), "z1")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    for i, (o, c, k) in enumerate(((24, 16, 3), (8, 24, 1))):
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (o, c, k, k)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array((rng.random(o) * 0.01 + 0.002).astype(np.float32), f"ws{i}"),
                  numpy_helper.from_array(np.zeros(o, np.int8), f"wz{i}"),
                  numpy_helper.from_array(rng.standard_normal(o).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"wd{i}"], axis=0))
    nodes += [helper.make_node("Conv", ["xd", "wd0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c0"], ["r0"]),
              helper.make_node("QuantizeLinear", ["r0", "s1", "z1"], ["rq"]),
              helper.make_node("DequantizeLinear", ["rq", "s1", "z1"], ["rd"]),
              helper.make_node("Conv", ["rd", "wd1", "b1"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 9, 9])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("activation_type, zero", [(TensorProto.UINT8, 7), (TensorProto.INT8, -3)])
def test_a_qdq_model_runs_int8_convolutions(level, activation_type, zero):
    rng = np.random.default_rng(0)
    model = qdq_model(rng, activation_type, zero)
    x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32) * 2
    quantized, plain = snipjit.compile(model), snipjit.compile(model, int8=False)
    assert kinds(quantized).count("int8") == 2
    assert "int8" not in kinds(plain)
    (got,), (want,) = quantized.run({"x": x}), plain.run({"x": x})
    # the same integers reach both convolutions (ties in the requantization aside: a step of 0.03 times
    # the 1x1 weights' largest column)
    step = 0.03 * np.abs(onnx.numpy_helper.to_array(model.graph.initializer[8])).max() * 127
    assert np.abs(got - want).max() <= step
    assert np.mean(np.abs(got - want) > 1e-3 * np.abs(want).max()) < 0.01


def test_weights_changed_after_dequantization_stay_float():
    model = qdq_model(np.random.default_rng(1))
    mul = helper.make_node("Mul", ["wd1", "k"], ["wd1k"])
    model.graph.initializer.append(numpy_helper.from_array(np.array(1.001, np.float32), "k"))
    (last,) = [n for n in model.graph.node if n.input[:1] == ["rd"]]
    last.input[1] = "wd1k"
    model.graph.node.insert(list(model.graph.node).index(last), mul)
    assert kinds(snipjit.compile(model)).count("int8") == 1


def test_a_saved_model_keeps_its_int8_steps(tmp_path):
    rng = np.random.default_rng(2)
    model = qdq_model(rng)
    x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
    cm = snipjit.compile(model)
    (want,) = cm.run({"x": x})
    cm.save(tmp_path / "model.snipjit")
    for loaded in (snipjit.load(tmp_path / "model.snipjit"), pickle.loads(pickle.dumps(cm))):
        assert kinds(loaded).count("int8") == 2
        np.testing.assert_array_equal(loaded.run({"x": x})[0], want)


def test_the_int8_form_gives_back_the_float_weights():
    rng = np.random.default_rng(3)
    q = rng.integers(-128, 128, (37, 19, 3, 2)).astype(np.int8)
    scales = (rng.random(37) * 0.1 + 0.01).astype(np.float32)
    expected = q.astype(np.float32) * scales.reshape(-1, 1, 1, 1)
    np.testing.assert_array_equal(pack_int8_conv(q, scales).unpack(), expected)


def test_sums_that_could_pass_int32_stay_float():
    """8192 channels of 3x3 taps at -128 and pixels of 255 sum past 2^31."""
    s = numpy_helper.from_array(np.array(1.0, np.float32), "s")
    z = numpy_helper.from_array(np.array(0, np.uint8), "z")
    w = numpy_helper.from_array(np.full((1, 8192, 3, 3), -128, np.int8), "w")
    ws = numpy_helper.from_array(np.array([1.0], np.float32), "ws")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["y"])]
    graph = helper.make_graph(nodes, "long", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8192, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 1])], [s, z, w, ws])
    cm = snipjit.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    assert "int8" not in kinds(cm)
    (y,) = cm.run({"x": np.full((1, 8192, 3, 3), 255, np.float32)})
    assert float(y.reshape(-1)[0]) == pytest.approx(-128 * 255 * 8192 * 9, rel=1e-3)   # (float32 sums)
