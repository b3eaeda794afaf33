"""MarkQuantizedConvolutions: a Conv reading DequantizeLinear(QuantizeLinear(x)) with one scale and zero
point, and DequantizeLinear of constant int8 weights without a zero point, gets `StaticQuantization`;
any other Conv is left unmarked; `int8=False` marks none; the mark survives the pipeline to the int8
step, and a QDQ model's results match the float path's within a quantization step."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import snipjit
from snipjit import parse_graph
from snipjit.ops.int8 import META, StaticQuantization
from snipjit.passes.mark_quantized_convolutions import mark_quantized_convolutions
from snipjit.runtime.implementations import gemm_launch


def conv(qtype="u8", zero="3", zero2="3", scale2="0.05", weight_zero="", scales="f32[4] = [0.1, 0.2, 0.3, 0.4]",
         axis=0, weight_type="i8") -> str:
    zero_input = ", wz" if weight_zero else ""
    return f"""graph(x: f32[1, 2, 5, 5]) -> [y: f32[1, 4, 5, 5]] {{
      const s: f32[] = 0.05
      const z: {qtype}[] = {zero}
      const s2: f32[] = {scale2}
      const z2: {qtype}[] = {zero2}
      const w: {weight_type}[4, 2, 3, 3] = <elided>
      const ws: {scales}
      {"const wz: i8[4] = [" + weight_zero + "]" if weight_zero else ""}
      [q: {qtype}[1, 2, 5, 5]] = QuantizeLinear(x, s, z)
      [xd: f32[1, 2, 5, 5]] = DequantizeLinear(q, s2, z2)
      [wd: f32[4, 2, 3, 3]] = DequantizeLinear(w, ws{zero_input}) {{axis = {axis}}}
      [y: f32[1, 4, 5, 5]] = Conv(xd, wd) {{pads = [1, 1, 1, 1]}}
    }}"""


def marked(text: str, **options):
    graph = mark_quantized_convolutions(parse_graph(text, elided="zeros"), options)
    (node,) = [n for n in graph.nodes if n.op == "Conv"]
    return node.meta.get(META)


def test_a_qdq_conv_is_marked_with_its_scales():
    scales = tuple(np.float32([0.1, 0.2, 0.3, 0.4]).tolist())
    assert marked(conv()) == StaticQuantization(float(np.float32(0.05)), 3, 0, 255, scales)
    assert marked(conv("i8", "-5", "-5")) == StaticQuantization(float(np.float32(0.05)), -5, -128, 127, scales)
    assert marked(conv(scales="f32[] = 0.5")).weight_scales == (0.5,)
    assert marked(conv(weight_zero="0, 0, 0, 0")) is not None


@pytest.mark.parametrize("change", [dict(zero2="4"), dict(scale2="0.1"), dict(qtype="u16", zero="3", zero2="3"),
                                    dict(weight_zero="0, 1, 0, 0"), dict(axis=1), dict(weight_type="u8")])
def test_other_convs_are_not_marked(change):
    assert marked(conv(**change)) is None


def test_int8_false_marks_nothing():
    assert marked(conv(), int8=False) is None


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


@pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")
@pytest.mark.parametrize("activation_type, zero", [(TensorProto.UINT8, 7), (TensorProto.INT8, -3)])
def test_a_qdq_model_runs_int8_convolutions(level, activation_type, zero):
    rng = np.random.default_rng(0)
    model = qdq_model(rng, activation_type, zero)
    x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32) * 2
    quantized, plain = snipjit.compile(model), snipjit.compile(model, int8=False)
    assert [s.kind for s in quantized.program.steps].count("int8") == 2
    assert "int8" not in [s.kind for s in plain.program.steps]
    (got,), (want,) = quantized.run({"x": x}), plain.run({"x": x})
    # the same integers reach both convolutions (ties in the requantization aside: a step of 0.03 times
    # the 1x1 weights' largest column)
    step = 0.03 * np.abs(onnx.numpy_helper.to_array(model.graph.initializer[8])).max() * 127
    assert np.abs(got - want).max() <= step
    assert np.mean(np.abs(got - want) > 1e-3 * np.abs(want).max()) < 0.01


@pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")
def test_weights_changed_after_dequantization_stay_float():
    model = qdq_model(np.random.default_rng(1))
    mul = helper.make_node("Mul", ["wd1", "k"], ["wd1k"])
    model.graph.initializer.append(numpy_helper.from_array(np.array(1.001, np.float32), "k"))
    (last,) = [n for n in model.graph.node if n.input[:1] == ["rd"]]
    last.input[1] = "wd1k"
    model.graph.node.insert(list(model.graph.node).index(last), mul)
    steps = snipjit.compile(model).program.steps
    assert [s.kind for s in steps].count("int8") == 1
