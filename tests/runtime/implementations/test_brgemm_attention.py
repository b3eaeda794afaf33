"""Attention blocks on the Snippets kernel with Brgemms, through the public API at every ISA level: blocks
with ops the attention kernel lacks (Erf where a soft cap has Tanh, causal or not) and blocks whose head size
the attention kernel refuses, against the unfused graph, for several batch and sequence sizes, with a
head's rows per iteration, blocks of rows and one row; and key/value heads shared by groups of query
heads."""

import numpy as np
import pytest

import snipjit
from snipjit import parse_graph
from snipjit.runtime.implementations import gemm_launch
from snipjit.runtime.caches import kernel_cache
from snipjit.snippets import brgemm_blocks
from snipjit.runtime.implementations.brgemm_attention import BrgemmAttention
from sample_graphs import attention_block

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")
FLT_MIN = float(np.finfo(np.float32).min)


def block_step(model):
    steps = [s for s in model.plan if "Softmax" in s.ops]
    assert len(steps) == 1 and steps[0].kind == "snippet"
    return steps[0]


def feeds(rng, batch: int, seq: int, width: int, causal: bool = False) -> dict:
    x = {n: rng.standard_normal((batch, seq, width), dtype=np.float32) for n in "qkv"}
    x["mask"] = np.where(rng.random((batch, 1, 1, seq)) < 0.2, FLT_MIN, 0).astype(np.float32)
    if causal:
        x["rows"] = np.arange(seq, dtype=np.float32)[:, None]
        x["cols"] = np.arange(seq, dtype=np.float32)
    return x


def on_the_brgemm_kernel(step, monkeypatch):
    """Make a fall back to the node-by-node run fail, so the results below are the kernel's."""
    kernel = step.kernel if isinstance(step.kernel, BrgemmAttention) else step.kernel.fallback
    assert isinstance(kernel, BrgemmAttention)
    monkeypatch.setattr(kernel, "reference", None)
    return kernel


@pytest.fixture(params=["a head's rows", "blocks of rows", "one row"])
def rows_per_iteration(request, monkeypatch):
    """A head's rows per iteration of the kernel (its scores in the scratchpad); blocks of them (SplitDimensionM,
    longer heads: here past 600 scores, into blocks of at least 2 rows); or one row (no block divides them).
    The kernels compiled under other limits are not in the kernel cache."""
    monkeypatch.setattr(kernel_cache, "_cache", kernel_cache.KernelCache(None))
    if request.param == "blocks of rows":
        monkeypatch.setattr(brgemm_blocks, "BLOCK_ELEMENTS", 600)
        monkeypatch.setattr(brgemm_blocks, "ROW_BLOCK_ELEMENTS", 600)
        monkeypatch.setattr(brgemm_blocks, "MIN_ROWS", 2)
    if request.param == "one row":
        monkeypatch.setattr(brgemm_blocks, "BLOCK_ELEMENTS", 0)
        monkeypatch.setattr(brgemm_blocks, "ROW_BLOCK_ELEMENTS", 0)
    return request.param


@pytest.mark.parametrize("causal", [False, True])
def test_blocks_with_ops_the_attention_kernel_lacks_run_on_brgemms(level, monkeypatch, rows_per_iteration, causal):
    text = attention_block("batch", "seq", heads=3, size=32, scale=32 ** -0.5, soft_cap=30.0, causal=causal,
                           cap_op="Erf")
    fused, plain = snipjit.compile(parse_graph(text)), snipjit.compile(parse_graph(text), mha=False)
    step = block_step(fused)
    assert isinstance(step.kernel, BrgemmAttention) and [n.op for n in step.kernel.block.others] == ["Erf"]
    kernel = on_the_brgemm_kernel(step, monkeypatch)
    rng = np.random.default_rng(3)
    for batch, seq in ((1, 7), (2, 50), (1, 129)):
        x = feeds(rng, batch, seq, 96, causal)
        np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)
    assert len(kernel.launches) == 3 and all(launch is not None for launch in kernel.launches.values())
    masters = [launch.compiled.master_shape for launch in kernel.launches.values()]   # (for any batch)
    expected = {"a head's rows": [(2, 3, 7, 7), (2, 3, 50, 50), (2, 3, 129, 129)],
                "blocks of rows": [(2, 3, 7, 7), (2, 3, 5, 10, 50), (2, 3, 43, 3, 129)],   # 50 = 5·10, 129 = 43·3
                "one row": [(2, 3, 7, 7), (2, 3, 50, 50), (2, 3, 129, 129)]}
    assert masters == expected[rows_per_iteration]


@pytest.mark.parametrize("shared_mask", [False, True])
def test_one_kernel_serves_every_batch(level, monkeypatch, rows_per_iteration, shared_mask):
    """A kernel is compiled for a sequence length, not for a batch: batches 1, 3 and 2 run on one. A mask
    shared by the batch (axis 0 of 1) is the batch's at batch 1 and a broadcast past it: a kernel each."""
    text = attention_block("batch", "seq", heads=3, size=32, scale=32 ** -0.5, soft_cap=30.0, causal=True,
                           cap_op="Erf")
    if shared_mask:
        text = text.replace("mask: f32[batch,1,1,seq]", "mask: f32[1,1,1,seq]")
    fused, plain = snipjit.compile(parse_graph(text)), snipjit.compile(parse_graph(text), mha=False)
    kernel = on_the_brgemm_kernel(block_step(fused), monkeypatch)
    rng = np.random.default_rng(7)
    for batch in (1, 3, 2):
        x = feeds(rng, batch, 50, 96, causal=True)
        x["mask"] = x["mask"][:1] if shared_mask else x["mask"]
        np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)
    assert len(kernel.launches) == (2 if shared_mask else 1)


@pytest.mark.parametrize("size, cap", [(18, None), (30, None), (30, 20.0)])   # not whole vectors at any level
def test_head_sizes_the_attention_kernel_refuses_fall_back_to_brgemms(level, monkeypatch, rows_per_iteration, size,
                                                                      cap):
    """(With a soft cap too: the attention kernel's, but not at these sizes.)"""
    text = attention_block("batch", "seq", heads=2, size=size, scale=size ** -0.5, soft_cap=cap)
    fused, plain = snipjit.compile(parse_graph(text)), snipjit.compile(parse_graph(text), mha=False)
    kernel = on_the_brgemm_kernel(block_step(fused), monkeypatch)
    rng = np.random.default_rng(size)
    for batch, seq in ((2, 33), (1, 1), (3, 70)):
        x = feeds(rng, batch, seq, 2 * size)
        np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)
    assert [launch is not None for launch in kernel.launches.values()] == [True, True, True]


@pytest.mark.parametrize("capped", [True, False])
def test_self_attention_on_its_input_itself(level, monkeypatch, rows_per_iteration, capped):
    """Q = K = V = x (no projections): one source read as three operands, a row of it per iteration as Q
    and all its rows as V."""
    cap = "[sd] = Div(s, cap)\n  [st] = Erf(sd)\n  [p] = Softmax(st) {axis = -1}" if capped else \
        "[p] = Softmax(s) {axis = -1}"
    text = f"""graph(x: f32[1,2,n,32]) -> [y] {{
  const cap: f32[] = 5.0
  [kt] = Transpose(x) {{perm = [0, 1, 3, 2]}}
  [s] = MatMul(x, kt)
  {cap}
  [y] = MatMul(p, x)
}}"""
    fused, plain = snipjit.compile(parse_graph(text)), snipjit.compile(parse_graph(text), mha=False)
    step = block_step(fused)
    if capped:
        on_the_brgemm_kernel(step, monkeypatch)
    rng = np.random.default_rng(6)
    for n in (50, 7):
        x = {"x": rng.standard_normal((1, 2, n, 32), dtype=np.float32)}
        np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-5)


def test_the_kernel_holds_brgemms_in_its_linear_ir(level):
    model = snipjit.compile(parse_graph(attention_block("batch", "seq", heads=2, size=18, scale=0.25)))
    step = block_step(model)
    model.run(feeds(np.random.default_rng(1), 1, 9, 36))
    core = step.kernel.fallback.cores[True]   # the head split of Q, K, V and the merge: layouts of the kernel
    assert [n.op for n in core.body.nodes].count("Transpose") == 4 and [n.op for n in core.out_views] == ["Reshape"]
    (launch,) = step.kernel.fallback.launches.values()
    expressions = [line.split()[0] for line in launch.compiled.linear_ir.splitlines()[1:]]
    assert sum(e.startswith("Brgemm#") for e in expressions) == 2 and any(e.startswith("Buffer#") for e in expressions)
    assert sum(e.startswith("BrgemmCopyB#") for e in expressions) == 1   # Kᵀ packed from K's rows


def grouped_heads(scores_to_p: str) -> str:
    """4 query heads sharing 2 key/value heads (Unsqueeze, Expand, Reshape), `scores_to_p` making p from s."""
    return f"""graph(q: f32[1,4,5,8], k: f32[1,2,5,8], v: f32[1,2,5,8]) -> [y] {{
      const axis: i64[1] = [2]
      const wide: i64[5] = [1, 2, 2, 5, 8]
      const heads: i64[4] = [1, 4, 5, 8]
      [k5] = Unsqueeze(k, axis)
      [ke] = Expand(k5, wide)
      [kh] = Reshape(ke, heads)
      [kt] = Transpose(kh) {{perm = [0, 1, 3, 2]}}
      [v5] = Unsqueeze(v, axis)
      [ve] = Expand(v5, wide)
      [vh] = Reshape(ve, heads)
      [s] = MatMul(q, kt)
      {scores_to_p}
      [y] = MatMul(p, vh)
    }}"""


def test_grouped_query_heads_run_on_copies_of_the_shared_heads(level):
    """Key/value heads shared by several query heads (Unsqueeze, Expand, Reshape): the kernel reads copies of
    them repeated for their groups (the attention kernel's fallback, called here)."""
    text = grouped_heads("""const scale: f32[] = 0.3
      [ss] = Mul(s, scale)
      [p] = Softmax(ss) {axis = -1}""")
    fused, plain = snipjit.compile(parse_graph(text)), snipjit.compile(parse_graph(text), mha=False)
    step = block_step(fused)
    rng = np.random.default_rng(4)
    x = {"q": rng.standard_normal((1, 4, 5, 8), dtype=np.float32),
         **{n: rng.standard_normal((1, 2, 5, 8), dtype=np.float32) for n in "kv"}}
    brgemm = step.kernel.fallback
    brgemm.reference = None   # (a fall back to node by node would fail)
    np.testing.assert_allclose(brgemm([x[n] for n in "qkv"])[0], plain.run(x)[0], rtol=1e-5, atol=1e-6)
    assert [launch is not None for launch in brgemm.launches.values()] == [True]


def test_ops_the_attention_kernel_lacks_with_grouped_query_heads_run_on_brgemms(level, monkeypatch):
    """Shared key/value heads and an op on the scores the attention kernel lacks: one block on the Brgemm kernel."""
    text = grouped_heads("""const cap: f32[] = 5.0
      [sd] = Div(s, cap)
      [st] = Erf(sd)
      [p] = Softmax(st) {axis = -1}""")
    fused, plain = snipjit.compile(parse_graph(text)), snipjit.compile(parse_graph(text), mha=False)
    kernel = on_the_brgemm_kernel(block_step(fused), monkeypatch)
    rng = np.random.default_rng(5)
    x = {"q": rng.standard_normal((1, 4, 5, 8), dtype=np.float32),
         **{n: rng.standard_normal((1, 2, 5, 8), dtype=np.float32) for n in "kv"}}
    np.testing.assert_allclose(fused.run(x)[0], plain.run(x)[0], rtol=1e-5, atol=1e-6)
    assert [launch is not None for launch in kernel.launches.values()] == [True]
