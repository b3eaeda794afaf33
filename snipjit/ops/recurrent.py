"""Recurrent layers: RNN, GRU and LSTM (ONNX opsets 7-22), forward, reverse and bidirectional.

All three share one frame: X [seq, batch, input] (or [batch, seq, input] with `layout`=1), weights W
[directions, gates·hidden, input] and R [directions, gates·hidden, hidden], the bias B [directions,
2·gates·hidden] (input then recurrence part), per-entry `sequence_lens`, initial states, optional
`clip` of the gate pre-activations and the gate functions named by `activations` (with
`activation_alpha`/`activation_beta`). Outputs: Y [seq, directions, batch, hidden] (or [batch, seq,
directions, hidden]), the last hidden state Y_h [directions, batch, hidden], and for LSTM the last cell
state Y_c. A batch entry shorter than the sequence stops there: its later Y rows are zero and Y_h holds
the state at its last step (for the reverse direction, the state after its first step).

The reference computes in the input's compute type (float32 for float32 and half-precision inputs, as
the layers' users' frameworks do; float64 for float64). Each direction takes the input products of every
step as one matrix product (X·Wᵀ), then runs the recurrence step by step: gate math, one product by Rᵀ.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir.graph import TensorType
from ._indexing import require_rank, tensor
from .common import FLOATS, check_dtypes, compute_dtype
from .registry import Category, OpContext, register

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}

_ATTRS = {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
          "direction": "forward", "hidden_size": None, "layout": 0}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(0.5 * x))   # (no overflow warning for large |x|)


# name -> (function of x, alpha, beta; default alpha; default beta)
ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "Relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "Tanh": (lambda x, a, b: np.tanh(x), None, None),
    "Sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "Affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "ThresholdedRelu": (lambda x, a, b: np.where(x > a, x, 0.0), 1.0, None),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), 1.0, None),
    "Softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "Softplus": (lambda x, a, b: np.logaddexp(0, x), None, None),
}


def _activations(ctx: OpContext, directions: int) -> list[list[Callable[[np.ndarray], np.ndarray]]]:
    """Per direction, the op's gate functions with their alpha and beta bound."""
    per_direction = DEFAULT_ACTIVATIONS[ctx.op]
    names = ctx.attrs["activations"] or per_direction * directions
    if len(names) != len(per_direction) * directions:
        raise ctx.fail(f"activations lists {len(names)} functions; {ctx.op} takes {len(per_direction)} per "
                       f"direction, {len(per_direction) * directions} in all")
    alphas, betas = list(ctx.attrs["activation_alpha"] or []), list(ctx.attrs["activation_beta"] or [])
    bound = []
    for name in names:
        name = name.decode() if isinstance(name, bytes) else name
        match = next((k for k in ACTIVATIONS if k.lower() == name.lower()), None)
        if match is None:
            raise ctx.fail(f"unknown activation {name!r}; known: {', '.join(ACTIVATIONS)}")
        fn, alpha, beta = ACTIVATIONS[match]
        a = alphas.pop(0) if alpha is not None and alphas else alpha
        b = betas.pop(0) if beta is not None and betas else beta
        bound.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [bound[d * len(per_direction):(d + 1) * len(per_direction)] for d in range(directions)]


def _infer(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS, inputs=[0, 1, 2])
    x, w, r = ctx.in_types[:3]
    for t, what in ((x, "X"), (w, "W"), (r, "R")):
        require_rank(ctx, t.shape, 3, 3, what)
    if ctx.attrs["direction"] not in DIRECTIONS:
        raise ctx.fail(f"direction must be one of {list(DIRECTIONS)}, got {ctx.attrs['direction']!r}")
    directions = DIRECTIONS[ctx.attrs["direction"]]
    hidden = ctx.attrs["hidden_size"]
    if hidden is None:
        hidden = r.shape[2] if r.shape is not None else None
    if ctx.attrs["layout"] not in (0, 1):
        raise ctx.fail(f"layout must be 0 or 1, got {ctx.attrs['layout']}")
    seq, batch = (x.shape[0], x.shape[1]) if ctx.attrs["layout"] == 0 else (x.shape[1], x.shape[0])
    y = [seq, directions, batch, hidden] if ctx.attrs["layout"] == 0 else [batch, seq, directions, hidden]
    state = [directions, batch, hidden] if ctx.attrs["layout"] == 0 else [batch, directions, hidden]
    return [tensor(x.dtype, y)] + [tensor(x.dtype, state)] * (2 if ctx.op == "LSTM" else 1)


def _split_bias(ctx: OpContext, b: np.ndarray | None, directions: int, rows: int, dt: np.dtype
                ) -> tuple[np.ndarray, np.ndarray]:
    if b is None:
        zeros = np.zeros((directions, rows), dt)
        return zeros, zeros
    if b.shape != (directions, 2 * rows):
        raise ctx.fail(f"B must be [{directions}, {2 * rows}], got {list(b.shape)}")
    return b[:, :rows].astype(dt), b[:, rows:].astype(dt)


def _state(ctx: OpContext, value: np.ndarray | None, what: str, directions: int, batch: int, hidden: int,
           dt: np.dtype):
    if value is None:
        return np.zeros((directions, batch, hidden), dt)
    if ctx.attrs["layout"] == 1:
        value = np.swapaxes(value, 0, 1)
    if value.shape != (directions, batch, hidden):
        raise ctx.fail(f"{what} must be [{directions}, {batch}, {hidden}] (in layout 0), got {list(value.shape)}")
    return value.astype(dt)


def _run(ctx: OpContext, x, w, r, b, sequence_lens, initial_h, initial_c=None, peepholes=None):
    """Every direction of an RNN, GRU or LSTM: (Y, Y_h[, Y_c]) in the input's dtype and layout."""
    gates = GATES[ctx.op]
    directions = DIRECTIONS[ctx.attrs["direction"]]
    if ctx.attrs["layout"] == 1:
        x = np.swapaxes(x, 0, 1)
    seq, batch, _ = x.shape
    hidden = r.shape[2]
    if ctx.attrs["hidden_size"] not in (None, hidden):
        raise ctx.fail(f"hidden_size is {ctx.attrs['hidden_size']} but R is {list(r.shape)}")
    if w.shape[:2] != (directions, gates * hidden) or r.shape != (directions, gates * hidden, hidden) \
            or w.shape[2] != x.shape[2]:
        raise ctx.fail(f"W {list(w.shape)} and R {list(r.shape)} must be [{directions}, {gates * hidden}, "
                       f"{x.shape[2]}] and [{directions}, {gates * hidden}, {hidden}]")
    lengths = np.full(batch, seq, np.int64) if sequence_lens is None else np.asarray(sequence_lens, np.int64)
    if lengths.shape != (batch,) or (lengths < 0).any() or (lengths > seq).any():
        raise ctx.fail(f"sequence_lens must be {batch} lengths in [0, {seq}], got {lengths.tolist()}")
    dt = compute_dtype(x.dtype)
    wb, rb = _split_bias(ctx, b, directions, gates * hidden, dt)
    h0 = _state(ctx, initial_h, "initial_h", directions, batch, hidden, dt)
    c0 = _state(ctx, initial_c, "initial_c", directions, batch, hidden, dt)
    if peepholes is not None and peepholes.shape != (directions, 3 * hidden):
        raise ctx.fail(f"P must be [{directions}, {3 * hidden}], got {list(peepholes.shape)}")
    functions = _activations(ctx, directions)
    y = np.zeros((seq, directions, batch, hidden), dt)
    last_h, last_c = np.zeros_like(h0), np.zeros_like(c0)
    for d in range(directions):
        reverse = ctx.attrs["direction"] == "reverse" or d == 1
        inputs = x.astype(dt) @ w[d].astype(dt).T + wb[d]        # [seq, batch, gates·hidden]
        step = STEPS[ctx.op]
        h, c = h0[d].copy(), c0[d].copy()
        p = None if peepholes is None else peepholes[d].astype(dt)
        rt = np.ascontiguousarray(r[d].astype(dt).T)              # [hidden, gates·hidden]
        whole = sequence_lens is None or (lengths == seq).all()
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            new_h, new_c = step(ctx, inputs[t], h, c, rt, rb[d], functions[d], p)
            if whole:
                h, c = new_h, new_c
                y[t, d] = h
            else:   # entries past their length keep their state and give zeros
                live = (t < lengths)[:, None]
                h, c = np.where(live, new_h, h), np.where(live, new_c, c)
                y[t, d] = np.where(live, h, 0)
        last_h[d], last_c[d] = h, c
    outputs = [y, last_h] + ([last_c] if ctx.op == "LSTM" else [])
    if ctx.attrs["layout"] == 1:
        outputs = [np.transpose(y, (2, 0, 1, 3))] + [np.swapaxes(s, 0, 1) for s in outputs[1:]]
    return tuple(np.ascontiguousarray(o.astype(x.dtype)) for o in outputs)


def _clip(ctx: OpContext, z: np.ndarray) -> np.ndarray:
    clip = ctx.attrs["clip"]
    return z if clip is None else np.clip(z, -clip, clip)


def _rnn_step(ctx, xw, h, c, rt, rb, f, p):
    return f[0](_clip(ctx, xw + h @ rt + rb)), c


def _gru_step(ctx, xw, h, c, rt, rb, f, p):
    xz, xr, xh = np.split(xw, 3, axis=1)
    rz, rr, rh = np.split(rt, 3, axis=1)
    bz, br, bh = np.split(rb, 3)
    z = f[0](_clip(ctx, xz + h @ rz + bz))
    reset = f[0](_clip(ctx, xr + h @ rr + br))
    if ctx.attrs.get("linear_before_reset"):
        candidate = f[1](_clip(ctx, xh + reset * (h @ rh + bh)))
    else:
        candidate = f[1](_clip(ctx, xh + (reset * h) @ rh + bh))
    return (1 - z) * candidate + z * h, c


def _lstm_step(ctx, xw, h, c, rt, rb, f, p):
    gates = xw + h @ rt + rb
    i, o, forget, g = np.split(gates, 4, axis=1)
    pi, po, pf = np.split(p, 3) if p is not None else (0.0, 0.0, 0.0)
    i = f[0](_clip(ctx, i + pi * c))
    forget = 1 - i if ctx.attrs.get("input_forget") else f[0](_clip(ctx, forget + pf * c))
    c = forget * c + i * f[1](_clip(ctx, g))
    o = f[0](_clip(ctx, o + po * c))
    return o * f[2](c), c


STEPS = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}
H = Category.HEAVY


@register("RNN", H, infer=_infer, attrs=_ATTRS, inputs=(3, 6), outputs=(1, 2))
def rnn(ctx: OpContext, x, w, r, b=None, sequence_lens=None, initial_h=None):
    """H_t = f(X_t·Wᵀ + H_(t-1)·Rᵀ + Wb + Rb)."""
    return _run(ctx, x, w, r, b, sequence_lens, initial_h)


@register("GRU", H, infer=_infer, attrs={**_ATTRS, "linear_before_reset": 0}, inputs=(3, 6), outputs=(1, 2))
def gru(ctx: OpContext, x, w, r, b=None, sequence_lens=None, initial_h=None):
    """Update gate z, reset gate r, candidate h̃ = g(X·Whᵀ + (r ⊙ H)·Rhᵀ + …) (or r ⊙ (H·Rhᵀ + Rbh) with
    `linear_before_reset`); H_t = (1 - z) ⊙ h̃ + z ⊙ H_(t-1)."""
    return _run(ctx, x, w, r, b, sequence_lens, initial_h)


@register("LSTM", H, infer=_infer, attrs={**_ATTRS, "input_forget": 0}, inputs=(3, 8), outputs=(1, 3))
def lstm(ctx: OpContext, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
    """Gates i, o, f (with peepholes P on the cell state), cell C_t = f ⊙ C_(t-1) + i ⊙ g(…), H_t =
    o ⊙ h(C_t); `input_forget` couples f = 1 - i."""
    return _run(ctx, x, w, r, b, sequence_lens, initial_h, initial_c, p)
