"""The `recurrent` implementation: LSTM, GRU and RNN layers as the GEMM's input projection for every step at
once plus one generated kernel for the recurrence (`targets.llvm.recurrence`: the matrix-vector products
and the gate math of each step, batch entries in parallel on the native pool).

It takes the common layers: float32, constant W, R and B, the default activations, no clip, peepholes,
input_forget or sequence_lens, any direction and layout, a hidden size that is a multiple of the vector
width. Weights are packed once: Wᵀ for the GEMM (its bias: B's halves summed, but for a GRU's candidate,
whose recurrent bias the kernel adds), Rᵀ as panels of gate outputs. Other layers run on the reference
kernel.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from ...ir.graph import Node
from ..caches.object_cache import native_kernel
from ..parallel.native_threads import get_native_pool, run_items, scratchpads
from . import gemm_launch
from .base import Implementation, Kernel, ReferenceKernel

DEFAULTS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}


def _names(node: Node) -> list[str] | None:
    names = node.attrs.get("activations")
    return None if names is None else [(n.decode() if isinstance(n, bytes) else n).lower() for n in names]


def _cell(node: Node) -> str:
    if node.op == "GRU":
        return "gru_linear" if node.attrs.get("linear_before_reset", 0) else "gru"
    return node.op.lower()


def _shape(node: Node, hidden: int):
    """The recurrence kernel: blocks of the most vectors (up to 8) that divide the hidden size."""
    from ...targets.llvm import jit
    from ...targets.llvm.recurrence import RecurrenceKernel
    level = jit.host().level
    lanes = level.f32_lanes
    vectors = next(v for v in (8, 4, 2, 1) if (hidden // lanes) % v == 0 and v < level.vector_registers - 2)
    return RecurrenceKernel(_cell(node), vectors, lanes, level.fused_multiply_add)


def accepts_recurrent(node: Node, options: dict) -> bool:
    if node.op not in DEFAULTS or node.domain or not gemm_launch.available():
        return False
    a = node.attrs
    inputs = list(node.inputs) + [None] * (8 - len(node.inputs))
    directions = 2 if a.get("direction") == "bidirectional" else 1
    if (a.get("clip") is not None or a.get("input_forget", 0) or a.get("activation_alpha") or a.get("activation_beta")
            or _names(node) not in (None, DEFAULTS[node.op] * directions) or inputs[4] is not None
            or inputs[7] is not None):
        return False
    if not all(v is not None and v.is_constant for v in inputs[1:3]) or (inputs[3] is not None
                                                                         and not inputs[3].is_constant):
        return False
    if any(v is not None and (v.type is None or v.type.dtype.name != "f32") for v in inputs + node.outputs):
        return False
    from ...targets.llvm import jit
    hidden = inputs[2].data.shape[-1]
    return a.get("hidden_size") in (None, hidden) and hidden % jit.host().level.f32_lanes == 0


class RecurrentKernel(Kernel):
    def __init__(self, node: Node):
        from ...targets.llvm import jit
        self.node = node
        self.reference = ReferenceKernel(node)
        w, r = (node.inputs[i].data.astype(np.float32) for i in (1, 2))
        b = node.inputs[3].data.astype(np.float32) if len(node.inputs) > 3 and node.inputs[3] is not None else None
        self.directions, gates, _ = w.shape
        self.hidden = hidden = r.shape[-1]
        self.reverse = node.attrs.get("direction") == "reverse"
        self.layout = node.attrs.get("layout", 0)
        self.packed = [gemm_launch.pack(np.ascontiguousarray(w[d].T)) for d in range(self.directions)]
        b = np.zeros((self.directions, 2 * gates), np.float32) if b is None else b
        self.recurrent_bias = [np.ascontiguousarray(b[d, gates + 2 * hidden:]) for d in range(self.directions)]
        kept = np.ones(gates, np.float32)
        if node.op == "GRU":   # (the candidate's recurrent bias is the kernel's: inside the reset for one variant)
            kept[2 * hidden:] = 0
        self.bias = [np.ascontiguousarray(b[d, :gates] + kept * b[d, gates:]) for d in range(self.directions)]
        self.shape = _shape(node, hidden)
        width = self.shape.vectors * self.shape.lanes   # Rᵀ as panels of a block's columns
        self.rt = [np.ascontiguousarray(r[d].T.reshape(self.hidden, -1, width).transpose(1, 0, 2))
                   for d in range(self.directions)]
        host = jit.host()
        from ...targets.llvm.recurrence import recurrence_module
        self.address, self.fn = native_kernel(lambda: recurrence_module(self.shape), self.shape.name, host.cpu,
                                              host.features)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        seq, batch = (x.shape[0], x.shape[1]) if self.layout == 0 else (x.shape[1], x.shape[0])
        d, h = self.directions, self.hidden
        shapes = ([(seq, d, batch, h), (d, batch, h), (d, batch, h)] if self.layout == 0 else
                  [(batch, seq, d, h), (batch, d, h), (batch, d, h)])
        outs = [np.empty(s, np.float32) for s in shapes[:len(self.node.outputs)]]
        self.run_into(inputs, outs)
        return outs

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        x = np.ascontiguousarray(inputs[0], dtype=np.float32)
        initial = [inputs[i] if len(inputs) > i and inputs[i] is not None else None for i in (5, 6)]
        if self.node.op != "LSTM":
            initial[1] = None
        initial = [None if s is None else np.ascontiguousarray(s, dtype=np.float32) for s in initial]
        seq, batch = (x.shape[0], x.shape[1]) if self.layout == 0 else (x.shape[1], x.shape[0])
        d_count, hidden = self.directions, self.hidden
        states = (d_count, batch, hidden) if self.layout == 0 else (batch, d_count, hidden)
        y = outputs[0]
        finals = [outputs[i] if len(outputs) > i else np.empty(states, np.float32) for i in (1, 2)]
        gates = self.shape.gates * hidden
        if seq == 0 or batch == 0 or any(s is not None and s.shape != states for s in initial):
            self.reference.run_into(inputs, outputs)
            return
        rows = x.reshape(-1, x.shape[-1])
        xw = np.empty((rows.shape[0], gates), np.float32)
        pool = get_native_pool()
        threads = min(batch, pool.threads if pool is not None else 1)
        scratch = scratchpads(pool.threads if pool is not None else 1, (gates + 3 * hidden) * 4)   # (any may run one)
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
            dims = dict(steps=seq, hidden=hidden, xw_t=step_t, xw_b=step_b, y_t=y_t, y_b=y_b, state_b=s_b,
                        reverse=int(self.reverse or d == 1))
            y_ptr = y.ctypes.data + 4 * y_at
            state_ptrs = [None if s is None else s.ctypes.data + 4 * s_at for s in initial]
            ptrs = (ctypes.c_void_p * len(PTRS))(xw.ctypes.data, self.rt[d].ctypes.data, y_ptr, *state_ptrs,
                                                 finals[0].ctypes.data + 4 * s_at, finals[1].ctypes.data + 4 * s_at,
                                                 self.recurrent_bias[d].ctypes.data)
            run_items(self.address, self.fn, ptrs, (ctypes.c_int64 * len(DIMS))(*(dims[n] for n in DIMS)), batch,
                      threads, scratch)


RECURRENT = Implementation("recurrent", accepts_recurrent, lambda node, options: RecurrentKernel(node))

__all__ = ["RECURRENT", "RecurrentKernel", "accepts_recurrent"]
