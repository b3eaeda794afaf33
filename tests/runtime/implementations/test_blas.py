"""The `blas` implementation: MatMul/Gemm/Conv through NumPy against the reference kernels, both into
planned buffers and into new arrays, and bias/activation epilogues absorbed into the heavy step. Convs
stay NCHW here (`channels_last=False`); test_nhwc_steps.py runs them on the `nhwc` implementation."""
import numpy as np
import pytest

import snipjit
from snipjit import GraphBuilder
from snipjit.runtime.implementations.blas import BlasKernel

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def build(op, inputs, consts=(), **attrs):
    """A one-node graph: `inputs` (name -> array) are graph inputs, `consts` follow as constants."""
    b = GraphBuilder()
    args = [b.input(name, "f32", list(a.shape)) for name, a in inputs.items()]
    args += [b.const(c) if c is not None else None for c in consts]
    b.output(b.op(op, *args, **attrs), "y")
    return b.build()


def check_against_reference(graph, feeds):
    blas = snipjit.compile(graph, channels_last=False, fuse=False, fold=False)
    ref = snipjit.compile(graph, channels_last=False, fold=False, implementations={"reference"})
    assert [s.kind for s in blas.plan] == ["blas"]
    expected = ref.run(feeds)[0]
    got = blas.run(feeds)[0]
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)
    # the kernel outside a plan: into a new array, and into a given one
    kernel = blas.plan[0].kernel
    args = list(feeds.values()) + [v.data for v in graph.nodes[0].inputs[len(feeds):] if v is not None]
    np.testing.assert_allclose(kernel(args)[0], expected, rtol=2e-5, atol=2e-5)
    out = np.full(expected.shape, np.nan, np.float32)
    kernel.run_into(args, [out])
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((5, 7), (7, 3)),
    ((48, 96), (96, 80)),            # large enough to be planned
    ((4, 5, 7), (4, 7, 3)),          # batched
    ((2, 1, 5, 7), (3, 7, 6)),       # batch dims broadcast
    ((7,), (7, 3)),                  # 1-D left operand
    ((2, 5, 7), (7,)),               # 1-D right operand
    ((7,), (7,)),                    # a dot product
])
def test_matmul(a_shape, b_shape):
    feeds = {"a": randn(*a_shape), "b": randn(*b_shape)}
    check_against_reference(build("MatMul", feeds), feeds)


@pytest.mark.parametrize("trans_a, trans_b, alpha, beta, c_shape", [
    (0, 0, 1.0, 1.0, None),
    (1, 0, 1.0, 1.0, (6,)),
    (0, 1, 0.5, 1.0, (1, 6)),
    (1, 1, 2.0, 0.25, (5, 1)),
    (0, 0, 1.0, -1.5, (5, 6)),
    (0, 1, 1.0, 3.0, ()),
])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    a = randn(*((9, 5) if trans_a else (5, 9)))
    b = randn(*((6, 9) if trans_b else (9, 6)))
    consts = [randn(*c_shape)] if c_shape is not None else []
    feeds = {"a": a, "b": b}
    graph = build("Gemm", feeds, consts, transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    check_against_reference(graph, feeds)


@pytest.mark.parametrize("x_shape, w_shape, bias, attrs", [
    ((2, 16, 9, 9), (32, 16, 1, 1), True, {}),                                   # pointwise, fast path
    ((2, 16, 9, 9), (32, 16, 1, 1), False, {"strides": [1, 1], "pads": [0, 0, 0, 0]}),
    ((1, 8, 20), (4, 8, 1), True, {}),                                           # 1-D pointwise
    ((1, 4, 9, 9), (8, 4, 1, 1), False, {"strides": [2, 2]}),                     # strided 1x1: not pointwise
    ((1, 4, 9, 9), (8, 4, 1, 1), True, {"pads": [1, 1, 1, 1]}),                   # padded 1x1
    ((2, 3, 10, 10), (8, 3, 3, 3), True, {}),                                    # k x k
    ((1, 3, 11, 11), (8, 3, 3, 3), False, {"strides": [2, 2]}),
    ((1, 3, 10, 10), (8, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ((1, 3, 10, 10), (8, 3, 3, 3), False, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 12, 12), (8, 3, 3, 3), False, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 8, 10, 10), (12, 2, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),   # grouped
    ((1, 8, 10, 10), (8, 1, 3, 3), True, {"group": 8, "pads": [1, 1, 1, 1]}),    # depthwise
    ((1, 8, 10, 10), (8, 4, 1, 1), False, {"group": 2}),                         # grouped 1x1
])
def test_conv(x_shape, w_shape, bias, attrs):
    feeds = {"x": randn(*x_shape)}
    consts = [randn(*w_shape)] + ([randn(w_shape[0])] if bias else [])
    check_against_reference(build("Conv", feeds, consts, **attrs), feeds)


def test_pointwise_conv_is_one_gemm():
    graph = build("Conv", {"x": randn(1, 4, 3, 3)}, [randn(8, 4, 1, 1)])
    kernel = BlasKernel(graph.nodes[0])
    assert kernel._is_pointwise(graph.nodes[0].inputs[1].data)
    strided = build("Conv", {"x": randn(1, 4, 3, 3)}, [randn(8, 4, 1, 1)], strides=[2, 2])
    assert not BlasKernel(strided.nodes[0])._is_pointwise(strided.nodes[0].inputs[1].data)


# ---- epilogues ----------------------------------------------------------------------------------
def conv_bias_relu(bias_shape=(16, 1, 1), activation="Relu"):
    b = GraphBuilder()
    x = b.input("x", "f32", [2, 8, 12, 12])
    y = b.Conv(x, b.const(randn(16, 8, 3, 3)), pads=[1, 1, 1, 1])
    y = b.Add(y, b.const(randn(*bias_shape)))
    b.output(b.op(activation, y), "y")
    return b.build()


def test_conv_bias_relu_is_one_blas_step():
    graph = conv_bias_relu()
    fused = snipjit.compile(graph, channels_last=False, fold=False)   # folding would move the bias into the Conv
    apart = snipjit.compile(graph, channels_last=False, fold=False, fuse_epilogues=False)
    assert [(s.kind, s.ops) for s in fused.plan] == [("blas", ["Conv", "Add", "Relu"])]
    assert [(s.kind, s.ops) for s in apart.plan] == [("blas", ["Conv"]), ("snippet", ["Add", "Relu"])]
    x = randn(2, 8, 12, 12)
    got = fused.run({"x": x})[0]
    np.testing.assert_allclose(got, apart.run({"x": x})[0], rtol=1e-5, atol=1e-5)
    reference = snipjit.compile(graph, channels_last=False, implementations={"reference"})
    np.testing.assert_allclose(got, reference.run({"x": x})[0],
                               rtol=1e-5, atol=1e-5)
    assert got.min() == 0 and got.max() > 0


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid", "Tanh", "LeakyRelu"])
def test_absorbed_activations_match_the_reference(activation):
    graph = conv_bias_relu(activation=activation)
    fused = snipjit.compile(graph, channels_last=False, fold=False)
    assert fused.plan[0].ops == ["Conv", "Add", activation] and len(fused.plan) == 1
    x = randn(2, 8, 12, 12)
    expected = snipjit.compile(graph, channels_last=False, implementations={"reference"}).run({"x": x})[0]
    np.testing.assert_allclose(fused.run({"x": x})[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lo, hi", [(0.0, 6.0), (-1.0, None), (None, 0.5)])
def test_absorbed_clip(lo, hi):
    b = GraphBuilder()
    x = b.input("x", "f32", [16, 32])
    m = b.MatMul(x, b.const(randn(32, 24)))
    m = b.Add(b.const(randn(24)), m)   # bias first
    bound = [b.const(np.float32(v)) if v is not None else None for v in (lo, hi)]
    b.output(b.Clip(m, *bound), "y")
    graph = b.build()
    fused = snipjit.compile(graph, channels_last=False, fold=False)
    assert [(s.kind, s.ops) for s in fused.plan] == [("blas", ["MatMul", "Add", "Clip"])]
    xv = randn(16, 32) * 3
    expected = snipjit.compile(graph, channels_last=False, implementations={"reference"}).run({"x": xv})[0]
    np.testing.assert_allclose(fused.run({"x": xv})[0], expected, rtol=1e-5, atol=1e-5)


def test_epilogue_of_a_small_output_computed_into_a_new_array():
    b = GraphBuilder()
    x = b.input("x", "f32", [8, "n"])   # (A transposed: a Gemm whose launch is not prepared once)
    y = b.Gemm(x, b.const(randn(4, 8)), b.const(randn(4)), transA=1, transB=1)
    b.output(b.Transpose(b.Tanh(y), perm=[1, 0]), "y")   # a consumer no kernel fuses
    graph = b.build()
    fused = snipjit.compile(graph, channels_last=False, fold=False)
    assert [(s.kind, s.ops) for s in fused.plan] == [("blas", ["Gemm", "Tanh"]), ("reference", ["Transpose"])]
    xv = randn(8, 3)
    expected = snipjit.compile(graph, channels_last=False, implementations={"reference"}).run({"x": xv})[0]
    np.testing.assert_allclose(fused.run({"x": xv})[0], expected, rtol=1e-5, atol=1e-6)
    assert next(iter(fused.program.plans().values())).modes[0] == "call"   # the Gemm: into a new array


@pytest.mark.parametrize("op,inputs,consts,attrs", [
    ("MatMul", {"a": randn(3, 37, 50)}, [randn(50, 70)], {}),                          # packed weights
    ("MatMul", {"a": randn(2, 5, 9), "b": randn(2, 9, 33)}, [], {}),                  # batched, both fed
    ("Gemm", {"a": randn(20, 30)}, [randn(40, 30), randn(40)], {"transB": 1}),        # bias in the kernel
    ("Gemm", {"a": randn(30, 20)}, [randn(30, 40), randn(40)], {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ("Conv", {"x": randn(2, 8, 9, 9)}, [randn(16, 8, 3, 3), randn(16)], {"pads": [1, 1, 1, 1]}),
])
def test_generated_gemm_and_numpy_blas_agree(op, inputs, consts, attrs, monkeypatch):
    from snipjit.runtime.implementations import gemm_launch
    if not gemm_launch.available():
        pytest.skip("no LLVM JIT")
    calls = []
    real = gemm_launch.prepare
    monkeypatch.setattr(gemm_launch, "prepare", lambda *a, **k: calls.append(1) or real(*a, **k))
    graph = build(op, inputs, consts, **attrs)
    native = snipjit.compile(graph, channels_last=False, fuse=False, fold=False).run(inputs)[0]
    assert calls, "the generated GEMM kernel was not tried"
    calls.clear()
    numpy = snipjit.compile(graph, channels_last=False, fuse=False, fold=False, gemm="numpy").run(inputs)[0]
    assert not calls
    np.testing.assert_allclose(native, numpy, rtol=1e-5, atol=1e-5)
    check_against_reference(graph, inputs)


def test_packed_weights_are_held_once_and_the_graph_shows_it():
    from snipjit.ir.graph import is_held_placeholder
    from snipjit.runtime.implementations import gemm_launch
    if not gemm_launch.available():
        pytest.skip("no LLVM JIT")
    w, shared = randn(64, 96), randn(64, 64)
    b = GraphBuilder()
    x = b.input("x", "f32", [8, 64])
    y = b.op("MatMul", x, b.const(w))
    s = b.const(shared)
    z = b.op("Add", b.op("MatMul", x, s), b.op("MatMul", x, s))   # s read by two MatMuls
    b.output(y, "y")
    b.output(z, "z")
    cm = snipjit.compile(b.build(), channels_last=False, fuse=False, fold=False)
    feeds = {"x": randn(8, 64)}
    out = cm.run(feeds)
    np.testing.assert_allclose(out[0], feeds["x"] @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[1], 2 * (feeds["x"] @ shared), rtol=1e-5, atol=1e-5)
    held = [v for v in cm.graph.constants if is_held_placeholder(v.data)]
    from snipjit.ir.text import print_graph
    # only packed copies remain
    assert len(held) == 2 and "<held by its kernels>" in print_graph(cm.graph, max_elems=None)


def test_compiling_a_compiled_models_graph_with_released_weights_is_refused():
    from snipjit.runtime.implementations import gemm_launch
    if not gemm_launch.available():
        pytest.skip("no LLVM JIT")
    cm = snipjit.compile(build("MatMul", {"a": randn(8, 16)}, [randn(16, 24)]), fuse=False, fold=False)
    with pytest.raises(ValueError, match="hold constants"):
        snipjit.compile(cm.graph)


def test_matmul_launch_is_prepared_once_while_its_arrays_stay(monkeypatch):
    from snipjit.runtime.implementations import gemm_launch
    if not gemm_launch.available():
        pytest.skip("no LLVM JIT")
    prepared = []
    real = gemm_launch.prepare
    monkeypatch.setattr(gemm_launch, "prepare", lambda *a, **k: prepared.append(1) or real(*a, **k))
    w, bias = randn(96, 80), randn(80)
    b = GraphBuilder()
    x = b.input("x", "f32", [64, 96])
    b.output(b.Sigmoid(b.Add(b.op("MatMul", x, b.const(w)), b.const(bias))), "y")
    req = snipjit.compile(b.build()).create_request()
    expected = lambda x: 1 / (1 + np.exp(-(x @ w + bias)))   # noqa: E731
    xv = randn(64, 96)
    for _ in range(3):
        np.testing.assert_allclose(req.run({"x": xv})[0], expected(xv), rtol=1e-5, atol=1e-6)
    assert len(prepared) == 1   # the feed and the arena output stayed the same arrays
    xv[:] = randn(64, 96)   # changed in place: the same pointer, new values
    np.testing.assert_allclose(req.run({"x": xv})[0], expected(xv), rtol=1e-5, atol=1e-6)
    other = randn(64, 96)
    np.testing.assert_allclose(req.run({"x": other})[0], expected(other), rtol=1e-5, atol=1e-6)
    assert len(prepared) == 2
    column = randn(96, 64).T   # not taken by the kernel: the general path, still right
    np.testing.assert_allclose(req.run({"x": column})[0], expected(column), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trans_b, c_shape, activation", [(1, (80,), "Gelu"), (0, None, ""), (1, (), "Tanh"),
                                                      (0, (1, 80), "")])
def test_a_plain_gemm_prepares_its_launch_once(trans_b, c_shape, activation):
    """A Gemm that is a product plus a per-column bias (A not transposed, alpha and beta 1) is bound like a
    MatMul: one prepared launch, with C (one value per column, or one for all) as the kernel's bias and the
    activation in the kernel; others (C as a row) take the general way. Step by step and joined."""
    from snipjit.runtime.implementations import gemm_launch
    if not gemm_launch.available():
        pytest.skip("no LLVM JIT")
    w = randn(*((80, 96) if trans_b else (96, 80)))
    c = None if c_shape is None else randn(*c_shape)
    b = GraphBuilder()
    x = b.input("x", "f32", [64, 96])
    y = b.Gemm(b.Relu(x), b.const(w), *([] if c is None else [b.const(c)]), transB=trans_b)
    b.output(b.Transpose(b.op(activation, y) if activation else y), "y")   # (a reader that fuses nothing)
    graph = b.build()
    cm = snipjit.compile(graph, fold=False)
    reference = snipjit.compile(graph, implementations={"reference"})
    gemm = next(i for i, s in enumerate(cm.plan) if s.kind == "blas")
    assert cm.plan[gemm].ops == ["Gemm"] + ([activation] if activation else [])
    for join in (True, False):
        req = cm.create_request()
        req.join_steps = join
        for _ in range(2):
            xv = randn(64, 96)
            np.testing.assert_allclose(req.run({"x": xv})[0], reference.run({"x": xv})[0], rtol=1e-5, atol=1e-5)
        bound = next(iter(req._bound.values()))
        assert bound.calls[gemm][0] == ("into" if c_shape == (1, 80) else "launch")


def test_a_scalar_bias_and_gelu_run_in_the_kernel(monkeypatch):
    """A zero-initialised Linear bias folds to one value: the GEMM still adds it and applies the Gelu in its
    store (else the Gelu ran as a NumPy epilogue, 15x slower than the product on ConvNeXt's MLPs)."""
    from snipjit.runtime.implementations import blas
    text = """graph(x: f32[1,7,7,64]) -> [y: f32[1,7,7,96]] {
      const w: f32[64,96] = <elided>
      const b: f32[1] = [0.25]
      [m: f32[1,7,7,96]] = MatMul(x, w)
      [a: f32[1,7,7,96]] = Add(m, b)
      [y: f32[1,7,7,96]] = Gelu(a)
    }"""
    graph = snipjit.parse_graph(text, elided="zeros")
    graph.constants[0].data = randn(64, 96) / 8
    cm = snipjit.compile(graph)
    (step,) = cm.program.steps
    assert step.kind == "blas" and step.kernel._activation(1) == "gelu_erf"
    np.testing.assert_array_equal(step.kernel._bias(96), np.full(96, 0.25, np.float32))
    monkeypatch.setitem(blas.EPILOGUES, "Gelu", lambda *args: pytest.fail("the Gelu ran outside the kernel"))
    x = randn(1, 7, 7, 64)
    expected = snipjit.compile(graph, implementations={"reference"}).run({"x": x})[0]
    np.testing.assert_allclose(cm.run({"x": x})[0], expected, rtol=1e-5, atol=1e-6)



def test_only_a_bias_per_column_or_one_value_is_the_kernels_bias():
    """An Add of [n, 1] to an [n, n] product adds one value per row: the kernel's bias (per column) must not
    take it, though it has n values; [n], [1, n] and a single value are per column."""
    graph = snipjit.parse_graph("""graph(x: f32[8,16]) -> [y: f32[8,8]] {
      const w: f32[16,8] = <elided>
      [y: f32[8,8]] = MatMul(x, w)
    }""", elided="zeros")
    kernel = BlasKernel(graph.nodes[0])
    values = np.arange(8, dtype=np.float32)
    for b, taken in ((values.reshape(8, 1), None), (values, values), (values[None], values),
                     (np.float32([[2.5]]), np.full(8, 2.5)), (np.arange(8.0), None)):   # (float64: not taken)
        kernel.epilogue = [("Add", b, {})]
        got = kernel._bias(8)
        assert (got is None) if taken is None else np.array_equal(got, taken), (b.shape, b.dtype)
