"""The attention kernel against NumPy (float64) at every ISA level this host can execute: head counts, head
sizes 32/64/80/128 and 8/24/40/72 (half vectors on AVX-512), odd sequence lengths, strided (head-split)
operands, masks broadcast every way, causal and fully masked rows, soft caps, one key block or an online
softmax over several; and compiled attention blocks against the unfused graph, with dynamic batch and
sequence (Gemma 2 exported from transformers among them)."""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import snipjit
from snipjit import parse_graph
from snipjit.runtime.implementations import attention, gemm_launch
from sample_graphs import attention_block

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")
FLT_MIN = float(np.finfo(np.float32).min)


@pytest.fixture(params=["one key block", "blocks of 32 keys"])
def key_blocks(request, monkeypatch):
    """The whole row of scores at once, or an online softmax over blocks of 32 keys (long sequences')."""
    if request.param != "one key block":
        monkeypatch.setattr(attention, "ONE_KEY_BLOCK", 0)
        monkeypatch.setattr(attention, "KEY_BLOCK", 32)


def reference(q, kt, v, mask, scale):
    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        return np.matmul(p / p.sum(-1, keepdims=True), v.astype(np.float64))


def run(q, kt, v, masks, scale, merged=False):
    """The kernel's result; `merged`: written through the merged-heads layout [b, rows, heads, size]."""
    b, h, sq, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    store = np.full((b, sq, h, dv) if merged else (b, h, sq, dv), np.nan, np.float32)
    out = store.transpose(0, 2, 1, 3) if merged else store
    launch = attention.prepare(q, kt, v, out, scale, masks)
    assert launch is not None
    launch.run()
    return out


def check(q, kt, v, mask=None, scale=0.125, merged=False):
    got, want = run(q, kt, v, attention.ScoreMasks(mask), scale, merged), reference(q, kt, v, mask, scale)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def heads(rng, b, h, s, d):
    """[b, h, s, d] views of a projection [b, s, h·d], as the head split makes them."""
    return rng.standard_normal((b, s, h, d), dtype=np.float32).transpose(0, 2, 1, 3)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=st.integers(1, 3), h=st.integers(1, 5), sq=st.integers(1, 45), sk=st.integers(1, 70),
       d=st.sampled_from([32, 64, 80, 128]), masked=st.sampled_from(["none", "keys", "rows", "heads"]),
       seed=st.integers(0, 2**16))
def test_odd_shapes_and_masks(level, key_blocks, b, h, sq, sk, d, masked, seed):
    rng = np.random.default_rng(seed)
    q, k, v = heads(rng, b, h, sq, d), heads(rng, b, h, sk, d), heads(rng, b, h, sk, d)
    shape = {"none": None, "keys": (b, 1, 1, sk), "rows": (b, 1, sq, sk), "heads": (1, h, sq, sk)}[masked]
    mask = None if shape is None else rng.standard_normal(shape, dtype=np.float32) * 3
    check(q, k.transpose(0, 1, 3, 2), v, mask, d ** -0.5, merged=seed % 2 == 0)


@pytest.mark.parametrize("d", [32, 64, 80, 128])
def test_head_sizes_with_contiguous_heads(level, d):
    rng = np.random.default_rng(d)
    q, k, v = (rng.standard_normal((2, 3, 37, d), dtype=np.float32) for _ in range(3))
    check(q, k.transpose(0, 1, 3, 2), v, scale=1.0)
    check(q, np.ascontiguousarray(k.transpose(0, 1, 3, 2)), v, scale=0.3, merged=True)   # Kᵀ stored as such


@pytest.mark.parametrize("d", [8, 24, 40, 72])
def test_head_sizes_of_half_vectors(level, key_blocks, d):
    """Head sizes that are whole 256-bit vectors: on AVX-512, a kernel of 256-bit vectors takes them."""
    rng = np.random.default_rng(d)
    q, k, v = heads(rng, 2, 3, 37, d), heads(rng, 2, 3, 53, d), heads(rng, 2, 3, 53, d)
    mask = np.where(rng.random((2, 1, 1, 53)) < 0.2, FLT_MIN, 0).astype(np.float32)
    kt = k.transpose(0, 1, 3, 2)
    out = np.full((2, 3, 37, d), np.nan, np.float32)
    launch = attention.prepare(q, kt, v, out, d ** -0.5, attention.ScoreMasks(mask))
    assert launch is not None and launch.shape.lanes == min(level.f32_lanes, 8 if d % 16 else 16)
    check(q, kt, v, mask, d ** -0.5, merged=True)


def test_a_head_size_of_half_vectors_compiles_onto_the_kernel(level, monkeypatch):
    """Stable Diffusion's head size 40: the attention kernel at every level (on AVX-512 on 256-bit vectors)."""
    fused, plain, _ = on_the_kernel(attention_block("batch", "seq", heads=2, size=40, scale=40 ** -0.5), monkeypatch)
    rng = np.random.default_rng(12)
    for batch, seq in ((1, 9), (2, 64)):
        x = {n: rng.standard_normal((batch, seq, 80), dtype=np.float32) for n in "qkv"}
        x["mask"] = np.where(rng.random((batch, 1, 1, seq)) < 0.2, FLT_MIN, 0).astype(np.float32)
        np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)


def test_causal_and_padding_masks(level):
    rng = np.random.default_rng(5)
    b, h, s, d = 2, 4, 23, 64
    q, k, v = heads(rng, b, h, s, d), heads(rng, b, h, s, d), heads(rng, b, h, s, d)
    causal = np.triu(np.full((s, s), -np.inf, np.float32), 1)
    check(q, k.transpose(0, 1, 3, 2), v, causal)
    padding = np.zeros((b, 1, 1, s), np.float32)
    padding[1, ..., 17:] = FLT_MIN   # (HF's additive mask: the dtype's minimum)
    check(q, k.transpose(0, 1, 3, 2), v, np.where(padding < 0, FLT_MIN, np.maximum(causal, FLT_MIN)))


def test_fully_masked_rows(level, key_blocks):
    """Every key masked: a finite minimum gives uniform weights, -inf gives NaN, as the unfused graph."""
    rng = np.random.default_rng(6)
    q, k, v = heads(rng, 1, 2, 5, 32), heads(rng, 1, 2, 9, 32), heads(rng, 1, 2, 9, 32)
    mask = np.zeros((1, 1, 5, 9), np.float32)
    mask[..., 2, :] = FLT_MIN
    got = run(q, k.transpose(0, 1, 3, 2), v, attention.ScoreMasks(mask), 0.2)
    np.testing.assert_allclose(got[:, :, 2], np.broadcast_to(v.mean(2), got[:, :, 2].shape), rtol=1e-5, atol=1e-6)
    mask[..., 2, :] = -np.inf
    got = run(q, k.transpose(0, 1, 3, 2), v, attention.ScoreMasks(mask), 0.2)
    assert np.isnan(got[:, :, 2]).all() and not np.isnan(np.delete(got, 2, axis=2)).any()


def test_rows_whose_first_key_blocks_are_all_masked(level, key_blocks):
    """Left padding: a row's first keys all -inf (a whole key block of the online softmax) still counts the
    keys after them; a row masked everywhere stays NaN."""
    rng = np.random.default_rng(8)
    q, k, v = heads(rng, 2, 2, 6, 32), heads(rng, 2, 2, 90, 32), heads(rng, 2, 2, 90, 32)
    mask = np.zeros((2, 1, 6, 90), np.float32)
    mask[0, ..., :70] = -np.inf
    mask[1, :, 1:, :40] = -np.inf
    mask[1, :, 5] = -np.inf
    got = run(q, k.transpose(0, 1, 3, 2), v, attention.ScoreMasks(mask), 0.2)
    want = reference(q, k.transpose(0, 1, 3, 2), v, mask, 0.2)
    assert np.isnan(got[1, :, 5]).all() and np.isnan(want[1, :, 5]).all()
    np.testing.assert_allclose(np.delete(got, 5, axis=2), np.delete(want, 5, axis=2), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sq, sk", [(23, 23), (40, 70), (7, 45)])
def test_keys_masked_away_for_a_row_block_are_skipped(level, key_blocks, sq, sk):
    """One additive mask: keys it masks to at most -1e30 for every row of a block, in rows that keep a key
    at -1e20 or more, are skipped (results as the unfused graph's); a NaN, a row masked everywhere or a
    milder mask keeps them. Skipped keys are not read: a NaN in V there does not reach the output."""
    rng = np.random.default_rng(sq + sk)
    b, h, d = 2, 3, 32
    q, k, v = heads(rng, b, h, sq, d), heads(rng, b, h, sk, d), heads(rng, b, h, sk, d)
    kt = k.transpose(0, 1, 3, 2)
    causal = np.where(np.arange(sk) > np.arange(sq)[:, None] + sk - sq, FLT_MIN, 0).astype(np.float32)
    padded = np.zeros((b, 1, 1, sk), np.float32)
    padded[1, ..., sk * 2 // 3:] = FLT_MIN
    gpt2 = np.minimum(causal, padded)   # (a padded row keeps the keys before it)
    row_masked = gpt2.copy()
    row_masked[0, 0, sq // 2] = FLT_MIN
    with_nan = gpt2.copy()
    with_nan[1, 0, sq // 3, -1] = np.nan
    for mask in (causal, padded, gpt2, row_masked, with_nan, np.where(gpt2 < 0, -1e25, 0).astype(np.float32),
                 np.where(gpt2 < 0, -np.inf, 0).astype(np.float32)):
        launch = attention.prepare(q, kt, v, np.empty((b, h, sq, d), np.float32), 0.2, attention.ScoreMasks(mask))
        assert launch.shape.trimmed
        got, want = run(q, kt, v, attention.ScoreMasks(mask), 0.2), reference(q, kt, v, mask, 0.2)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    poisoned = v.copy()
    poisoned[1, :, -1] = np.nan   # (the last key: padded in batch entry 1)
    got = run(q, kt, poisoned, attention.ScoreMasks(padded), 0.2)
    assert not np.isnan(got[1]).any() and np.isnan(reference(q, kt, poisoned, padded, 0.2)[1]).all()


def test_layouts_the_kernel_does_not_take_are_refused():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 2, 8, 32), dtype=np.float32) for _ in range(3))
    out = np.empty((1, 2, 8, 32), np.float32)
    assert attention.prepare(q[..., ::2], k.transpose(0, 1, 3, 2)[..., ::2, :], v[..., ::2], out[..., ::2],
                             1.0) is None   # strided head size
    assert attention.prepare(q[..., :20], k.transpose(0, 1, 3, 2)[:, :, :20], v[..., :20], out[..., :20],
                             1.0) is None   # 20 is not a multiple of the vectors


BLOCK = attention_block("batch", "seq", heads=4, size=32, scale=0.17677669)


def on_the_kernel(source, monkeypatch):
    """(the model compiled, compiled without attention blocks, the block's step) for a graph's text or an
    ONNX model; the step's node-by-node run is disabled, so a fall back to it fails."""
    def build():
        return parse_graph(source) if isinstance(source, str) else source
    fused, plain = snipjit.compile(build()), snipjit.compile(build(), mha=False)
    steps = [s for s in fused.plan if "Softmax" in s.ops]
    assert len(steps) == 1 and steps[0].kind == "snippet" and isinstance(steps[0].kernel, attention.AttentionKernel)
    monkeypatch.setattr(steps[0].kernel, "fallback", None)
    return fused, plain, steps[0]


def test_compiled_blocks_run_the_kernel_for_every_batch_and_sequence(level, monkeypatch):
    fused, plain, _ = on_the_kernel(BLOCK, monkeypatch)
    rng = np.random.default_rng(8)
    for batch, seq in ((1, 7), (3, 50), (2, 128), (1, 7)):
        x = {n: rng.standard_normal((batch, seq, 128), dtype=np.float32) for n in "qkv"}
        x["mask"] = np.where(rng.random((batch, 1, 1, seq)) < 0.2, FLT_MIN, 0).astype(np.float32)
        np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)


def test_a_fused_projection_split_into_q_k_and_v_is_read_in_place(level, monkeypatch):
    text = attention_block("batch", "seq", heads=4, size=32, scale=0.17677669, fused_qkv=True)
    fused, plain, step = on_the_kernel(text, monkeypatch)
    assert step.ops[0] == "Split"
    rng = np.random.default_rng(9)
    x = {"x": rng.standard_normal((2, 33, 384), dtype=np.float32), "mask": np.zeros((2, 1, 1, 33), np.float32)}
    np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)


def masked_reference(q, kt, v, masks, scale):
    """softmax of the scores after the masks in the block's order, times v (float64)."""
    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * scale
    s = s if masks.cap is None else masks.cap * np.tanh(s)

    def keep(x):
        return np.where(masks.keep, masks.fill, x) if masks.inverted else np.where(masks.keep, x, masks.fill)

    adds = [lambda x, m=m: x + m for m in (masks.mask, masks.mask2) if m is not None]
    keeps = [keep] if masks.keep is not None else []
    for step in (keeps + adds if masks.kept_first else adds + keeps):
        s = step(s)
    if masks.causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk) <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        return np.matmul(p / p.sum(-1, keepdims=True), v.astype(np.float64))


@pytest.mark.parametrize("sq, sk", [(23, 23), (5, 40), (40, 17)])
@pytest.mark.parametrize("order", ["keep", "keep+add", "add+keep", "inverted", "causal", "causal+add"])
def test_boolean_masks_and_causal_blocks(level, key_blocks, sq, sk, order):
    rng = np.random.default_rng(sq * sk)
    q, k, v = heads(rng, 2, 3, sq, 64), heads(rng, 2, 3, sk, 64), heads(rng, 2, 3, sk, 64)
    keep = rng.random((2, 1, sq, sk)) < 0.7
    keep[..., 0] = True   # (every row keeps a key: no row of NaN)
    add = rng.standard_normal((2, 1, 1, sk), dtype=np.float32)
    masks = {"keep": attention.ScoreMasks(keep=keep, fill=-1e4),
             "keep+add": attention.ScoreMasks(add, keep, FLT_MIN, kept_first=True),
             "add+keep": attention.ScoreMasks(add, keep, float("-inf")),
             "inverted": attention.ScoreMasks(keep=~keep, fill=-30.0, inverted=True),
             "causal": attention.ScoreMasks(causal=True),
             "causal+add": attention.ScoreMasks(add, causal=True)}[order]
    got, want = run(q, k.transpose(0, 1, 3, 2), v, masks, 0.125), masked_reference(q, k.transpose(0, 1, 3, 2), v,
                                                                                   masks, 0.125)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)   # (rows that see no key: NaN in both)


@pytest.mark.parametrize("sq, sk", [(23, 23), (1, 40), (40, 17)])
@pytest.mark.parametrize("order", ["cap", "cap+add", "cap+keep", "cap+causal", "cap+causal mask"])
def test_soft_capped_scores(level, key_blocks, sq, sk, order):
    """s = cap · tanh(s · scale) before the masks (Gemma 2): alone, with each kind of mask, and with an additive
    causal mask (GPT-2's, whose keys the kernel skips past each row block's last)."""
    rng = np.random.default_rng(sq + sk)
    q, k, v = heads(rng, 2, 4, sq, 32), heads(rng, 2, 2, sk, 32), heads(rng, 2, 2, sk, 32)
    q *= 6   # (scores past the cap: tanh saturates)
    keep = rng.random((2, 1, sq, sk)) < 0.7
    keep[..., 0] = True
    causal = np.where(np.arange(sk) <= np.arange(sq)[:, None] + sk - sq, 0, FLT_MIN).astype(np.float32)
    masks = {"cap": attention.ScoreMasks(cap=5.0),
             "cap+add": attention.ScoreMasks(rng.standard_normal((2, 1, 1, sk), dtype=np.float32), cap=30.0),
             "cap+keep": attention.ScoreMasks(keep=keep, fill=-1e4, cap=2.5),
             "cap+causal": attention.ScoreMasks(causal=True, cap=50.0),
             "cap+causal mask": attention.ScoreMasks(causal[None, None], cap=50.0)}[order]
    kt = k.transpose(0, 1, 3, 2)
    store = np.full((2, 4, sq, 32), np.nan, np.float32)
    launch = attention.prepare(q, kt, v, store, 0.125, masks, group=2)
    assert launch is not None and launch.shape.capped
    assert launch.shape.trimmed == (order == "cap+causal mask" or order == "cap+add")
    launch.run()
    want = masked_reference(q, np.repeat(kt, 2, axis=1), np.repeat(v, 2, axis=1), masks, 0.125)
    np.testing.assert_allclose(store, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_soft_capped_blocks_compile_onto_the_kernel(level, monkeypatch, causal):
    """A soft cap, Tanh(S / c) · c after the scale, is the kernel's (the scale carries 1 / c): every batch and
    sequence on it."""
    text = attention_block("batch", "seq", heads=3, size=32, scale=32 ** -0.5, soft_cap=30.0, causal=causal)
    fused, plain, step = on_the_kernel(text, monkeypatch)
    assert step.kernel.block.soft_cap == 30.0 and step.kernel.block.others == []
    rng = np.random.default_rng(11)
    for batch, seq in ((1, 7), (2, 50), (1, 129), (3, 1)):
        x = {n: rng.standard_normal((batch, seq, 96), dtype=np.float32) for n in "qkv"}
        x["mask"] = np.where(rng.random((batch, 1, 1, seq)) < 0.2, FLT_MIN, 0).astype(np.float32)
        if causal:
            x["rows"], x["cols"] = np.arange(seq, dtype=np.float32)[:, None], np.arange(seq, dtype=np.float32)
        np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)


CAUSAL = """graph(q: f32[1,2,9,32], k: f32[1,2,32,9], v: f32[1,2,9,32], keep: bool[1,1,9,9]) -> [y] {
  const fill: f32[] = -3.4028235e+38
  const scale: f32[] = 8.0
  [s] = MatMul(q, k)
  [ss] = Div(s, scale)
  [w] = Where(keep, ss, fill)
  [p] = Softmax(w) {axis = -1}
  [y] = MatMul(p, v)
}"""


def test_a_where_mask_in_a_compiled_block(level, monkeypatch):
    fused, plain, step = on_the_kernel(CAUSAL, monkeypatch)
    assert step.ops == ["MatMul", "Div", "Where", "Softmax", "MatMul"]
    rng = np.random.default_rng(10)
    x = {n: rng.standard_normal(shape, dtype=np.float32) for n, shape in
         (("q", (1, 2, 9, 32)), ("k", (1, 2, 32, 9)), ("v", (1, 2, 9, 32)))}
    x["keep"] = np.tril(np.ones((9, 9), bool))[None, None]
    np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)


def onnx_attention(q_heads, kv_heads, s, d, causal, mask_dtype):
    from onnx import TensorProto, helper
    shapes = {"Q": [2, q_heads, s, d], "K": [2, kv_heads, s, d], "V": [2, kv_heads, s, d], "M": [2, 1, s, s]}
    types = {"M": TensorProto.BOOL if mask_dtype == "bool" else TensorProto.FLOAT}
    inputs = [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), shp) for n, shp in shapes.items()]
    node = helper.make_node("Attention", list(shapes), ["Y"], is_causal=int(causal))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]), shapes


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask_dtype", ["float", "bool"])
def test_the_onnx_attention_op_runs_as_one_block(level, key_blocks, monkeypatch, causal, mask_dtype):
    """ONNX Attention (opset 23), expanded into its function body by the frontend, is one attention step; a
    row whose mask hides every key gives zeros, as the op defines (not NaN)."""
    model, shapes = onnx_attention(4, 4, 21, 64, causal, mask_dtype)
    fused, plain, _ = on_the_kernel(model, monkeypatch)
    rng = np.random.default_rng(11)
    x = {n: rng.standard_normal(shp, dtype=np.float32) for n, shp in shapes.items()}
    if mask_dtype == "bool":
        x["M"] = rng.random(shapes["M"]) < 0.8
        x["M"][:, :, 3] = False
    else:
        x["M"][:, :, 3] = -np.inf
    got, want = fused.run(x)[0], plain.run(x)[0]
    assert (got[:, :, 3] == 0).all() and not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_attention_reads_each_key_and_value_head_once(level, monkeypatch, kv_heads):
    """Fewer key/value heads than query heads (the body repeats them with Unsqueeze, Expand, Reshape): the
    kernel reads a shared head for each group of query heads instead."""
    model, shapes = onnx_attention(4, kv_heads, 19, 32, True, "float")
    fused, plain, _ = on_the_kernel(model, monkeypatch)
    rng = np.random.default_rng(12)
    x = {n: rng.standard_normal(shp, dtype=np.float32) for n, shp in shapes.items()}
    np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)


T5_STYLE = """graph(q: f32[2,3,11,32], k: f32[2,3,32,11], v: f32[2,3,11,32], bias: f32[1,3,11,11],
                   pad: f32[2,1,1,11]) -> [y] {
  [s] = MatMul(q, k)
  [sb] = Add(s, bias)
  [sm] = Add(sb, pad)
  [p] = Softmax(sm) {axis = -1}
  [y] = MatMul(p, v)
}"""


def test_t5_blocks_add_a_position_bias_and_a_padding_mask(level, monkeypatch):
    fused, plain, step = on_the_kernel(T5_STYLE, monkeypatch)
    assert step.ops == ["MatMul", "Add", "Add", "Softmax", "MatMul"]
    rng = np.random.default_rng(13)
    x = {v.name: rng.standard_normal(v.shape, dtype=np.float32) for v in parse_graph(T5_STYLE).inputs}
    x["pad"] = np.where(np.arange(11) < 8, 0, FLT_MIN).astype(np.float32)[None, None, None].repeat(2, 0)
    np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)
    two_adds_and_a_where = attention.ScoreMasks(x["bias"], x["pad"] > 0, -1e9, mask2=x["pad"])
    q, kt, v = x["q"], x["k"], x["v"]
    np.testing.assert_allclose(run(q, kt, v, two_adds_and_a_where, 0.5),
                               masked_reference(q, kt, v, two_adds_and_a_where, 0.5), rtol=1e-4, atol=1e-5)


SAFE_WITH_KEEP = """graph(q: f32[1,2,4,32], k: f32[1,2,32,6], v: f32[1,2,6,32], keep: bool[1,1,4,6],
                          m: f32[1,1,4,6]) -> [y] {
  const fill: f32[] = -inf
  const zero: f32[] = 0.0
  const axes: i64[1] = [-1]
  [s] = MatMul(q, k)
  [w] = Where(keep, s, fill)
  [sm] = Add(w, m)
  [p] = Softmax(sm) {axis = -1}
  [rm] = ReduceMax(m, axes) {keepdims = 1}
  [eq] = Equal(rm, fill)
  [ps] = Where(eq, zero, p)
  [y] = MatMul(ps, v)
}"""


def test_zero_rows_only_where_the_additive_mask_makes_them():
    """ONNX Attention's zero rows come from its additive mask alone: a row the boolean mask empties stays NaN."""
    rng = np.random.default_rng(14)
    x = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in parse_graph(SAFE_WITH_KEEP).inputs}
    x["keep"] = np.ones((1, 1, 4, 6), bool)
    x["keep"][..., 1, :] = False
    x["m"] = np.zeros((1, 1, 4, 6), np.float32)
    x["m"][..., 2, :] = -np.inf
    got = snipjit.compile(parse_graph(SAFE_WITH_KEEP)).run(x)[0]
    want = snipjit.compile(parse_graph(SAFE_WITH_KEEP), mha=False).run(x)[0]
    assert np.isnan(got[:, :, 1]).all() and (got[:, :, 2] == 0).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_mask_wider_than_the_operands_when_called_directly():
    """A step called without a planned output: a mask that widens the batch gives the body's wider result."""
    text = """graph(q: f32[2,5,32], k: f32[2,32,7], v: f32[2,7,32], m: f32[3,1,5,7]) -> [y] {
      [s] = MatMul(q, k)
      [sm] = Add(s, m)
      [p] = Softmax(sm) {axis = -1}
      [y] = MatMul(p, v)
    }"""
    rng = np.random.default_rng(15)
    x = [rng.standard_normal(shape, dtype=np.float32) for shape in ((2, 5, 32), (2, 32, 7), (2, 7, 32), (3, 1, 5, 7))]
    step = next(s for s in snipjit.compile(parse_graph(text)).plan if "Softmax" in s.ops)
    np.testing.assert_allclose(step.kernel(x)[0], step.kernel.fallback(x)[0], rtol=1e-5, atol=1e-6)


def test_more_query_rows_than_a_chunk_holds(level, key_blocks):
    """Over 256 query rows against blocks of keys: several chunks of rows per head, each its own state."""
    rng = np.random.default_rng(16)
    q, k, v = heads(rng, 1, 2, 300, 64), heads(rng, 1, 2, 290, 64), heads(rng, 1, 2, 290, 64)
    check(q, k.transpose(0, 1, 3, 2), v, rng.standard_normal((1, 1, 300, 290), dtype=np.float32), merged=True)
    causal = attention.ScoreMasks(causal=True)
    got = run(q, k.transpose(0, 1, 3, 2), v, causal, 0.125)
    np.testing.assert_allclose(got, masked_reference(q, k.transpose(0, 1, 3, 2), v, causal, 0.125),
                               rtol=1e-4, atol=1e-5)


def test_an_exported_gemma2_runs_each_block_as_one_step(tmp_path, monkeypatch):
    """transformers' Gemma 2 (soft-capped scores, 4 query heads sharing 2 key/value heads, a sliding window),
    exported by torch.onnx.export with random weights: each layer's block one step on the attention kernel,
    matching torch at two sequence lengths."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.Gemma2Config(
        vocab_size=500, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, attn_logit_softcapping=50.0,
        final_logit_softcapping=None, sliding_window=64, attn_implementation="eager")
    torch.manual_seed(0)
    gemma = transformers.Gemma2Model(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gemma = gemma

        def forward(self, ids, mask):
            return self.gemma(input_ids=ids, attention_mask=mask).last_hidden_state

    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(0, 500, (1, 40)))
    path = tmp_path / "gemma2.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (the TorchScript exporter's deprecation and tracer warnings)
        torch.onnx.export(Hidden().eval(), (ids, torch.ones_like(ids)), str(path), input_names=["ids", "mask"],
                          output_names=["y"], dynamic_axes={"ids": {1: "seq"}, "mask": {1: "seq"}, "y": {1: "seq"}},
                          opset_version=17, dynamo=False)
    model = snipjit.compile(str(path))
    blocks = [s for s in model.plan if "Softmax" in s.ops]
    assert len(blocks) == 2 and all(isinstance(s.kernel, attention.AttentionKernel) for s in blocks)
    for s in blocks:
        assert s.kernel.block.soft_cap == 50.0
        monkeypatch.setattr(s.kernel, "fallback", None)   # (the results below are the kernel's)
    for seq in (80, 23):   # (80: past the sliding window)
        ids = rng.integers(0, 500, (1, seq))
        with torch.no_grad():
            want = gemma(input_ids=torch.from_numpy(ids), attention_mask=torch.ones(1, seq, dtype=torch.int64))
        got = model.run({"ids": ids, "mask": np.ones((1, seq), np.int64)})[0]
        np.testing.assert_allclose(got, want.last_hidden_state.numpy(), rtol=1e-4, atol=1e-4)
