"""Attention ops: LinearAttention, the causal linear-attention recurrence (linear, gated, delta and
gated-delta state updates) with grouped query heads.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import f64
from ..ir.graph import TensorType
from ..ir.shape import shape_str
from ._indexing import dim_affine, require_rank, same_dim, tensor
from .common import FLOATS, check_dtypes, one_of, upcast
from .registry import REQUIRED, Category, OpContext, register

H = Category.HEAVY


# ---- LinearAttention -----------------------------------------------------------------------------
_UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                 "gated_delta": (True, True)}  # rule: (decays the state, corrects by delta)
_ATTENTION_FLOATS = FLOATS - {f64}


def _heads(ctx: OpContext) -> tuple[int, int]:
    q, kv = ctx.attrs["q_num_heads"], ctx.attrs["kv_num_heads"]
    if q < 1 or kv < 1 or q % kv:
        raise ctx.fail(f"q_num_heads ({q}) must be a positive multiple of kv_num_heads ({kv})")
    return q, kv


def _infer_linear_attention(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, _ATTENTION_FLOATS)
    one_of("update_rule", tuple(_UPDATE_RULES))(ctx)
    hq, hkv = _heads(ctx)
    gated, delta = _UPDATE_RULES[ctx.attrs["update_rule"]]
    for i, name, needed in ((4, "decay", gated), (5, "beta", delta)):
        if ctx.has_input(i) != needed:
            verb = "needs" if needed else "takes no"
            raise ctx.fail(f"update_rule {ctx.attrs['update_rule']!r} {verb} {name} input")
    q, k, v = ctx.in_types[:3]
    for t, name in ((q, "query"), (k, "key"), (v, "value")):
        require_rank(ctx, t.shape, 3, what=name)
    for t in ctx.in_types[1:3] + ctx.in_types[4:]:
        if t is not None and t.dtype != q.dtype:
            raise ctx.fail(f"inputs have dtypes {q.dtype} and {t.dtype}")
    batch = same_dim(ctx, [t.shape[0] for t in (q, k, v) if t.shape is not None], "batch sizes")
    steps = same_dim(ctx, [t.shape[1] for t in (q, k, v) if t.shape is not None], "sequence lengths")
    d_k = None if q.shape is None else dim_affine(q.shape[2], div=hq)
    d_v = None if v.shape is None else dim_affine(v.shape[2], div=hkv)
    state = ctx.in_types[3].dtype if ctx.has_input(3) else q.dtype
    out = None if v.shape is None else dim_affine(v.shape[2], mul=hq, div=hkv)
    return [tensor(q.dtype, [batch, steps, out]), tensor(state, [batch, hkv, d_k, d_v])]


def _split_heads(ctx: OpContext, x: np.ndarray, heads: int, what: str) -> np.ndarray:
    """[B, T, H * D] as [B, H, T, D]."""
    if x.ndim != 3 or x.shape[2] % heads:
        raise ctx.fail(f"{what} of shape {shape_str(x.shape)} must be [B, T, {heads} * D]")
    b, t, hd = x.shape
    return upcast(x).reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3)


@register("LinearAttention", H, infer=_infer_linear_attention, inputs=(3, 6), outputs=2,
          attrs={"chunk_size": 64, "kv_num_heads": REQUIRED, "q_num_heads": REQUIRED, "scale": 0.0,
                 "update_rule": "gated_delta"})
def linear_attention(ctx: OpContext, query, key, value, past_state=None, decay=None, beta=None):
    """Causal linear attention as its recurrence over the T steps of query/key/value [B, T, H * D]:
    per KV head a state S [d_k, d_v] (past_state, else zeros) is updated by k_t v_t^T, "gated" first
    scaling it by exp(decay_t), "delta" writing beta_t * (v_t - S^T k_t) instead of v_t; the output is
    scale * q_t^T S (scale 0: 1/sqrt(d_k)), query heads sharing KV heads in groups. Returns the outputs
    [B, T, H_q * d_v] and the final state [B, H_kv, d_k, d_v]; chunk_size is a tuning hint only."""
    hq, hkv = _heads(ctx)
    gated, delta = _UPDATE_RULES[ctx.attrs["update_rule"]]
    q, k, v = (_split_heads(ctx, a, h, n) for a, h, n in ((query, hq, "query"), (key, hkv, "key"),
                                                          (value, hkv, "value")))
    b, _, steps, d_k = q.shape
    d_v = v.shape[-1]
    if k.shape != (b, hkv, steps, d_k) or v.shape[:3] != (b, hkv, steps):
        raise ctx.fail(f"query {shape_str(query.shape)}, key {shape_str(key.shape)} and value "
                       f"{shape_str(value.shape)} do not agree")
    if gated:
        if decay.ndim != 3 or decay.shape[:2] != (b, steps) or decay.shape[2] not in (hkv, hkv * d_k):
            raise ctx.fail(f"decay of shape {shape_str(decay.shape)} must be [B, T, {hkv}] or "
                           f"[B, T, {hkv * d_k}]")
        gate = np.exp(_split_heads(ctx, decay, hkv, "decay"))[..., None]   # [B, H_kv, T, 1 or d_k, 1]
    if delta:
        if beta.ndim != 3 or beta.shape[:2] != (b, steps) or beta.shape[2] not in (1, hkv):
            raise ctx.fail(f"beta of shape {shape_str(beta.shape)} must be [B, T, {hkv}] or [B, T, 1]")
        rate = _split_heads(ctx, beta, beta.shape[2], "beta")                # [B, H_kv or 1, T, 1]
    if past_state is None:
        state = np.zeros((b, hkv, d_k, d_v), q.dtype)
    elif past_state.shape != (b, hkv, d_k, d_v):
        raise ctx.fail(f"past_state has shape {shape_str(past_state.shape)}, expected {[b, hkv, d_k, d_v]}")
    else:
        state = upcast(past_state)
    scale = ctx.attrs["scale"] or 1 / math.sqrt(d_k)
    out = np.zeros((b, hq, steps, d_v), q.dtype)
    for t in range(steps):
        if gated:
            state = state * gate[:, :, t]
        written = v[:, :, t]
        if delta:
            written = rate[:, :, t] * (written - np.einsum("bhkv,bhk->bhv", state, k[:, :, t]))
        state = state + k[:, :, t, :, None] * written[:, :, None, :]
        out[:, :, t] = scale * np.einsum("bhk,bhkv->bhv", q[:, :, t], np.repeat(state, hq // hkv, axis=1))
    output = out.transpose(0, 2, 1, 3).reshape(b, steps, hq * d_v).astype(query.dtype)
    return output, state.astype(query.dtype if past_state is None else past_state.dtype)
