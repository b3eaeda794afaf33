"""FoldBatchNorm: BatchNormalization and per-channel Mul/Add by constants fold into the weights of the
Conv/Gemm/MatMul before them; a BatchNormalization that cannot becomes Mul + Add. Results agree with the
original graph up to float rounding."""
import os

import numpy as np
import onnx
import pytest

from snipjit.frontend.onnx import load
from snipjit import parse_graph
from snipjit.ir.graph import Graph
from snipjit.passes.fold_batchnorm import fold_batchnorm
from snipjit.passes.fold_constants import fold_constants
from snipjit.passes.split_runtime_constants import split_runtime_constants
from snipjit.ops.interpreter import run_graph_reference


def parse_random(text: str) -> Graph:
    """Elided float constants get random values; BatchNormalization variances (named var*) positive."""
    g = parse_graph(text, elided="zeros")
    rng = np.random.default_rng(0)
    for v in g.constants:
        if v.dtype.is_float and not v.data.any():
            data = rng.standard_normal(v.data.shape)
            v.data = (np.abs(data) + 0.1 if v.name.startswith("var") else data).astype(v.data.dtype)
    return g


def random_inputs(g: Graph, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(v.dtype.np) for v in g.inputs]


def folded(text: str, **options) -> tuple[Graph, Graph]:
    """(before, after fold_batchnorm + fold_constants), checked to agree on random inputs."""
    before = parse_random(text)
    after = fold_constants(fold_batchnorm(before.copy(), options), options)
    after.validate()
    inputs = random_inputs(before)
    for want, got in zip(run_graph_reference(before, inputs), run_graph_reference(after, inputs)):
        assert want.dtype == got.dtype and want.shape == got.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return before, after


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


BN_PARAMS = """
  const scale: f32[{c}] = <elided>
  const shift: f32[{c}] = <elided>
  const mean: f32[{c}] = <elided>
  const var: f32[{c}] = <elided>"""


def test_conv_batchnorm_becomes_one_conv_with_a_bias():
    before, after = folded("""graph(x: f32[2,3,6,6]) -> [y: f32[2,4,6,6]] {""" + BN_PARAMS.format(c=4) + """
      const w: f32[4,3,3,3] = <elided>
      [c] = Conv(x, w) {pads=[1, 1, 1, 1]}
      [b] = BatchNormalization(c, scale, shift, mean, var) {epsilon=0.001}
      [y] = Relu(b)
    }""")
    assert ops(after) == ["Conv", "Relu"]
    conv = after.nodes[0]
    assert [v.shape for v in conv.inputs] == [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]
    assert all(v.is_constant for v in conv.inputs[1:])
    p = {v.name: v.data for v in before.constants}
    s = p["scale"] / np.sqrt(p["var"] + np.float32(0.001))
    np.testing.assert_allclose(conv.inputs[1].data, p["w"] * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(conv.inputs[2].data, p["shift"] - p["mean"] * s, rtol=1e-5, atol=1e-6)


def test_a_chain_of_per_channel_ops_folds_one_after_the_other():
    # DenseNet's layers: Conv (with a bias) -> BatchNormalization -> Mul -> Add -> Relu
    _, after = folded("""graph(x: f32[1,3,5,5]) -> [y: f32[1,4,5,5]] {""" + BN_PARAMS.format(c=4) + """
      const w: f32[4,3,1,1] = <elided>
      const bias: f32[4] = <elided>
      const gamma: f32[4,1,1] = <elided>
      const beta: f32[1,4,1,1] = <elided>
      const half: f32[] = 0.5
      [c] = Conv(x, w, bias)
      [b] = BatchNormalization(c, scale, shift, mean, var)
      [m] = Mul(gamma, b)
      [a] = Add(m, beta)
      [h] = Mul(a, half)
      [y] = Relu(h)
    }""")
    assert ops(after) == ["Conv", "Relu"]


def test_one_value_for_all_channels_gives_a_bias_per_channel():
    _, after = folded("""graph(x: f32[1,3,5,5]) -> [y: f32[1,4,5,5]] {
      const w: f32[4,3,1,1] = <elided>
      const b: f32[1] = <elided>
      [c] = Conv(x, w)
      [y] = Add(c, b)
    }""", max_folded_broadcast_bytes=0)
    assert ops(after) == ["Conv"] and after.nodes[0].inputs[2].shape == (4,)


def test_gemm_batchnorm_folds_into_the_columns_and_c():
    _, after = folded("""graph(x: f32[3,5]) -> [y: f32[3,4]] {""" + BN_PARAMS.format(c=4) + """
      const w: f32[4,5] = <elided>
      const c: f32[4] = <elided>
      [g] = Gemm(x, w, c) {transB=1, alpha=0.5, beta=2.0}
      [y] = BatchNormalization(g, scale, shift, mean, var)
    }""")
    assert ops(after) == ["Gemm"] and after.nodes[0].attrs["beta"] == 1.0


def test_gemm_without_c_gets_one():
    _, after = folded("""graph(x: f32[3,5]) -> [y: f32[3,4]] {
      const w: f32[5,4] = <elided>
      const c: f32[4] = <elided>
      [g] = Gemm(x, w)
      [y] = Add(c, g)
    }""")
    assert ops(after) == ["Gemm"] and after.nodes[0].inputs[2].shape == (4,)


def test_matmul_takes_the_scale_and_keeps_the_shift_as_an_add():
    _, after = folded("""graph(x: f32[3,5]) -> [y: f32[3,4]] {""" + BN_PARAMS.format(c=4) + """
      const w: f32[5,4] = <elided>
      [m] = MatMul(x, w)
      [y] = BatchNormalization(m, scale, shift, mean, var)
    }""")
    assert ops(after) == ["MatMul", "Add"]


def test_standalone_batchnorm_becomes_mul_and_add():
    _, after = folded("""graph(x: f32[2,4,3,3]) -> [y: f32[2,4,3,3]] {""" + BN_PARAMS.format(c=4) + """
      [r] = Relu(x)
      [y] = BatchNormalization(r, scale, shift, mean, var)
    }""")
    assert ops(after) == ["Relu", "Mul", "Add"]
    assert [n.inputs[1].shape for n in after.nodes[1:]] == [(4, 1, 1), (4, 1, 1)]


NOT_FOLDED = {
    "the conv output has another reader": ("""graph(x: f32[1,3,4,4]) -> [y: f32[1,4,4,4], z: f32[1,4,4,4]] {
      const w: f32[4,3,1,1] = <elided>
      const g: f32[4,1,1] = <elided>
      [y] = Conv(x, w)
      [z] = Mul(y, g)
    }""", ["Conv", "Mul"]),
    "the weights are not constant": ("""graph(x: f32[1,3,4,4], w: f32[4,3,1,1]) -> [z: f32[1,4,4,4]] {
      const g: f32[4,1,1] = <elided>
      [y] = Conv(x, w)
      [z] = Mul(y, g)
    }""", ["Conv", "Mul"]),
    "the constant varies along a spatial axis": ("""graph(x: f32[1,3,4,4]) -> [z: f32[1,4,4,4]] {
      const w: f32[4,3,1,1] = <elided>
      const g: f32[4,1,4] = <elided>
      [y] = Conv(x, w)
      [z] = Mul(y, g)
    }""", ["Conv", "Mul"]),
    "the BN channel axis is not the matmul's columns": ("""graph(x: f32[2,3,5]) -> [z: f32[2,3,4]] {
      const w: f32[5,4] = <elided>
      const scale: f32[3] = <elided>
      const shift: f32[3] = <elided>
      const mean: f32[3] = <elided>
      const var: f32[3] = <elided>
      [y] = MatMul(x, w)
      [z] = BatchNormalization(y, scale, shift, mean, var)
    }""", ["MatMul", "Mul", "Add"]),
    "a shift alone cannot go into a matmul": ("""graph(x: f32[3,5]) -> [z: f32[3,4]] {
      const w: f32[5,4] = <elided>
      const b: f32[4] = <elided>
      [y] = MatMul(x, w)
      [z] = Add(y, b)
    }""", ["MatMul", "Add"]),
    "the BN statistics are not constant": ("""graph(x: f32[1,4,2,2], mean: f32[4]) -> [z: f32[1,4,2,2]] {
      const scale: f32[4] = <elided>
      const shift: f32[4] = <elided>
      const var: f32[4] = <elided>
      const w: f32[4,4,1,1] = <elided>
      [y] = Conv(x, w)
      [z] = BatchNormalization(y, scale, shift, mean, var)
    }""", ["Conv", "BatchNormalization"]),
}


@pytest.mark.parametrize("case", NOT_FOLDED)
def test_not_folded_when(case):
    text, remaining = NOT_FOLDED[case]
    _, after = folded(text)
    assert ops(after) == remaining


def test_training_mode_batchnorm_is_left_alone():
    g = parse_random("""graph(x: f32[2,4,3,3]) -> [y: f32[2,4,3,3]] {""" + BN_PARAMS.format(c=4) + """
      [y] = BatchNormalization(x, scale, shift, mean, var) {training_mode=1}
    }""")
    assert ops(fold_batchnorm(g, {})) == ["BatchNormalization"]


def test_runtime_constant_weights_fold_in_the_folding_function():
    text = """graph(x: f32[1,3,4,4], w: f32[4,3,1,1]) -> [y: f32[1,4,4,4]] {""" + BN_PARAMS.format(c=4) + """
      [c] = Conv(x, w)
      [y] = BatchNormalization(c, scale, shift, mean, var)
    }"""
    before = parse_random(text)
    options = {"constant_inputs": {"w"}}
    g = fold_constants(fold_batchnorm(before.copy(), options), options)
    fold, entry = split_runtime_constants(g, {"w"})
    assert ops(entry) == ["Conv"] and ops(fold) == ["Mul"]  # W * s; the bias (shift) folded at compile time
    x, w = random_inputs(before)
    folded_w = run_graph_reference(fold, [w])
    env = {"x": x} | dict(zip((v.name for v in fold.outputs), folded_w))
    got = run_graph_reference(entry, [env[v.name] for v in entry.inputs])
    np.testing.assert_allclose(got[0], run_graph_reference(before, [x, w])[0], rtol=1e-5, atol=1e-5)


LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


@pytest.mark.parametrize("model", ["light_resnet50", "light_densenet121"])
def test_light_models_lose_every_batchnorm_and_constant_of_shape(model):
    g = fold_constants(fold_batchnorm(load(os.path.join(LIGHT, model + ".onnx")), {}), {})
    assert not {"BatchNormalization", "ConstantOfShape"} & set(ops(g))
