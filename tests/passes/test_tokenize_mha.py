"""TokenizeMHA: an attention block (head split, Q·Kᵀ, scale, mask, Softmax, ·V, head merge) becomes one
Subgraph of pattern "mha" holding those nodes; blocks whose values are read elsewhere, whose scale follows
the mask or whose Softmax is not over the keys keep their shape, and results never change."""
import numpy as np
import pytest

import snipjit
from snipjit import parse_graph
from snipjit.ir.text import print_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.eliminate_identities import eliminate_identities
from snipjit.passes.tokenize_mha import tokenize_mha
from sample_graphs import attention_block

# BERT's self-attention as exported: projections [2, 5, 8] split into 2 heads of 4
BERT_STYLE = attention_block("2", "5", heads=2, size=4, scale=0.5)


def feeds(graph, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs]


def tokenized(text: str, **options):
    before = parse_graph(text)
    after = tokenize_mha(before.copy(), options)
    after.validate()
    x = feeds(before)
    for want, got in zip(run_graph_reference(before, x), run_graph_reference(after, x)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return after


def test_a_bert_style_block_becomes_one_subgraph_with_its_head_transposes():
    g = tokenized(BERT_STYLE)
    assert [n.op for n in g.nodes] == ["Subgraph"]
    sub = g.nodes[0]
    assert sub.name == "mha0" and sub.attrs["pattern"] == "mha"
    assert [v.name for v in sub.inputs] == ["q", "k", "v", "mask"]
    assert [n.op for n in sub.attrs["body"].nodes] == [
        "Reshape", "Transpose", "Reshape", "Transpose", "Reshape", "Transpose",
        "MatMul", "Mul", "Add", "Softmax", "MatMul", "Transpose", "Reshape"]
    assert 'pattern="mha"' in print_graph(g)
    assert [n.op for n in parse_graph(print_graph(g)).nodes] == ["Subgraph"]   # the text form round-trips


def test_heads_given_directly_a_divided_scale_and_no_mask():
    g = tokenized("""graph(q: f32[3,7,16], k: f32[3,16,9], v: f32[3,9,8]) -> [y] {
      const d: f32[] = 4.0
      [s] = MatMul(q, k)
      [ss] = Div(s, d)
      [p] = Softmax(ss) {axis = 2}
      [y] = MatMul(p, v)
    }""")
    body = g.nodes[0].attrs["body"]
    assert [n.op for n in body.nodes] == ["MatMul", "Div", "Softmax", "MatMul"]


def test_a_mask_before_the_scale_a_softmax_over_rows_and_shared_values_stay():
    scaled_mask = """graph(q: f32[2,4,8], k: f32[2,8,4], v: f32[2,4,8], m: f32[2,4,4]) -> [y] {
      const c: f32[] = 0.5
      [s] = MatMul(q, k)
      [sm] = Add(s, m)
      [ss] = Mul(sm, c)
      [p] = Softmax(ss) {axis = -1}
      [y] = MatMul(p, v)
    }"""
    assert [n.op for n in tokenized(scaled_mask).nodes] == ["MatMul", "Add", "Mul", "Softmax", "MatMul"]
    rows = scaled_mask.replace("[sm] = Add(s, m)\n      [ss] = Mul(sm, c)", "[ss] = Mul(s, c)").replace(
        "{axis = -1}", "{axis = 1}").replace(", m: f32[2,4,4]", "")
    assert "Subgraph" not in [n.op for n in tokenized(rows).nodes]
    read_twice = scaled_mask.replace("-> [y]", "-> [y, p]").replace(
        "[sm] = Add(s, m)\n      [ss] = Mul(sm, c)", "[ss] = Mul(s, c)").replace(", m: f32[2,4,4]", "")
    assert "Subgraph" not in [n.op for n in tokenized(read_twice).nodes]   # the probabilities are an output


def test_a_transpose_read_elsewhere_stays_outside_the_block():
    text = BERT_STYLE.replace("-> [y]", "-> [y, kt]")
    g = tokenized(text)
    assert [n.op for n in g.nodes] == ["Reshape", "Transpose", "Subgraph"]
    assert [v.name for v in g.nodes[2].inputs] == ["q", "kt", "v", "mask"]


def test_the_option_turns_it_off():
    assert "Subgraph" not in [n.op for n in tokenized(BERT_STYLE, mha=False).nodes]


def test_a_float_cast_after_the_softmax_goes_first():
    text = BERT_STYLE.replace("[p] = Softmax(sm) {axis = -1}",
                              "[p0] = Softmax(sm) {axis = -1}\n  [p] = Cast(p0) {to = 1}")
    g = parse_graph(text)
    g = tokenize_mha(eliminate_identities(g))
    assert [n.op for n in g.nodes] == ["Subgraph"]


@pytest.mark.parametrize("batch", [2, 1])
def test_compiled_blocks_match_the_unfused_graph(batch):
    text = BERT_STYLE.replace("f32[2,", f"f32[{batch},")
    g = parse_graph(text)
    x = dict(zip([v.name for v in g.inputs], feeds(g, batch)))
    fused, plain = snipjit.compile(parse_graph(text)), snipjit.compile(parse_graph(text), mha=False)
    steps = [s for s in fused.plan if "Softmax" in s.ops]
    assert len(steps) == 1 and steps[0].kind == "snippet" and "MatMul" in steps[0].ops
    np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-5, atol=1e-6)


FUSED_QKV = attention_block("2", "5", heads=2, size=4, scale=0.5, fused_qkv=True)


def test_the_split_of_a_fused_projection_is_taken_in_when_only_the_block_reads_it():
    g = tokenized(FUSED_QKV)
    assert [n.op for n in g.nodes] == ["Subgraph"] and [v.name for v in g.nodes[0].inputs] == ["x", "mask"]
    assert g.nodes[0].attrs["body"].nodes[0].op == "Split"
    shared = tokenized(FUSED_QKV.replace("-> [y]", "-> [y, v]"))
    assert [n.op for n in shared.nodes] == ["Split", "Subgraph"]



SOFT_CAP = """graph(q: f32[2,4,8], k: f32[2,8,6], v: f32[2,6,8], m: f32[2,1,6]) -> [y] {
      const c: f32[] = 30.0
      const half: f32[] = 0.5
      [s] = MatMul(q, k)
      [sh] = Mul(half, s)
      [sd] = Div(sh, c)
      [st] = Tanh(sd)
      [sc] = Mul(c, st)
      [sm] = Add(sc, m)
      [p] = Softmax(sm) {axis = -1}
      [y] = MatMul(p, v)
    }"""


def described(text: str):
    from snipjit.passes.tokenize_mha import match_mha
    g = tokenized(text)
    assert [n.op for n in g.nodes] == ["Subgraph"]
    body = g.nodes[0].attrs["body"]
    return body, match_mha(next(n for n in body.nodes if n.op == "Softmax"), body.consumers(), set(body.outputs))


def test_a_soft_cap_on_the_scores_is_the_attention_kernel_s():
    """Tanh between scalings before the mask: a scale of the product before it (0.5 / 30), a cap after (30)."""
    body, found = described(SOFT_CAP)
    assert found.others == [] and found.soft_cap == 30.0 and found.scale == 0.5 / 30.0 and found.mask is body.inputs[3]
    assert [n.op for n in found.between] == ["Mul", "Div", "Tanh", "Mul", "Add"]


@pytest.mark.parametrize("changes, others", [
    ([("[sm] = Add(sc, m)", "[sm] = Erf(sc)")], ["Tanh", "Erf"]),   # another op the kernel lacks
    ([("[st] = Tanh(sd)", "[st] = Erf(sd)")], ["Erf"])])            # not a Tanh
def test_other_ops_on_the_scores_join_the_block_for_the_snippets_kernel(changes, others):
    text = SOFT_CAP
    for change in changes:
        text = text.replace(*change)
    _, found = described(text)
    assert [n.op for n in found.others] == others and found.soft_cap is None


def test_a_tanh_after_the_mask_is_no_soft_cap():
    _, found = described("""graph(q: f32[2,4,8], k: f32[2,8,6], v: f32[2,6,8], m: f32[2,1,6]) -> [y] {
      [s] = MatMul(q, k)
      [sm] = Add(s, m)
      [st] = Tanh(sm)
      [p] = Softmax(st) {axis = -1}
      [y] = MatMul(p, v)
    }""")
    assert [n.op for n in found.others] == ["Tanh"] and found.soft_cap is None and found.mask is not None
