"""ActivationsBeforeReshapes: an activation of a reshaped product moves before the Reshape, where the
product's epilogue takes it; Reshapes or products read elsewhere, graph outputs and other sources keep
their order, and results never change."""
import numpy as np
import pytest

from random_constants import parse_random
from snipjit.ir.graph import Graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.activations_before_reshapes import activations_before_reshapes
from snipjit.passes.mark_skipped import SKIPPED_BY_PLUGIN, mark_skipped_by_plugin

# GPT-2's MLP input projection as exported: a Gemm on the flattened rows, reshaped back, then Gelu
GPT2_MLP = """graph(x: f32[6,8]) -> [{outputs}] {{
  const w: f32[8,12] = <elided>
  const b: f32[12] = <elided>
  const back: i64[3] = [2, 3, 12]
  [h] = Gemm(x, w, b)
  [r] = Reshape({source}, back)
  [y] = Gelu(r) {{approximate="tanh"}}
  [z] = Relu(y)
}}"""


def moved(text: str) -> tuple[Graph, Graph]:
    before = parse_random(text)
    after = activations_before_reshapes(before.copy(), {})
    after.validate()
    x = [np.random.default_rng(1).standard_normal(v.shape).astype(np.float32) for v in before.inputs]
    for want, got in zip(run_graph_reference(before, x), run_graph_reference(after, x)):
        assert want.shape == got.shape
        np.testing.assert_array_equal(got, want)
    return before, after


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def test_a_gelu_of_a_reshaped_gemm_moves_before_the_reshape_into_the_epilogue():
    before, after = moved(GPT2_MLP.format(outputs="z", source="h"))
    assert ops(before) == ["Gemm", "Reshape", "Gelu", "Relu"]
    assert ops(after) == ["Gemm", "Gelu", "Reshape", "Relu"]
    gelu = after.nodes[1]
    assert gelu.outputs[0].shape == (6, 12) and after.nodes[2].outputs[0].shape == (2, 3, 12)
    marked = mark_skipped_by_plugin(after.copy(), {})
    assert [n.op for n in marked.nodes if n.meta.get(SKIPPED_BY_PLUGIN)] == ["Gelu"]


@pytest.mark.parametrize("text, why", [
    (GPT2_MLP.format(outputs="z, r", source="h"), "the Reshape's result is a graph output"),
    (GPT2_MLP.format(outputs="z, h", source="h"), "the product's result is a graph output"),
    (GPT2_MLP.format(outputs="z", source="h").replace("[z] = Relu(y)", "[z] = Add(y, r)"), "the Reshape read twice"),
    (GPT2_MLP.format(outputs="z", source="x2").replace("[h] = Gemm(x, w, b)", "[h] = Gemm(x, w, b)\n  [x2] = Relu(x)")
     .replace("[2, 3, 12]", "[2, 3, 8]"), "not a product"),
])
def test_other_orders_stay(text, why):
    before, after = moved(text)
    assert ops(after) == ops(before), why
