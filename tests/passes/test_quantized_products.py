"""QuantizedProducts: a MatMul or Gemm of QDQ activations (uint8 or int8, per tensor) and int8 weights (per
tensor or per column, no zero point) becomes DynamicQuantizedMatMul times the column scales (Gemm: alpha,
plus beta·C) with the same values as the float graph's; anything else stays; and a model quantized by
onnxruntime's quantize_static runs its products on the int8 kernel within a step of ONNX Runtime."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import snipjit
from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.quantized_products import quantized_products
from snipjit.runtime.implementations import gemm_launch

rng = np.random.default_rng(0)


def product(op="MatMul", qtype="u8", zero="3", zero2="3", attrs="", weights="i8[16, 8]", scales="f32[8]",
            axis=1, c="") -> str:
    k, n = (8, 16) if "transB = 1" in attrs else (16, 8)
    c_input = ", c" if c else ""
    return f"""graph(x: f32[5, 16]) -> [y: f32[5, 8]] {{
      const s: f32[] = 0.05
      const z: {qtype}[] = {zero}
      const z2: {qtype}[] = {zero2}
      const w: {weights.replace("[16, 8]", f"[{k}, {n}]")} = <elided>
      const ws: {scales} = <elided>
      {"const c: f32[8] = <elided>" if c else ""}
      [q: {qtype}[5, 16]] = QuantizeLinear(x, s, z)
      [xd: f32[5, 16]] = DequantizeLinear(q, s, z2)
      [wd: f32[{k}, {n}]] = DequantizeLinear(w, ws) {{axis = {axis}}}
      [y: f32[5, 8]] = {op}(xd, wd{c_input}){attrs}
    }}"""


def rewritten(text: str):
    graph = parse_graph(text, elided="zeros")
    for v in graph.constants:
        if v.data.dtype == np.int8 and v.data.ndim == 2:
            v.data = rng.integers(-128, 128, v.data.shape).astype(np.int8)
        elif v.data.ndim == 1:
            v.data = (rng.random(v.data.shape) * 0.02 + 0.001).astype(np.float32)
    x = (rng.standard_normal((5, 16)) * 4).astype(np.float32)
    x[0, :4] = (np.arange(4) + 0.5) * 0.05   # (ties)
    (want,) = run_graph_reference(graph, [x])
    after = quantized_products(graph.copy())
    after.validate()
    (got,) = run_graph_reference(after, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    return [n.op for n in after.nodes]


@pytest.mark.parametrize("text", [product(), product(qtype="i8", zero="-7", zero2="-7"), product(scales="f32[]"),
                                  product("Gemm", attrs=" {alpha = 0.5, beta = 2.0}", c="c"),
                                  product("Gemm", attrs=" {transB = 1}", axis=0, c="c"),
                                  product("Gemm", attrs=" {transB = 1}", axis=0)])
def test_products_become_int8_with_the_same_values(text):
    ops = rewritten(text)
    assert "DynamicQuantizedMatMul" in ops and "MatMul" not in ops and "Gemm" not in ops


@pytest.mark.parametrize("text", [product(zero2="4"), product(weights="u8[16, 8]"), product(axis=0),
                                  product("Gemm", attrs=" {transA = 1}"), product(qtype="u16")])
def test_other_products_stay(text):
    graph = parse_graph(text, elided="zeros")
    assert "DynamicQuantizedMatMul" not in [n.op for n in quantized_products(graph).nodes]


def test_int8_false_keeps_the_float_product():
    graph = parse_graph(product(), elided="zeros")
    assert "MatMul" in [n.op for n in quantized_products(graph, {"int8": False}).nodes]


@pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")
def test_a_quantize_static_model_runs_int8_products(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    inits = [numpy_helper.from_array(rng.standard_normal((64, 96)).astype(np.float32) * 0.1, "w0"),
             numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "b0"),
             numpy_helper.from_array(rng.standard_normal((96, 32)).astype(np.float32) * 0.1, "w1"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]), helper.make_node("Add", ["m0", "b0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["r0"]), helper.make_node("Gemm", ["r0", "w1", "b1"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "float.onnx")

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((8, 64)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(tmp_path / "float.onnx", tmp_path / "qdq.onnx", Calibration(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    model = onnx.load(tmp_path / "qdq.onnx")
    x = rng.standard_normal((8, 64)).astype(np.float32)
    cm = snipjit.compile(model)
    assert [s.kind for s in cm.program.steps].count("int8") == 2
    (got,) = cm.run({"x": x})
    (plain,) = snipjit.compile(model, int8=False).run({"x": x})
    options = ort.SessionOptions()   # unfused: onnxruntime's fused int8 products saturate on AVX2 without VNNI
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    step = float(numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "y_scale")))
    # the output is requantized (y_scale): the same levels, or a tie's neighbour
    assert np.abs(got - plain).max() <= step * 1.0001
    assert np.abs(got - expected).max() <= step * 1.0001
