"""The LLVM Brgemm emitter in whole Snippets kernels, against the reference interpreter, at every ISA
level: attention-shaped bodies (a product, elementwise ops and a softmax on its rows, a second product
written straight to the output) and lone products, with sizes around the vector width and the panel
width (column tails), K not a multiple of the unroll, row counts around the register block, and batch
dims that broadcast; each with the Brgemms over a block of rows and over one row per iteration. Output
buffers are followed by guard elements that must stay untouched; the scratchpad too."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.snippets import brgemm_blocks
from snipjit.snippets.subgraph_compiler import compile_subgraph
from snipjit.targets.llvm.target import LLVMTarget
from sample_graphs import head_split_block

GUARD = 64
SENTINEL = np.float32(-12345.5)


@pytest.fixture(params=["block of rows", "one row"], autouse=True)
def rows_per_iteration(request, monkeypatch):
    """Every test twice: the Brgemms over all rows of the loop nests' row loop, and one row per iteration
    of the kernel's domain (what blocks too large for the cache get)."""
    if request.param == "one row":
        monkeypatch.setattr(brgemm_blocks, "BLOCK_ELEMENTS", 0)
    return request.param


def run_kernel(text: str, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(the kernel's outputs, the reference's) on random inputs of the body's static shapes."""
    body = parse_graph(text)
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(v.type.shape).astype(np.float32) for v in body.inputs]
    want = run_graph_reference(body, inputs)
    compiled = compile_subgraph(body, LLVMTarget(), name="brgemm_test")
    master = compiled.master_shape
    rank = len(master)
    arrays = [a.reshape((1,) * (rank - a.ndim) + a.shape) for a in inputs]
    buffers = [np.full(w.size + GUARD, SENTINEL, np.float32) for w in want]
    ptrs = (ctypes.c_void_p * (len(arrays) + len(buffers)))(*[a.ctypes.data for a in arrays],
                                                             *[b.ctypes.data for b in buffers])
    dims = (ctypes.c_int64 * rank)(*master)
    scratch = np.full(compiled.scratch_rows * master[-1] + GUARD, SENTINEL, np.float32)
    domain = int(np.prod(master[:compiled.parallel_rank]))
    half = domain // 2   # two sub-ranges, as two threads would run them
    for begin, end in ((0, half), (half, domain)):
        compiled.kernel.fn(ptrs, dims, begin, end, scratch.ctypes.data)
    for b in buffers:
        assert np.all(b[b.size - GUARD:] == SENTINEL), "the kernel wrote past an output"
    assert np.all(scratch[scratch.size - GUARD:] == SENTINEL), "the kernel wrote past its scratchpad rows"
    return [b[:w.size].reshape(w.shape) for b, w in zip(buffers, want)], want


def attention(batch: str, m: int, n: int, d: int, dv: int, kt_batch: str | None = None) -> str:
    kt_batch = batch if kt_batch is None else kt_batch
    return f"""graph(q: f32[{batch}{m},{d}], kt: f32[{kt_batch}{d},{n}], v: f32[{batch}{n},{dv}],
                    mask: f32[{n}]) -> [o] {{
     const scale: f32[] = 0.125
     [s] = MatMul(q, kt)
     [c] = Mul(s, scale)
     [t] = Tanh(c)
     [u] = Add(t, mask)
     [p] = Softmax(u)
     [o] = MatMul(p, v) }}"""


@pytest.mark.parametrize("m, n, d, dv", [(5, 37, 16, 24), (1, 1, 1, 1), (3, 1, 8, 8), (3, 16, 64, 64), (2, 64, 3, 17),
                                         (4, 129, 80, 32), (7, 200, 7, 128), (13, 50, 64, 64)])
def test_attention_bodies_match_the_reference(level, m, n, d, dv):
    got, want = run_kernel(attention("2,3,", m, n, d, dv))
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-6)


def test_a_key_matrix_shared_by_the_batch_broadcasts(level):
    got, want = run_kernel(attention("3,", 4, 33, 8, 8, kt_batch="1,"), seed=1)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (5, 7, 9), (3, 65, 48), (2, 4, 131)])
def test_a_lone_product_matches_the_reference(level, m, k, n):
    got, want = run_kernel(f"graph(a: f32[2,{m},{k}], b: f32[2,{k},{n}]) -> [c] {{ [c] = MatMul(a, b) }}")
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=1e-5)


def test_products_around_an_output_of_the_nests(level):
    text = """graph(a: f32[4,9], b: f32[9,37], v: f32[37,5]) -> [r, o] {
     [s] = MatMul(a, b)
     [r] = Relu(s)
     [o] = MatMul(r, v) }"""
    got, want = run_kernel(text, seed=2)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("keys_in_rows", [False, True])
def test_head_transposes_become_layouts(level, keys_in_rows):
    """Q and V read, and the output written, in the projections' [batch, rows, heads, size] memory; Kᵀ given
    as such, or as K's rows, which a BrgemmCopyB packs for the first product."""
    text = head_split_block(keys_in_rows)
    got, want = run_kernel(text, seed=3)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-6)
    linear_ir = compile_subgraph(parse_graph(text), LLVMTarget(), name="t").linear_ir
    assert "Transpose" not in linear_ir and ("BrgemmCopyB#" in linear_ir) == keys_in_rows


def test_the_row_loop_holds_the_nests_and_the_buffers_hold_every_row(rows_per_iteration):
    compiled = compile_subgraph(parse_graph(attention("2,", 5, 37, 16, 24)), LLVMTarget(), name="t")
    if rows_per_iteration == "one row":
        assert compiled.parallel_rank == 2 and compiled.scratch_rows <= 3   # [batch, rows] in the domain
    else:   # the scores' block (5 rows), the probabilities written over it row by row, one row between nests
        assert compiled.parallel_rank == 1 and compiled.scratch_rows == 5 + 1


def test_kernels_with_brgemms_compile_at_llvm_o1(monkeypatch):
    """Kernels with Brgemms are compiled per input shape while a model runs: at -O1 (measured as fast);
    other kernels at -O3."""
    from snipjit.targets.llvm import target
    levels = []
    real = target.compile_to_object
    monkeypatch.setattr(target, "compile_to_object",
                        lambda module, level=3: levels.append(level) or real(module, level))
    compile_subgraph(parse_graph(head_split_block(keys_in_rows=True)), LLVMTarget(), name="with_brgemms")
    compile_subgraph(parse_graph("graph(x: f32[4,40]) -> [y] {\n  [y] = Exp(x)\n}"), LLVMTarget(), name="elementwise")
    assert levels == [1, 3]
