"""FuseGelu: the erf GELU (BERT, ViT) and the tanh GELU (GPT-2) written out in arithmetic become one Gelu
node whatever the order of the operations; near misses, and groups whose intermediate values are read
elsewhere, stay."""
import numpy as np
import pytest

import snipjit
from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.fuse_gelu import fuse_gelu

ERF = """graph(x: f32[3,40]) -> [y] {
  const r2: f32[] = 1.4142135
  const one: f32[] = 1.0
  const half: f32[] = 0.5
  [d] = Div(x, r2)
  [e] = Erf(d)
  [a] = Add(e, one)
  [m] = Mul(x, a)
  [y] = Mul(m, half)
}"""

TANH = """graph(x: f32[3,40]) -> [y] {
  const half: f32[] = 0.5
  const three: f32[] = 3.0
  const c: f32[] = 0.044715
  const k: f32[] = 0.7978846
  const one: f32[] = 1.0
  [h] = Mul(half, x)
  [p] = Pow(x, three)
  [pc] = Mul(p, c)
  [s] = Add(x, pc)
  [z] = Mul(s, k)
  [t] = Tanh(z)
  [a] = Add(one, t)
  [y] = Mul(h, a)
}"""


def fused(text: str):
    before = parse_graph(text)
    after = fuse_gelu(before.copy())
    after.validate()
    x = [np.random.default_rng(0).standard_normal(v.shape).astype(np.float32) * 3 for v in before.inputs]
    for want, got in zip(run_graph_reference(before, x), run_graph_reference(after, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return after


@pytest.mark.parametrize("text, approximate", [(ERF, "none"), (TANH, "tanh")])
def test_both_forms_become_one_node(text, approximate):
    g = fused(text)
    assert [(n.op, n.attrs) for n in g.nodes] == [("Gelu", {"approximate": approximate})]
    assert g.nodes[0].inputs[0].name == "x" and g.nodes[0].outputs[0].name == "y"


def test_another_order_of_the_same_arithmetic():
    text = ERF.replace("[m] = Mul(x, a)\n  [y] = Mul(m, half)", "[m] = Mul(half, x)\n  [y] = Mul(a, m)")
    assert [n.op for n in fused(text).nodes] == ["Gelu"]


def test_a_bias_add_before_it_stays_outside():
    text = ERF.replace("graph(x: f32[3,40])", "graph(v: f32[3,40], b: f32[40])").replace(
        "[d] = Div(x, r2)", "[x] = Add(v, b)\n  [d] = Div(x, r2)")
    assert [n.op for n in fused(text).nodes] == ["Add", "Gelu"]


def test_near_misses_and_shared_values_stay():
    assert "Gelu" not in [n.op for n in fused(ERF.replace("0.5", "0.6")).nodes]
    assert "Gelu" not in [n.op for n in fused(TANH.replace("0.044715", "0.05")).nodes]
    shared = ERF.replace("-> [y]", "-> [y, e]")
    assert "Gelu" not in [n.op for n in fused(shared).nodes]


@pytest.mark.parametrize("text", [ERF, TANH])
def test_a_product_applies_it_in_its_store(level, text):
    """MatMul + bias + GELU: one blas step at every ISA level, as exact as the unfused graph."""
    from snipjit.runtime.implementations import gemm_launch
    if not gemm_launch.available():
        pytest.skip("no LLVM JIT")
    rng = np.random.default_rng(1)
    w, bias = rng.standard_normal((24, 40), dtype=np.float32), rng.standard_normal(40, dtype=np.float32)
    head = (f"graph(i: f32[3,24]) -> [y] {{\n  const w: f32[24,40] = {w.ravel().tolist()}\n"
            f"  const b: f32[40] = {bias.tolist()}\n  [mm] = MatMul(i, w)\n  [x] = Add(mm, b)\n")
    body = text.split("{\n", 1)[1]
    model = head + body
    compiled, plain = snipjit.compile(parse_graph(model)), snipjit.compile(parse_graph(model), fuse=False)
    assert [(s.kind, s.ops) for s in compiled.plan] == [("blas", ["MatMul", "Add", "Gelu"])]
    x = {"i": rng.standard_normal((3, 24), dtype=np.float32) * 2}
    np.testing.assert_allclose(compiled.run(x)[0], plain.run(x)[0], rtol=1e-5, atol=1e-5)
