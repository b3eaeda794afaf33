"""Constant folding on real models: nothing that only depends on constants runs per inference."""
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

import snipjit

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
BERT = Path(__file__).parent / "data" / "tiny_bert.onnx"


def executed_ops(cm) -> set[str]:
    return {op for step in cm.plan for op in step.ops}


@pytest.mark.parametrize("name", ["resnet50", "densenet121"])
def test_zoo_models_run_no_constant_of_shape_or_batchnorm(name):
    cm = snipjit.compile(LIGHT / f"light_{name}.onnx")
    ops = executed_ops(cm)
    assert "ConstantOfShape" not in ops and "BatchNormalization" not in ops
    assert "== compile-time folding:" in cm.explain(show_passes=False)


def test_static_bert_runs_no_shape_computation():
    model = onnx.load(BERT)
    for inp in model.graph.input:
        for dim, size in zip(inp.type.tensor_type.shape.dim, (2, 16)):
            dim.Clear()
            dim.dim_value = size
    cm = snipjit.compile(model.SerializeToString())
    ops = executed_ops(cm)
    assert not ops & {"Shape", "Unsqueeze", "ConstantOfShape", "Range", "Expand", "Equal"}
    assert not any(s.node.op == "Concat" and s.node.outputs[0].type.dtype.name == "i64" for s in cm.plan)
    expected = np.load(Path(__file__).parent / "data" / "tiny_bert_expected.npz")
    feeds = {"input_ids": expected["input_ids_1"], "attention_mask": expected["attention_mask_1"]}
    np.testing.assert_allclose(cm.run(feeds)[0], expected["last_hidden_state_1"], rtol=1e-4, atol=1e-4)


WEIGHT_MODEL = """graph(x: f32[4,8], w: f32[16,8]) -> [y] {
  const s: f32[] = 0.5
  [wt] = Transpose(w) {perm=[1, 0]}
  [ws] = Mul(wt, s)
  [y] = MatMul(x, ws)
}"""


def test_runtime_constant_weight_is_prepared_once(monkeypatch):
    from snipjit.runtime.execution import runtime_constants
    calls = []
    real = runtime_constants.run_graph_reference
    monkeypatch.setattr(runtime_constants, "run_graph_reference", lambda g, i: calls.append(1) or real(g, i))
    g = snipjit.parse_graph(WEIGHT_MODEL)
    cm = snipjit.compile(g, constant_inputs=["w"])
    plain = snipjit.compile(g)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    for _ in range(3):
        x = rng.standard_normal((4, 8)).astype(np.float32)
        np.testing.assert_allclose(cm.run({"x": x, "w": w})[0], plain.run({"x": x, "w": w})[0], rtol=1e-6)
    req = cm.create_request()
    req.run({"x": x, "w": w})
    assert len(calls) == 1 and cm.runtime_constants.folds == 1
    assert not executed_ops(cm) & {"Transpose", "Mul"}
    assert "runtime folding function" in cm.explain(show_passes=False)
    with pytest.raises(snipjit.FeedError, match="changed"):
        cm.run({"x": x, "w": w + 1})
    refolding = snipjit.compile(g, constant_inputs=["w"], refold=True)
    refolding.run({"x": x, "w": w})
    np.testing.assert_allclose(refolding.run({"x": x, "w": w + 1})[0], plain.run({"x": x, "w": w + 1})[0], rtol=1e-6)


def test_constant_inputs_given_as_values_fold_at_compile_time():
    g = snipjit.parse_graph(WEIGHT_MODEL)
    w = np.ones((16, 8), np.float32)
    cm = snipjit.compile(g, constant_inputs={"w": w})
    assert cm.input_names == ["x"] and executed_ops(cm) == {"MatMul"}
    x = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(cm.run({"x": x})[0], np.full((4, 16), 4.0, np.float32))
