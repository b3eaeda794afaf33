"""The LSTM recurrence as one generated kernel: every time step of one direction for a batch entry, with
the gate math (sigmoid, tanh, the cell update) in vector code, from the input projection the GEMM has
computed for all steps at once.

A work item is one batch entry (entries are independent; the native pool runs them in parallel). Per step
t (forwards, or backwards for `reverse`):

    gates = XW[t, b] + h · Rᵀ        (XW holds x·Wᵀ + both biases; ONNX's gate order i, o, f, c)
    i, o, f = sigmoid(...), c' = tanh(...);  c = f·c + i·c';  h = o·tanh(c)

The product is a matrix-vector product over Rᵀ, packed as panels of a block's columns ([4·hidden / W,
hidden, W] for blocks of W = `vectors` vectors: each block streams its panel sequentially): blocks of
gate outputs accumulate h[k] · Rᵀ[k] over k. The gates live in the scratchpad (4·hidden
floats), h and c next to them; h is written to Y[t] as each step ends, h and c to Y_h and Y_c at the end.

ptrs: see `PTRS` (h0, c0: null for zeros; Yh, Yc: where the final state goes). dims: see `DIMS`, strides
in elements. hidden is a multiple of the vector width and 4·hidden of the block's.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import CountedLoop, i64 as _c
from .gemm import F32, _Builder

DIMS = ("steps", "hidden", "xw_t", "xw_b", "y_t", "y_b", "state_b", "reverse")
PTRS = ("XW", "RT", "Y", "h0", "c0", "Yh", "Yc")


@dataclass(frozen=True)
class RecurrenceKernel:
    """The shape of one generated LSTM recurrence."""
    vectors: int   # gate-output vectors accumulated at once
    lanes: int
    fused: bool = True

    @property
    def name(self) -> str:
        return f"snipjit_lstm_{self.vectors}x{self.lanes}{'' if self.fused else '_mul_add'}"


def _initial(g: _Builder, name: str, item, state) -> None:
    """state = the initial state of this batch entry (zeros when its pointer is null)."""
    b, d, lanes = g.b, g.d, g.shape.lanes
    source = g.pointer(name)

    def copy():
        start = g.at(source, b.mul(item, d["state_b"]))
        loop = CountedLoop(b, f"{name}.copy", _c(0), d["hidden"], lanes)
        loop.enter()
        g.store(g.load(g.at(start, loop.index)), g.at(state, loop.index))
        loop.leave()
        return []

    def zeros():
        loop = CountedLoop(b, f"{name}.zero", _c(0), d["hidden"], lanes)
        loop.enter()
        g.store(g.zero, g.at(state, loop.index))
        loop.leave()
        return []

    g.branches(b.icmp_unsigned("!=", source, g.null), copy, zeros)


def _gates(g: _Builder, xw_row, rt, h, gates) -> None:
    """gates = xw_row + h · Rᵀ, `vectors` vectors of outputs at a time."""
    b, d, shape, lanes = g.b, g.d, g.shape, g.shape.lanes
    width = b.mul(d["hidden"], _c(4))
    block = shape.vectors * lanes
    outputs = CountedLoop(b, "gates.block", _c(0), width, block)
    outputs.enter()
    start = outputs.index
    acc = [g.load(g.at(xw_row, b.add(start, _c(v * lanes)))) for v in range(shape.vectors)]
    ks = CountedLoop(b, "gates.k", _c(0), d["hidden"], 1)
    carried = [ks.phi(g.vec, a) for a in acc]
    ks.enter()
    weight_row = g.at(rt, b.add(b.mul(start, d["hidden"]), b.mul(ks.index, _c(block))))
    hk = g.splat(b.load(g.at(h, ks.index), typ=F32), F32)
    summed = [g.multiply_add(hk, g.load(g.at(weight_row, _c(v * lanes))), carried[v]) for v in range(shape.vectors)]
    ks.leave(list(zip(carried, summed)))
    for v, value in enumerate(carried):
        g.store(value, g.at(gates, b.add(start, _c(v * lanes))))
    outputs.leave()


def _update(g: _Builder, gates, h, c, y_row) -> None:
    """The cell update from the gates (i, o, f, c'), into c and h and the step's output row."""
    b, d, lanes, fused = g.b, g.d, g.shape.lanes, g.shape.fused
    hidden = d["hidden"]
    loop = CountedLoop(b, "update", _c(0), hidden, lanes)
    loop.enter()
    j = loop.index

    def gate(k):
        return g.load(g.at(gates, b.add(b.mul(hidden, _c(k)), j)))

    i, o, f = (vmath.emit(b, "sigmoid", gate(k), fused_multiply_add=fused) for k in (0, 1, 2))
    candidate = vmath.emit(b, "tanh", gate(3), fused_multiply_add=fused)
    cell = b.fadd(b.fmul(f, g.load(g.at(c, j))), b.fmul(i, candidate))
    out = b.fmul(o, vmath.emit(b, "tanh", cell, fused_multiply_add=fused))
    g.store(cell, g.at(c, j))
    g.store(out, g.at(h, j))
    g.store(out, g.at(y_row, j))
    loop.leave()


def _final(g: _Builder, name: str, item, state) -> None:
    b, d, lanes = g.b, g.d, g.shape.lanes
    target = g.at(g.pointer(name), b.mul(item, d["state_b"]))
    loop = CountedLoop(b, f"{name}.store", _c(0), d["hidden"], lanes)
    loop.enter()
    g.store(g.load(g.at(state, loop.index)), g.at(target, loop.index))
    loop.leave()


def recurrence_module(shape: RecurrenceKernel) -> ir.Module:
    """The module defining kernel `shape.name`."""
    g = _Builder(shape, DIMS, PTRS)
    b, d = g.b, g.d
    xw, rt, y = (g.pointer(name) for name in PTRS[:3])
    gates = g.scratch
    h = g.at(gates, b.mul(d["hidden"], _c(4)))
    c = g.at(h, d["hidden"])

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    item = work.index
    _initial(g, "h0", item, h)
    _initial(g, "c0", item, c)
    steps = CountedLoop(b, "step", _c(0), d["steps"], 1)
    steps.enter()
    backwards = b.icmp_signed("!=", d["reverse"], _c(0))
    t = b.select(backwards, b.sub(b.sub(d["steps"], _c(1)), steps.index), steps.index)
    xw_row = g.at(xw, b.add(b.mul(t, d["xw_t"]), b.mul(item, d["xw_b"])))
    _gates(g, xw_row, rt, h, gates)
    _update(g, gates, h, c, g.at(y, b.add(b.mul(t, d["y_t"]), b.mul(item, d["y_b"]))))
    steps.leave()
    _final(g, "Yh", item, h)
    _final(g, "Yc", item, c)
    work.leave()
    b.ret_void()
    return g.module


__all__ = ["DIMS", "PTRS", "RecurrenceKernel", "recurrence_module"]
