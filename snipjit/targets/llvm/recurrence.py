"""Recurrent layers (LSTM, GRU, RNN) as one generated kernel: every time step of one direction for a batch
entry, with the gate math in vector code, from the input projection the GEMM has computed for all steps
at once (XW = x·Wᵀ plus the biases that add to it).

A work item is one batch entry (entries are independent; the native pool runs them in parallel). Per step
t (forwards, or backwards for `reverse`), with G = h · Rᵀ (gate blocks of `hidden` columns, in ONNX's
order) and X = XW[t, b]:

    LSTM  i, o, f = sigmoid(X + G) (blocks 0-2), c' = tanh(X3 + G3);  c = f·c + i·c';  h = o·tanh(c)
    GRU   z, r = sigmoid(X + G) (blocks 0-1);  n = tanh(X2 + r·(G2 + Rb_h))   (linear_before_reset)
          or n = tanh(X2 + (r·h) · R_hᵀ + Rb_h)   (the default: a second product, after r);  h = (1-z)·n + z·h
    RNN   h = tanh(X + G)

The products are matrix-vector products over Rᵀ, packed as panels of a block's columns ([gates·hidden /
W, hidden, W] for blocks of W = `vectors` vectors: each block streams its panel sequentially). G and
the state live in the scratchpad; h is written to Y[t] as each step ends, h (and c) to Y_h (Y_c) at the
end.

ptrs: see `PTRS` (h0, c0: null for zeros; Yh, Yc: where the final state goes, Yc null but for LSTM; rb: the
GRU's Rb_h, or null). dims: see `DIMS`, strides in elements. hidden is a multiple of the block's width.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import CountedLoop, i64 as _c
from .gemm import F32, _Builder

DIMS = ("steps", "hidden", "xw_t", "xw_b", "y_t", "y_b", "state_b", "reverse")
PTRS = ("XW", "RT", "Y", "h0", "c0", "Yh", "Yc", "rb")
GATES = {"lstm": 4, "gru": 3, "rnn": 1}


@dataclass(frozen=True)
class RecurrenceKernel:
    """The shape of one generated recurrence."""
    cell: str      # "lstm", "gru" (reset after the product: "gru_linear") or "rnn"
    vectors: int   # gate-output vectors accumulated at once
    lanes: int
    fused: bool = True

    @property
    def gates(self) -> int:
        return GATES[self.cell.split("_")[0]]

    @property
    def name(self) -> str:
        return f"snipjit_{self.cell}_{self.vectors}x{self.lanes}{'' if self.fused else '_mul_add'}"


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


def _product(g: _Builder, rt, vector, out, first, last) -> None:
    """out[first:last] = vector · Rᵀ[:, first:last] (whole blocks), `vectors` vectors of outputs at a time."""
    b, d, shape, lanes = g.b, g.d, g.shape, g.shape.lanes
    block = shape.vectors * lanes
    outputs = CountedLoop(b, "product.block", first, last, block)
    outputs.enter()
    start = outputs.index
    ks = CountedLoop(b, "product.k", _c(0), d["hidden"], 1)
    carried = [ks.phi(g.vec, g.zero) for _ in range(shape.vectors)]
    ks.enter()
    weight_row = g.at(rt, b.add(b.mul(start, d["hidden"]), b.mul(ks.index, _c(block))))
    hk = g.splat(b.load(g.at(vector, ks.index), typ=F32), F32)
    summed = [g.multiply_add(hk, g.load(g.at(weight_row, _c(v * lanes))), carried[v]) for v in range(shape.vectors)]
    ks.leave(list(zip(carried, summed)))
    for v, value in enumerate(carried):
        g.store(value, g.at(out, b.add(start, _c(v * lanes))))
    outputs.leave()


class _Step:
    """The vectors of one step at hidden index j: X's and G's gate blocks, the state."""

    def __init__(self, g: _Builder, xw_row, gates, j):
        self.g, self.xw_row, self.gates, self.j = g, xw_row, gates, j

    def block(self, base, k):
        g = self.g
        return g.load(g.at(base, g.b.add(g.b.mul(g.d["hidden"], _c(k)), self.j)))

    def summed(self, k):
        return self.g.b.fadd(self.block(self.xw_row, k), self.block(self.gates, k))

    def fn(self, name, x):
        return vmath.emit(self.g.b, name, x, fused_multiply_add=self.g.shape.fused)


def _each_unit(g: _Builder, name: str, emit) -> None:
    loop = CountedLoop(g.b, name, _c(0), g.d["hidden"], g.shape.lanes)
    loop.enter()
    emit(loop.index)
    loop.leave()


def _step(g: _Builder, xw_row, rt, h, c, gates, spare, y_row) -> None:
    """One time step: the products, the gate math, the new state into h (and c) and Y's row."""
    b, d, cell = g.b, g.d, g.shape.cell
    hidden = d["hidden"]
    width = b.mul(hidden, _c(g.shape.gates))
    if cell == "gru":   # z and r first; the candidate's product reads r·h
        _product(g, rt, h, gates, _c(0), b.mul(hidden, _c(2)))

        def reset_state(j):
            s = _Step(g, xw_row, gates, j)
            g.store(b.fmul(s.fn("sigmoid", s.summed(1)), g.load(g.at(h, j))), g.at(spare, j))
        _each_unit(g, "gru.reset", reset_state)
        _product(g, rt, spare, gates, b.mul(hidden, _c(2)), width)
    else:
        _product(g, rt, h, gates, _c(0), width)
    rb = g.pointer("rb") if cell.startswith("gru") else None

    def update(j):
        s = _Step(g, xw_row, gates, j)
        old = g.load(g.at(h, j))
        if cell == "lstm":
            i, o, f = (s.fn("sigmoid", s.summed(k)) for k in (0, 1, 2))
            cell_state = b.fadd(b.fmul(f, g.load(g.at(c, j))), b.fmul(i, s.fn("tanh", s.summed(3))))
            g.store(cell_state, g.at(c, j))
            new = b.fmul(o, s.fn("tanh", cell_state))
        elif cell == "rnn":
            new = s.fn("tanh", s.summed(0))
        else:
            z = s.fn("sigmoid", s.summed(0))
            recurrent = b.fadd(s.block(gates, 2), g.load(g.at(rb, j)))
            if cell == "gru_linear":
                recurrent = b.fmul(s.fn("sigmoid", s.summed(1)), recurrent)
            n = s.fn("tanh", b.fadd(s.block(xw_row, 2), recurrent))
            new = b.fadd(n, b.fmul(z, b.fsub(old, n)))   # (1 - z)·n + z·h
        g.store(new, g.at(spare, j))
        g.store(new, g.at(y_row, j))

    _each_unit(g, "update", update)
    _each_unit(g, "state", lambda j: g.store(g.load(g.at(spare, j)), g.at(h, j)))


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
    gates = g.scratch   # G, then h, c and a spare vector of hidden floats
    h = g.at(gates, b.mul(d["hidden"], _c(shape.gates)))
    c = g.at(h, d["hidden"])
    spare = g.at(c, d["hidden"])

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    item = work.index
    _initial(g, "h0", item, h)
    if shape.cell == "lstm":
        _initial(g, "c0", item, c)
    steps = CountedLoop(b, "step", _c(0), d["steps"], 1)
    steps.enter()
    backwards = b.icmp_signed("!=", d["reverse"], _c(0))
    t = b.select(backwards, b.sub(b.sub(d["steps"], _c(1)), steps.index), steps.index)
    xw_row = g.at(xw, b.add(b.mul(t, d["xw_t"]), b.mul(item, d["xw_b"])))
    _step(g, xw_row, rt, h, c, gates, spare, g.at(y, b.add(b.mul(t, d["y_t"]), b.mul(item, d["y_b"]))))
    steps.leave()
    _final(g, "Yh", item, h)
    if shape.cell == "lstm":
        _final(g, "Yc", item, c)
    work.leave()
    b.ret_void()
    return g.module


__all__ = ["DIMS", "GATES", "PTRS", "RecurrenceKernel", "recurrence_module"]
