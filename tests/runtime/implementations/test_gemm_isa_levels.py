"""The GEMM against NumPy (float64) at every ISA level this host can execute (SNIPJIT_ISA forces the
lower ones): odd M/N/K, K=1, N=1, batches, bias, strided rows, K blocks, transposed operands and fused
epilogues through compiled graphs."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import snipjit
from snipjit import GraphBuilder
from snipjit.runtime.implementations import gemm_launch as gemm
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.gemm import DIMS

pytestmark = pytest.mark.skipif(not gemm.available(), reason="no LLVM JIT")


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def check(a, b, bias=None, packed=False):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64)) + (0 if bias is None else bias)
    out = np.full(ref.shape, np.nan, np.float32)
    operand = gemm.pack(b) if packed else b
    if packed:
        assert operand.kernel.shape.lanes == jit.host().level.f32_lanes
    assert gemm.matmul(a, operand, out, bias)
    scale = max(np.abs(ref).max() if ref.size else 1.0, 1.0)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * scale * max(a.shape[-1], 1) ** 0.5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(gemm.MIN_ROWS, 40), k=st.integers(1, 40), n=st.integers(1, 80), bias=st.booleans(),
       packed=st.booleans(), seed=st.integers(0, 2**16))
def test_odd_shapes(level, m, k, n, bias, packed, seed):
    rng = np.random.default_rng(seed)
    check(randn(rng, m, k), randn(rng, k, n), randn(rng, n) if bias else None, packed)


@pytest.mark.parametrize("m, k, n", [(13, 1, 37), (29, 45, 1), (1, 19, 70), (2, 1, 1), (100, 300, 200)])
def test_degenerate_and_large_sizes(level, m, k, n):
    rng = np.random.default_rng(m * k * n)
    check(randn(rng, m, k), randn(rng, k, n), randn(rng, n), packed=True)
    if m >= gemm.MIN_ROWS:
        check(randn(rng, m, k), randn(rng, k, n))


@pytest.mark.parametrize("a_shape, b_shape", [((2, 3, 17, 33), (33, 70)), ((4, 6, 20), (4, 20, 3)),
                                              ((5, 7), (3, 7, 9)), ((12, 64, 32), (12, 32, 64))])
def test_batched_operands(level, a_shape, b_shape):
    rng = np.random.default_rng(1)
    check(randn(rng, *a_shape), randn(rng, *b_shape))


def test_strided_rows(level):
    rng = np.random.default_rng(3)
    check(randn(rng, 40, 100)[:, 10:60], randn(rng, 50, 90)[:, 5:75])


def test_a_large_row_major_b_copied_panel_by_panel(level):
    rng = np.random.default_rng(7)
    k = gemm.COPY_MIN_PAGES * gemm.PAGE_BYTES // (4 * 100) + 1
    assert gemm.copies_panels(k, 100)
    check(randn(rng, 30, k), randn(rng, k, 100), randn(rng, 100))


@pytest.mark.parametrize("packed", [True, False])
def test_k_blocks_continue_the_sums_the_previous_block_stored(level, packed):
    rng = np.random.default_rng(8)
    a, b, bias = randn(rng, 23, 101), randn(rng, 101, 45), randn(rng, 45)
    operand = gemm.pack(b) if packed else b
    out = np.full((23, 45), np.nan, np.float32)
    launch = gemm.prepare(a, operand, out, bias)
    launch.dims[DIMS.index("kc")] = 16
    launch.run()
    np.testing.assert_allclose(out, a.astype(np.float64) @ b + bias, rtol=0, atol=1e-4)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_with_transposed_operands_and_bias(level, trans_a, trans_b):
    rng = np.random.default_rng(9)
    a = randn(rng, *((37, 21) if trans_a else (21, 37)))
    w = randn(rng, *((50, 37) if trans_b else (37, 50)))
    c = randn(rng, 50)
    g = GraphBuilder()
    x = g.input("a", "f32", list(a.shape))
    g.output(g.op("Gemm", x, g.const(w), g.const(c), transA=trans_a, transB=trans_b), "y")
    got = snipjit.compile(g.build()).run({"a": a})[0]
    expected = (a.T if trans_a else a).astype(np.float64) @ (w.T if trans_b else w) + c
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_matmul_with_fused_bias_activation_and_residual(level):
    rng = np.random.default_rng(10)
    x, w, bias = randn(rng, 2, 33, 40), randn(rng, 40, 72), randn(rng, 72)
    g = GraphBuilder()
    a = g.input("x", "f32", [2, 33, 40])
    r = g.input("r", "f32", [2, 33, 72])
    y = g.op("Relu", g.op("Add", g.op("MatMul", a, g.const(w)), g.const(bias)))
    g.output(g.op("Add", y, r), "y")
    residual = randn(rng, 2, 33, 72)
    got = snipjit.compile(g.build()).run({"x": x, "r": residual})[0]
    expected = np.maximum(x.astype(np.float64) @ w + bias, 0) + residual
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_the_register_block_follows_the_width_of_n(level, monkeypatch):
    # (speeds as measured on the Xeon the suite was tuned on: a machine's own may tip close choices)
    monkeypatch.setenv("SNIPJIT_BLOCK_SPEEDS", "1,0.92,0.74,0.96" if level.vector_registers >= 32 else "1,1,0.75")
    lanes = level.f32_lanes
    assert gemm.choose_kernel(lanes, 64).shape.vectors == 1           # one vector: the thin block
    assert gemm.choose_kernel(lanes // 2, 64).shape.vectors == 1
    assert gemm.choose_kernel(2 * lanes, 64).shape.vectors == 2       # two: the narrow block pads nothing
    wide = gemm.choose_kernel(12 * lanes, 64).shape.vectors
    assert wide > 2 and 12 % wide == 0
