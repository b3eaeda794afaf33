"""SplitDimensionM: past a block's worth of scores, an attention body's query rows become [M / m, m] in every
value carrying them and the other operands gain a dim of 1 there (same results on the reference interpreter);
layouts split alike; bodies it cannot split are left alone."""
import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.snippets import brgemm_blocks
from snipjit.snippets.dataflow.convert_matmul_to_brgemm import ConvertMatMulToBrgemm
from snipjit.snippets.dataflow.fuse_transpose_brgemm import FuseTransposeBrgemm
from snipjit.snippets.dataflow.split_dimension_m import SplitDimensionM
from sample_graphs import head_split_block

MASKED = """graph(q: f32[2,3,12,8], kt: f32[2,3,8,12], v: f32[2,3,12,5], mask: f32[2,1,1,12],
                  later: bool[12,12]) -> [o] {
  const scale: f32[] = 0.5
  const low: f32[] = -10000.0
  [s] = MatMul(q, kt)
  [t] = Mul(s, scale)
  [u] = Add(t, mask)
  [w] = Where(later, low, u)
  [p] = Softmax(w) {axis = 3}
  [o] = MatMul(p, v)
}"""


@pytest.fixture
def blocks(monkeypatch):
    """Heads past 50 scores split into blocks of at most 50 scores and at least 2 rows: 12 rows of 12 keys by 4."""
    monkeypatch.setattr(brgemm_blocks, "BLOCK_ELEMENTS", 50)
    monkeypatch.setattr(brgemm_blocks, "ROW_BLOCK_ELEMENTS", 50)
    monkeypatch.setattr(brgemm_blocks, "MIN_ROWS", 2)


def split(text: str, fuse: bool = False):
    body = parse_graph(text)
    ConvertMatMulToBrgemm().run(body)
    if fuse:
        FuseTransposeBrgemm().run(body)
    changed = SplitDimensionM().run(body)
    body.validate()
    return body, changed


def test_rows_split_and_other_operands_gain_a_dim(blocks):
    original = parse_graph(MASKED)
    body, changed = split(MASKED)
    assert changed
    assert [v.type.shape for v in body.inputs] == [(2, 3, 3, 4, 8), (2, 3, 1, 8, 12), (2, 3, 1, 12, 5),
                                                   (2, 1, 1, 1, 12), (3, 4, 12)]
    assert body.outputs[0].type.shape == (2, 3, 3, 4, 5)
    assert [n.attrs["axis"] for n in body.nodes if n.op == "Softmax"] == [4]   # a positive axis moves
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal(v.type.shape).astype(np.float32) for v in original.inputs[:4]]
    feeds[3] = np.where(feeds[3] > 1, -1e9, 0).astype(np.float32)
    feeds.append(np.triu(np.ones((12, 12), bool), 1))
    want, = run_graph_reference(original, feeds)
    got, = run_graph_reference(body, [f.reshape(v.type.shape) for f, v in zip(feeds, body.inputs)])
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("text", [
    # a normalisation's operands are not axes
    """graph(q: f32[2,3,12,8], kt: f32[2,3,8,12], v: f32[2,3,12,5]) -> [o] {
  const sc: f32[12] = [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
  const bi: f32[12] = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
  [s] = MatMul(q, kt)
  [l] = LayerNormalization(s, sc, bi) {axis = -1}
  [p] = Softmax(l) {axis = -1}
  [o] = MatMul(p, v)
}""",
    # a reduction of a value of rank 1 (no dim at -2) keeps its axes
    """graph(q: f32[2,3,12,8], kt: f32[2,3,8,12], v: f32[2,3,12,5], mask: f32[12]) -> [o] {
  const ax: i64[1] = [0]
  const ninf: f32[] = -inf
  const zero: f32[] = 0.0
  [s] = MatMul(q, kt)
  [u] = Add(s, mask)
  [p] = Softmax(u) {axis = -1}
  [r] = ReduceMax(mask, ax) {keepdims = 1}
  [e] = Equal(r, ninf)
  [w] = Where(e, zero, p)
  [o] = MatMul(w, v)
}"""])
def test_operands_and_axes_of_values_without_rows_stay(blocks, text):
    original = parse_graph(text)
    body, changed = split(text)
    assert changed
    assert all(np.array_equal(a.data, b.data) for a, b in zip(original.values(), body.values())
               if a.data is not None and a.data.ndim < 2)
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal(v.type.shape).astype(np.float32) for v in original.inputs]
    want, = run_graph_reference(original, feeds)
    got, = run_graph_reference(body, [f.reshape(v.type.shape) for f, v in zip(feeds, body.inputs)])
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-6)


def test_layouts_split_with_their_dims(blocks):
    text = head_split_block(keys_in_rows=True).replace("9", "24")   # 24 rows of 24 keys: blocks of 2
    body, changed = split(text, fuse=True)
    assert changed
    q, k, v = body.inputs
    assert q.type.shape == (2, 3, 12, 2, 16) and k.type.shape == (2, 3, 1, 16, 24) and v.type.shape == (2, 3, 1, 24, 24)
    # memory: Q and the output [batch, rows / 2, 2, heads, size]; K's rows [batch, keys, heads, 1, size]
    assert body.meta["layouts"] == [(0, 2, 3, 1, 4), (0, 4, 1, 2, 3), (0, 2, 3, 1, 4)]
    assert body.meta["output_layouts"] == [(0, 2, 3, 1, 4)]


@pytest.mark.parametrize("text", [
    MASKED.replace("12", "13"),                                    # 13 rows: no block of 2 or more rows
    MASKED.replace("{axis = 3}", "{axis = -2}"),                   # a softmax over the rows
    MASKED.replace("[2,3,12,8]", "[2,3,n,8]").replace("[12,12]", "[n,12]"),   # dynamic rows
    head_split_block(keys_in_rows=True).replace("9", "24"),        # Transposes left (not fused)
])
def test_bodies_it_cannot_split_are_left_alone(blocks, text):
    before = parse_graph(text)
    body, changed = split(text)
    assert not changed and [v.type for v in body.values()] == [v.type for v in before.values()]


def test_heads_whose_scores_fit_stay_whole():
    body, changed = split(MASKED)
    assert not changed
