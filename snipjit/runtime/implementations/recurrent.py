"""The `recurrent` implementation: LSTM, GRU and RNN layers as the GEMM's input projection for every step at
once plus one generated kernel for the recurrence (`targets.llvm.recurrence`: the matrix-vector products
and the gate math of each step, batch entries in parallel on the native pool).

It takes float32 layers with constant W, R, B and peepholes P, any direction and layout, both GRU variants,
`sequence_lens`, `clip`, `input_forget`, any hidden size, and every ONNX gate function (`activations` with
`activation_alpha`/`activation_beta`: the math library's relu, tanh, sigmoid, leaky_relu, thresholded_relu,
hard_sigmoid, elu, softsign, softplus, and Affine and ScaledTanh composed in the kernel); a direction's
functions make its kernel. Weights are packed once: Wᵀ for the GEMM (its bias: B's halves summed, but for a
GRU's candidate, whose recurrent bias the kernel adds), Rᵀ as panels of gate outputs, each gate block (and
the biases and peepholes) padded with zeros to whole vectors. Other layers (other dtypes, weights computed
at run time, unknown functions, a negative clip) and malformed inputs run on the reference kernel.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from ...ir.graph import Node
from ...memory.solver import aligned_array
from ...ops.recurrent import ACTIVATIONS
from ..caches.object_cache import native_kernel
from ..parallel.native_threads import get_native_pool, run_items, scratchpads
from . import gemm_launch
from .base import Implementation, Kernel, ReferenceKernel

DEFAULTS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}
# ONNX's gate functions -> the kernel's: (name, the parameters it takes, from alpha and beta)
FUNCTIONS = {"relu": ("relu", ()), "tanh": ("tanh", ()), "sigmoid": ("sigmoid", ()),
             "affine": ("affine", ("alpha", "beta")), "leakyrelu": ("leaky_relu", ("alpha",)),
             "thresholdedrelu": ("thresholded_relu", ("alpha",)), "scaledtanh": ("scaled_tanh", ("alpha", "beta")),
             "hardsigmoid": ("hard_sigmoid", ("alpha", "beta")), "elu": ("elu", ("alpha",)),
             "softsign": ("softsign", ()), "softplus": ("softplus", ())}


def _names(node: Node) -> list[str] | None:
    """The `activations` attribute, lower case, or None."""
    names = node.attrs.get("activations")
    return None if names is None else [(n.decode() if isinstance(n, bytes) else n).lower() for n in names]


def _functions(node: Node, directions: int) -> list[tuple] | None:
    """Per direction, the kernel's gate functions with alpha and beta bound as the reference binds them (in
    order, to the functions that take them); None for names or counts the kernel does not take."""
    per_direction = len(DEFAULTS[node.op])
    names = _names(node) or DEFAULTS[node.op] * directions
    if len(names) != per_direction * directions or any(n not in FUNCTIONS for n in names):
        return None
    alphas = [float(a) for a in node.attrs.get("activation_alpha") or []]
    betas = [float(b) for b in node.attrs.get("activation_beta") or []]
    bound = []
    for name in names:
        _, alpha, beta = ACTIVATIONS[next(k for k in ACTIVATIONS if k.lower() == name)]
        alpha = alphas.pop(0) if alpha is not None and alphas else alpha
        beta = betas.pop(0) if beta is not None and betas else beta
        kernel_name, takes = FUNCTIONS[name]
        bound.append((kernel_name, tuple((p, float({"alpha": alpha, "beta": beta}[p])) for p in takes)))
    return [tuple(bound[d * per_direction:(d + 1) * per_direction]) for d in range(directions)]


def _cell(node: Node) -> str:
    """The kernel's cell name."""
    if node.op == "GRU":
        return "gru_linear" if node.attrs.get("linear_before_reset", 0) else "gru"
    return node.op.lower()


def _padded(hidden: int, lanes: int) -> int:
    """The hidden size rounded up to whole vectors."""
    return -(-hidden // lanes) * lanes


def _shapes(node: Node, hidden: int) -> list:
    """Per direction, the recurrence kernel: blocks of the most vectors (up to 8) that divide the padded
    hidden size, the direction's gate functions and the layer's options."""
    from ...targets.llvm import jit
    from ...targets.llvm.recurrence import RecurrenceKernel
    level = jit.host().level
    lanes = level.f32_lanes
    whole = _padded(hidden, lanes) // lanes
    vectors = next(v for v in (8, 4, 2, 1) if whole % v == 0 and v < level.vector_registers - 2)
    a = node.attrs
    directions = 2 if a.get("direction") == "bidirectional" else 1
    clip = None if a.get("clip") is None else float(np.float32(a["clip"]))
    peepholes = len(node.inputs) > 7 and node.inputs[7] is not None
    return [RecurrenceKernel(_cell(node), vectors, lanes, level.fused_multiply_add, functions, clip, peepholes,
                             bool(a.get("input_forget", 0)) and node.op == "LSTM")
            for functions in _functions(node, directions)]


def accepts_recurrent(node: Node, options: dict) -> bool:
    """Whether the generated recurrence takes this layer (see the module's docstring)."""
    if node.op not in DEFAULTS or node.domain or not gemm_launch.available():
        return False
    a = node.attrs
    inputs = list(node.inputs) + [None] * (8 - len(node.inputs))
    directions = 2 if a.get("direction") == "bidirectional" else 1
    if _functions(node, directions) is None or (a.get("clip") is not None and not a["clip"] >= 0):
        return False   # (a negative clip: NumPy's clip gives its bound everywhere)
    if not all(v is not None and v.is_constant for v in inputs[1:3]) or any(
            v is not None and not v.is_constant for v in (inputs[3], inputs[7])):
        return False
    floats = [v for i, v in enumerate(inputs + node.outputs) if i != 4 and v is not None]
    if any(v.type is None or v.type.dtype.name != "f32" for v in floats):
        return False
    lens = inputs[4]
    if lens is not None and (lens.type is None or lens.type.dtype.name not in ("i32", "i64")):
        return False
    hidden = inputs[2].data.shape[-1]
    if inputs[7] is not None and inputs[7].data.shape != (directions, 3 * hidden):
        return False
    return a.get("hidden_size") in (None, hidden)


def _pad(a: np.ndarray, hidden: int, padded: int) -> np.ndarray:
    """`a`'s last axis, blocks of `hidden`, as blocks of `padded` (zeros after each block's values)."""
    blocks = a.reshape(a.shape[:-1] + (-1, hidden))
    out = np.zeros(blocks.shape[:-1] + (padded,), np.float32)
    out[..., :hidden] = blocks
    return np.ascontiguousarray(out.reshape(a.shape[:-1] + (-1,)))


def _aligned(a: np.ndarray) -> np.ndarray:
    """A copy of float32 `a` at a cache-line boundary (the kernel's vector loads never split a line)."""
    out = aligned_array(a.shape)
    out[...] = a
    return out


class RecurrentKernel(Kernel):
    """A recurrent layer on the GEMM and the generated recurrence, its weights packed once."""

    def __init__(self, node: Node):
        from ...targets.llvm import jit
        from ...targets.llvm.recurrence import recurrence_module
        self.node = node
        self.reference = ReferenceKernel(node)
        inputs = list(node.inputs) + [None] * (8 - len(node.inputs))
        w, r = (inputs[i].data.astype(np.float32) for i in (1, 2))
        b = inputs[3].data.astype(np.float32) if inputs[3] is not None else None
        self.directions, gates, _ = w.shape
        self.hidden = hidden = r.shape[-1]
        self.reverse = node.attrs.get("direction") == "reverse"
        self.layout = node.attrs.get("layout", 0)
        self.shapes = _shapes(node, hidden)
        self.padded = padded = _padded(hidden, self.shapes[0].lanes)
        self.packed = [gemm_launch.pack(_pad(np.ascontiguousarray(w[d].T), hidden, padded))
                       for d in range(self.directions)]
        b = np.zeros((self.directions, 2 * gates), np.float32) if b is None else b
        self.recurrent_bias = [_pad(b[d, gates + 2 * hidden:], hidden, padded) for d in range(self.directions)]
        kept = np.ones(gates, np.float32)
        if node.op == "GRU":   # (the candidate's recurrent bias is the kernel's: inside the reset for one variant)
            kept[2 * hidden:] = 0
        self.bias = [_pad(b[d, :gates] + kept * b[d, gates:], hidden, padded) for d in range(self.directions)]
        self.peepholes = [None] * self.directions
        if inputs[7] is not None:
            p = inputs[7].data.astype(np.float32).reshape(self.directions, -1)
            self.peepholes = [_pad(p[d], hidden, padded) for d in range(self.directions)]
        width = self.shapes[0].vectors * self.shapes[0].lanes   # Rᵀ as panels of a block's columns
        self.rt = [_aligned(_pad(r[d].T, hidden, padded).reshape(hidden, -1, width).transpose(1, 0, 2))
                   for d in range(self.directions)]
        host = jit.host()
        self.kernels = [native_kernel(lambda s=s: recurrence_module(s), s.name, host.cpu, host.features)
                        for s in self.shapes]

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The layer's outputs, newly allocated."""
        x = inputs[0]
        seq, batch = (x.shape[0], x.shape[1]) if self.layout == 0 else (x.shape[1], x.shape[0])
        d, h = self.directions, self.hidden
        shapes = ([(seq, d, batch, h), (d, batch, h), (d, batch, h)] if self.layout == 0 else
                  [(batch, seq, d, h), (batch, d, h), (batch, d, h)])
        outs = [np.empty(s, np.float32) for s in shapes[:len(self.node.outputs)]]
        self.run_into(inputs, outs)
        return outs

    def _lengths(self, inputs: Sequence[np.ndarray], seq: int, batch: int) -> np.ndarray | None | bool:
        """The entries' lengths as int64 (None: no sequence_lens), or False when they are malformed."""
        lens = inputs[4] if len(inputs) > 4 else None
        if lens is None:
            return None
        lens = np.ascontiguousarray(lens, dtype=np.int64)
        return lens if lens.shape == (batch,) and ((lens >= 0) & (lens <= seq)).all() else False

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """Run the layer into `outputs` (Y, Y_h[, Y_c] as the node has them)."""
        x = np.ascontiguousarray(inputs[0], dtype=np.float32)
        initial = [inputs[i] if len(inputs) > i and inputs[i] is not None else None for i in (5, 6)]
        if self.node.op != "LSTM":
            initial[1] = None
        initial = [None if s is None else np.ascontiguousarray(s, dtype=np.float32) for s in initial]
        seq, batch = (x.shape[0], x.shape[1]) if self.layout == 0 else (x.shape[1], x.shape[0])
        d_count, hidden, padded = self.directions, self.hidden, self.padded
        states = (d_count, batch, hidden) if self.layout == 0 else (batch, d_count, hidden)
        lens = self._lengths(inputs, seq, batch)
        y = outputs[0]
        finals = [outputs[i] if len(outputs) > i else np.empty(states, np.float32) for i in (1, 2)]
        gates = self.shapes[0].gates * padded
        if seq == 0 or batch == 0 or lens is False or any(s is not None and s.shape != states for s in initial):
            self.reference.run_into(inputs, outputs)
            return
        rows = x.reshape(-1, x.shape[-1])
        xw = aligned_array((rows.shape[0], gates))
        pool = get_native_pool()
        threads = min(batch, pool.threads if pool is not None else 1)
        scratch = scratchpads(pool.threads if pool is not None else 1, (gates + 3 * padded) * 4)   # (any may run one)
        from ...targets.llvm.recurrence import DIMS, PTRS
        for d in range(d_count):
            if not gemm_launch.matmul(rows, self.packed[d], xw, self.bias[d]):
                self.reference.run_into(inputs, outputs)
                return
            if self.layout == 0:   # x [seq, batch, in], Y [seq, dirs, batch, hidden], states [dirs, batch, hidden]
                step_t, step_b = batch * gates, gates
                y_t, y_b, y_at = d_count * batch * hidden, hidden, d * batch * hidden
                s_b, s_at = hidden, d * batch * hidden
            else:                  # x [batch, seq, in], Y [batch, seq, dirs, hidden], states [batch, dirs, hidden]
                step_t, step_b = gates, seq * gates
                y_t, y_b, y_at = d_count * hidden, seq * d_count * hidden, d * hidden
                s_b, s_at = d_count * hidden, d * hidden
            dims = dict(steps=seq, hidden=hidden, padded=padded, xw_t=step_t, xw_b=step_b, y_t=y_t, y_b=y_b,
                        state_b=s_b, reverse=int(self.reverse or d == 1))
            y_ptr = y.ctypes.data + 4 * y_at
            state_ptrs = [None if s is None else s.ctypes.data + 4 * s_at for s in initial]
            extra = [None if a is None else a.ctypes.data for a in (self.peepholes[d], lens)]
            ptrs = (ctypes.c_void_p * len(PTRS))(xw.ctypes.data, self.rt[d].ctypes.data, y_ptr, *state_ptrs,
                                                 finals[0].ctypes.data + 4 * s_at, finals[1].ctypes.data + 4 * s_at,
                                                 self.recurrent_bias[d].ctypes.data, *extra)
            address, fn = self.kernels[d]
            run_items(address, fn, ptrs, (ctypes.c_int64 * len(DIMS))(*(dims[n] for n in DIMS)), batch,
                      threads, scratch)


RECURRENT = Implementation("recurrent", accepts_recurrent, lambda node, options: RecurrentKernel(node))

__all__ = ["RECURRENT", "RecurrentKernel", "accepts_recurrent"]
