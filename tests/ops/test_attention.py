"""LinearAttention: inference on IR text (dynamic dims, errors) and the reference kernel against a
direct loop over the recurrence."""
import itertools

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from op_cases import output_types, run


INPUTS = "q: f16[B,T,64], kv: f16[B,T,32], st: f32[B,2,16,16], dec: f16[B,T,2]"


rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("body, expected", [
    ("[y, s] = LinearAttention(q, kv, kv) {q_num_heads=4, kv_num_heads=2, update_rule=\"linear\"}",
     "f16[B,T,64]; f16[B,2,16,16]"),
    ("[y, s] = LinearAttention(q, kv, kv, st, dec, dec) {q_num_heads=4, kv_num_heads=2}",
     "f16[B,T,64]; f32[B,2,16,16]"),
])
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y, s] = LinearAttention(q, kv, kv) {q_num_heads=3, kv_num_heads=2}", "positive multiple"),
    ("[y, s] = LinearAttention(q, kv, kv) {q_num_heads=4, kv_num_heads=2}", "'gated_delta' needs decay"),
    ("[y, s] = LinearAttention(q, kv, kv, _, dec) {q_num_heads=4, kv_num_heads=2, update_rule=\"delta\"}",
     "'delta' takes no decay"),
])
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


def naive_linear_attention(q, k, v, hq, hkv, rule, past=None, decay=None, beta=None, scale=0.0):
    """The recurrence of the definition, one batch row, head and step at a time."""
    b, steps = q.shape[:2]
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    state = np.zeros((b, hkv, dk, dv)) if past is None else past.astype(np.float64).copy()
    out = np.zeros((b, steps, hq * dv))
    scale = scale or 1 / np.sqrt(dk)
    for n, t, h in itertools.product(range(b), range(steps), range(hkv)):
        kt, vt = k[n, t, h * dk:(h + 1) * dk], v[n, t, h * dv:(h + 1) * dv]
        s = state[n, h]
        if rule in ("gated", "gated_delta"):
            g = decay[n, t, h] if decay.shape[2] == hkv else decay[n, t, h * dk:(h + 1) * dk, None]
            s = np.exp(g) * s
        if rule in ("delta", "gated_delta"):
            vt = beta[n, t, h if beta.shape[2] > 1 else 0] * (vt - s.T @ kt)
        state[n, h] = s + np.outer(kt, vt)
        for j in range(hq // hkv):  # the query heads reading this state
            qh = h * (hq // hkv) + j
            out[n, t, qh * dv:(qh + 1) * dv] = scale * q[n, t, qh * dk:(qh + 1) * dk] @ state[n, h]
    return out, state


@pytest.mark.parametrize("rule, hq, per_key_decay, scalar_beta", [
    ("linear", 2, False, False), ("gated", 4, True, False), ("delta", 2, False, True),
    ("gated_delta", 4, False, False)])
def test_linear_attention_recurrence(rule, hq, per_key_decay, scalar_beta):
    b, steps, hkv, dk, dv = 2, 3, 2, 4, 3
    q, k, v = randn(b, steps, hq * dk), randn(b, steps, hkv * dk) / 2, randn(b, steps, hkv * dv)
    past = randn(b, hkv, dk, dv)
    decay = -np.abs(randn(b, steps, hkv * dk if per_key_decay else hkv)) if "gated" in rule else None
    beta = rng.uniform(0, 1, (b, steps, 1 if scalar_beta else hkv)).astype(np.float32) if "delta" in rule else None
    y, state = run("LinearAttention", q, k, v, past, decay, beta, outputs=2, q_num_heads=hq, kv_num_heads=hkv,
                   update_rule=rule, scale=0.0 if rule != "delta" else 0.25)
    ey, es = naive_linear_attention(q, k, v, hq, hkv, rule, past, decay, beta, 0.0 if rule != "delta" else 0.25)
    np.testing.assert_allclose(y, ey, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, es, rtol=1e-4, atol=1e-5)


def test_linear_attention_without_past_in_half_precision():
    q, k, v = randn(1, 4, 8, dtype=np.float16), randn(1, 4, 4, dtype=np.float16), randn(1, 4, 8, dtype=np.float16)
    y, state = run("LinearAttention", q, k, v, outputs=2, q_num_heads=2, kv_num_heads=1, update_rule="linear")
    assert y.dtype == state.dtype == np.float16 and y.shape == (1, 4, 16) and state.shape == (1, 1, 4, 8)
    ey, es = naive_linear_attention(*(a.astype(np.float32) for a in (q, k, v)), 2, 1, "linear")
    np.testing.assert_allclose(y, ey, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(state, es, rtol=1e-2, atol=1e-2)
