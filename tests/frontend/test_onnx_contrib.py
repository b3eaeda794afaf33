"""ONNX Runtime's com.microsoft MultiHeadAttention imported as standard ops: against a NumPy reference of the
op's semantics (and ONNX Runtime itself where it is installed), fused into one attention step, and the
forms it refuses."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import snipjit
from snipjit.frontend.onnx import FrontendError, load
from snipjit.runtime.implementations import attention, gemm_launch

# (batch, rows, keys, heads, head size, value head size, unidirectional, padding mask rank, attention bias)
CASES = [(2, 5, 7, 2, 16, 16, 0, 2, False), (2, 9, 9, 3, 32, 32, 1, 2, True), (1, 33, 33, 4, 64, 64, 1, 0, False),
         (2, 6, 11, 2, 32, 16, 0, 3, True), (1, 7, 5, 2, 16, 16, 1, 0, False), (2, 8, 8, 2, 8, 8, 1, 3, True),
         (2, 3, 7, 2, 16, 16, 1, 2, False), (1, 1, 6, 2, 16, 16, 1, 0, True)]   # causal, fewer rows than keys


def mha_model(heads: int, width: int, value_width: int, unidirectional: int = 0, padding: int = 0,
              attention_bias: bool = False, bias: bool = True, extra_inputs: int = 0, **attrs):
    """One MultiHeadAttention node on query/key/value [b, s|l, width] with dynamic batch and lengths."""
    inputs = [helper.make_tensor_value_info("q", TP.FLOAT, ["b", "s", width]),
              helper.make_tensor_value_info("k", TP.FLOAT, ["b", "l", width]),
              helper.make_tensor_value_info("v", TP.FLOAT, ["b", "l", value_width])]
    names = ["q", "k", "v", "bias" if bias else "", "m" if padding else "", "ab" if attention_bias else ""]
    if bias:
        inputs.append(helper.make_tensor_value_info("bias", TP.FLOAT, [2 * width + value_width]))
    if padding:
        inputs.append(helper.make_tensor_value_info("m", TP.INT32, ["b", "l"] if padding == 2 else ["b", "s", "l"]))
    if attention_bias:
        inputs.append(helper.make_tensor_value_info("ab", TP.FLOAT, [1, heads, "s", "l"]))
    for i in range(extra_inputs):   # past key and value
        names.append(f"past{i}")
        inputs.append(helper.make_tensor_value_info(f"past{i}", TP.FLOAT, ["b", heads, "p", width // heads]))
    while names and not names[-1]:
        names.pop()
    node = helper.make_node("MultiHeadAttention", names, ["y"], "mha", domain="com.microsoft", num_heads=heads,
                            unidirectional=unidirectional, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def feeds(rng, case) -> dict:
    b, s, l, n, h, hv, _, padding, attention_bias = case
    x = {"q": rng.standard_normal((b, s, n * h), dtype=np.float32),
         "k": rng.standard_normal((b, l, n * h), dtype=np.float32),
         "v": rng.standard_normal((b, l, n * hv), dtype=np.float32),
         "bias": rng.standard_normal(2 * n * h + n * hv, dtype=np.float32)}
    if padding:
        x["m"] = (rng.random((b, l) if padding == 2 else (b, s, l)) < 0.7).astype(np.int32)
        x["m"][..., 0] = 0   # (with a causal mask: the first row sees only masked keys)
    if attention_bias:
        x["ab"] = rng.standard_normal((1, n, s, l), dtype=np.float32)
    return x


def reference(x: dict, heads: int, unidirectional: int, scale: float | None = None, fill: float = -10000.0):
    """The op in float64: bias added, heads split, scores scaled, attention bias and fill at padded keys
    added, keys past a row (j > i) left out but by the last row, softmax, ·V, heads merged."""
    q, k, v = (x[n].astype(np.float64) for n in "qkv")
    width, value_width = q.shape[2], v.shape[2]
    if "bias" in x:
        cut = np.cumsum([0, width, width, value_width])
        q, k, v = (a + x["bias"][cut[i]:cut[i + 1]] for i, a in enumerate((q, k, v)))
    split = [lambda a, w=w: a.reshape(a.shape[0], a.shape[1], heads, w // heads).transpose(0, 2, 1, 3)
             for w in (width, value_width)]
    s = split[0](q) @ split[0](k).transpose(0, 1, 3, 2) * (scale or (width // heads) ** -0.5)
    s = s + x["ab"] if "ab" in x else s
    if "m" in x:
        m = x["m"][:, None, None, :] if x["m"].ndim == 2 else x["m"][:, None]
        s = np.where(m > 0, s, (s.astype(np.float32) + np.float32(fill)).astype(np.float64))   # (rounded as in f32)
    if unidirectional:
        rows = np.arange(s.shape[-2])[:, None]
        s = np.where((np.arange(s.shape[-1]) <= rows) | (rows == s.shape[-2] - 1), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    o = (p / p.sum(-1, keepdims=True)) @ split[1](v)
    return o.transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], value_width)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])) + f"u{c[6]}m{c[7]}{'b' * c[8]}")
def test_multi_head_attention_becomes_one_attention_block(case):
    b, s, l, n, h, hv, unidirectional, padding, attention_bias = case
    model = mha_model(n, n * h, n * hv, unidirectional, padding, attention_bias)
    compiled = snipjit.compile(model)
    rng = np.random.default_rng(sum(case[:6]))
    for batch in (b, 1):   # (dynamic batch)
        x = feeds(rng, case)
        x = {name: a[:batch] if a.ndim > 1 and name != "ab" else a for name, a in x.items()}
        np.testing.assert_allclose(compiled.run(x)[0], reference(x, n, unidirectional), rtol=1e-4, atol=1e-4)
    steps = [step for step in compiled.plan if "Softmax" in step.ops]
    assert len(steps) == 1 and "MatMul" in steps[0].ops
    if gemm_launch.available():
        assert isinstance(steps[0].kernel, attention.AttentionKernel)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])) + f"u{c[6]}m{c[7]}{'b' * c[8]}")
def test_multi_head_attention_matches_onnx_runtime(case):
    ort = pytest.importorskip("onnxruntime")
    b, s, l, n, h, hv, unidirectional, padding, attention_bias = case
    model = mha_model(n, n * h, n * hv, unidirectional, padding, attention_bias)
    x = feeds(np.random.default_rng(7), case)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(snipjit.compile(model).run(x)[0], want, rtol=1e-4, atol=1e-4)


def test_scale_and_mask_filter_value_attributes():
    model = mha_model(2, 32, 32, padding=2, bias=False, scale=0.3, mask_filter_value=-50.0)
    x = feeds(np.random.default_rng(3), (2, 4, 6, 2, 16, 16, 0, 2, False))
    del x["bias"]
    np.testing.assert_allclose(snipjit.compile(model).run(x)[0], reference(x, 2, 0, 0.3, -50.0), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("model, message", [
    (mha_model(2, 32, 32, extra_inputs=2), "KV cache"),
    (mha_model(3, 32, 32), "num_heads 3 must divide"),
])
def test_forms_it_does_not_take_are_refused_naming_the_node(model, message):
    with pytest.raises(FrontendError, match=message) as e:
        load(model)
    assert "'mha'" in str(e.value) and "MultiHeadAttention" in str(e.value)


def test_packed_qkv_and_kv_integers_sequence_lengths_and_a_bias_of_another_length_are_refused():
    packed = mha_model(2, 32, 32, bias=False)
    packed.graph.node[0].input[:] = ["q"]
    with pytest.raises(FrontendError, match="packed QKV"):
        load(packed)
    packed.graph.node[0].input[:] = ["q", "k"]
    with pytest.raises(FrontendError, match="packed KV"):
        load(packed)
    integers = mha_model(2, 32, 32, bias=False)
    for value in integers.graph.input:
        value.type.tensor_type.elem_type = TP.INT32
    with pytest.raises(FrontendError, match="query must be floating point"):
        load(integers)
    long_bias = mha_model(2, 32, 32)
    long_bias.graph.input[3].type.tensor_type.shape.dim[0].dim_value = 97
    with pytest.raises(FrontendError, match=r"bias must be \[96\]"):
        load(long_bias)
    lengths = mha_model(2, 32, 32, padding=2)
    lengths.graph.input[4].type.tensor_type.shape.ClearField("dim")
    lengths.graph.input[4].type.tensor_type.shape.dim.add().dim_param = "b"
    with pytest.raises(FrontendError, match="sequence lengths are not supported"):
        load(lengths)


def test_half_precision_stays_half():
    model = mha_model(2, 32, 32, unidirectional=1, padding=2)
    for value in [*model.graph.input, *model.graph.output]:
        if value.type.tensor_type.elem_type == TP.FLOAT:
            value.type.tensor_type.elem_type = TP.FLOAT16
    x = feeds(np.random.default_rng(5), (2, 6, 6, 2, 16, 16, 1, 2, False))
    x = {n: a.astype(np.float16) if a.dtype == np.float32 else a for n, a in x.items()}
    x["m"][:, :2] = 1   # (every row sees a key not padded: -10000 + s in f16 keeps no digit of s)
    got = snipjit.compile(model).run(x)[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, reference(x, 2, 1), rtol=2e-2, atol=2e-2)
