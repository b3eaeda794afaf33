"""FuseAttentionProjections: an attention block's Q, K and V projections of one input by constant weights
become one product (and one bias Add) and a Split, which TokenizeMHA then absorbs into the block; blocks
whose projections differ in kind, whose weights or projections are read elsewhere, or that TokenizeMHA
would not take keep their three products, and results never change."""
import numpy as np
import pytest

from random_constants import parse_random
from snipjit.ir.graph import Graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.fuse_attention_projections import fuse_attention_projections
from snipjit.passes.tokenize_mha import tokenize_mha
from sample_graphs import attention_block

BIASED = "\n".join(f"  [{n}m] = MatMul(x, w{n})\n  [{n}] = Add(b{n}, {n}m)" for n in "qkv")
UNBIASED = "\n".join(f"  [{n}] = MatMul(x, w{n})" for n in "qkv")
CONSTANTS = "\n".join(f"  const w{n}: f32[6,8] = <elided>\n  const b{n}: f32[8] = <elided>" for n in "qkv")


def block(projections: str = BIASED, outputs: str = "y") -> str:
    """BERT's self-attention (2 heads of 4) with its projections of x [2, 5, 6]."""
    text = attention_block("2", "5", heads=2, size=4, scale=0.5)
    head, rest = text.split("{\n", 1)
    head = head.replace("q: f32[2,5,8], k: f32[2,5,8], v: f32[2,5,8]", "x: f32[2,5,6]").replace("[y]", f"[{outputs}]")
    return f"{head}{{\n{CONSTANTS}\n{projections}\n{rest}"


def fused(text: str, **options) -> tuple[Graph, Graph]:
    """(before, after the pass), checked to compute the same."""
    before = parse_random(text)
    after = fuse_attention_projections(before.copy(), options)
    after.validate()
    x = [np.random.default_rng(1).standard_normal(v.shape).astype(np.float32) for v in before.inputs]
    for want, got in zip(run_graph_reference(before, x), run_graph_reference(after, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return before, after


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


@pytest.mark.parametrize("projections, head", [(BIASED, ["MatMul", "Add", "Split"]), (UNBIASED, ["MatMul", "Split"])])
def test_the_three_projections_become_one_product_and_a_split_the_block_absorbs(projections, head):
    before, after = fused(block(projections))
    assert ops(before).count("MatMul") == 5
    assert ops(after)[:len(head)] == head and ops(after).count("MatMul") == 3
    product = after.nodes[0]
    assert product.inputs[1].data.shape == (6, 24)
    split = next(n for n in after.nodes if n.op == "Split")
    assert [o.name for o in split.outputs] == ["q", "k", "v"] and split.inputs[1].data.tolist() == [8, 8, 8]
    weights = {v.name: v.data for v in before.constants}
    np.testing.assert_array_equal(product.inputs[1].data, np.concatenate([weights[f"w{n}"] for n in "qkv"], 1))
    if projections is BIASED:
        np.testing.assert_array_equal(after.nodes[1].inputs[1].data, np.concatenate([weights[f"b{n}"] for n in "qkv"]))
    tokenized = tokenize_mha(after.copy(), {})
    assert ops(tokenized)[-1] == "Subgraph" and tokenized.nodes[-1].attrs["body"].nodes[0].op == "Split"


@pytest.mark.parametrize("change, why", [
    (lambda t: t.replace("[v] = Add(bv, vm)", "[v] = Relu(vm)"), "V is not a projection"),
    (lambda t: t.replace("[vm] = MatMul(x, wv)\n  [v] = Add(bv, vm)", "[v] = MatMul(x, wv)"), "V has no bias"),
    (lambda t: t.replace("[vm] = MatMul(x, wv)", "[vm] = MatMul(x, wk)"), "a weight read twice"),
    (lambda t: t.replace("-> [y]", "-> [y, k]"), "K read outside the block"),
    (lambda t: t.replace("[sm] = Add(ss, mask)\n  [p] = Softmax(sm) {axis = -1}",
                         "[p] = Softmax(ss) {axis = -1}\n  [pm] = Add(p, mask)").replace("MatMul(p, vh)",
                                                                                         "MatMul(pm, vh)"),
     "no attention block"),
])
def test_blocks_it_cannot_fuse_keep_three_products(change, why):
    assert change(block()) != block()
    _, after = fused(change(block()))
    assert "Split" not in ops(after), why


def test_nothing_changes_without_the_attention_tokenizer():
    for options in ({"mha": False}, {"fuse_projections": False}):
        _, after = fused(block(), **options)
        assert "Split" not in ops(after)
