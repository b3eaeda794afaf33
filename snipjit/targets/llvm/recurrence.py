"""Recurrent layers (LSTM, GRU, RNN) as one generated kernel: every time step of one direction for a batch
entry, with the gate math in vector code, from the input projection the GEMM has computed for all steps
at once (XW = x·Wᵀ plus the biases that add to it).

A work item is one batch entry (entries are independent; the native pool runs them in parallel). Per step
t (forwards, or backwards for `reverse`), with G = h · Rᵀ (gate blocks of `padded` columns, in ONNX's
order), X = XW[t, b], the gate functions f, g, h (`functions`, ONNX's defaults: sigmoid, tanh, tanh) and
clip(v) = v clamped to [-clip, clip] (no-op without `clip`):

    LSTM  i = f(clip(X0 + G0 + Pi·c)), f' = f(clip(X2 + G2 + Pf·c)) or 1 - i (`input_forget`),
          c = f'·c + i·g(clip(X3 + G3)), o = f(clip(X1 + G1 + Po·c)) (the new c), h = o·h(c)
          (the peephole terms P only with `peepholes`)
    GRU   z, r = f(clip(X + G)) (blocks 0-1);  n = g(clip(X2 + r·(G2 + Rb_h)))   (linear_before_reset)
          or n = g(clip(X2 + (r·h) · R_hᵀ + Rb_h))   (the default: a second product, after r);
          h = (1-z)·n + z·h
    RNN   h = f(clip(X + G))

Sequence lengths: an entry of length L (the `lens` pointer, int64 per entry; null: every entry runs all
`steps`) runs its steps [0, L) (backwards from L-1 for `reverse`), its Y rows from L on are zeros and its
final state is the state after its last step (the initial state for L = 0), as ONNX specifies.

Hidden sizes off the vector width: the state, G, XW's gate blocks, Rᵀ's columns and the biases and
peepholes are padded to `padded` (whole vectors, zeros past `hidden`); the products run over the `hidden`
real rows of Rᵀ only, so the padding lanes never reach a real one, and only `hidden` floats of each row are
read from h0/c0 or written to Y, Y_h, Y_c (whole vectors, then single floats: no masked memory access).

The products are matrix-vector products over Rᵀ, packed as panels of a block's columns ([gates·padded /
W, hidden, W] for blocks of W = `vectors` vectors: each block streams its panel sequentially). G and
the state live in the scratchpad; h is written to Y[t] as each step ends, h (and c) to Y_h (Y_c) at the
end.

ptrs: see `PTRS` (h0, c0: null for zeros; Yh, Yc: where the final state goes, Yc null but for LSTM; rb: the
GRU's Rb_h, or null; P: the padded peepholes [Pi, Po, Pf], read only with `peepholes`; lens: null or the
entries' lengths). dims: see `DIMS`, strides in elements; padded is a multiple of the block's width.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import CountedLoop, I64, i64 as _c
from .gemm_builder import GemmBuilder
from .vector_builder import F32

DIMS = ("steps", "hidden", "padded", "xw_t", "xw_b", "y_t", "y_b", "state_b", "reverse")
PTRS = ("XW", "RT", "Y", "h0", "c0", "Yh", "Yc", "rb", "P", "lens")
GATES = {"lstm": 4, "gru": 3, "rnn": 1}
DEFAULT_FUNCTIONS = {"lstm": (("sigmoid", ()), ("tanh", ()), ("tanh", ())), "gru": (("sigmoid", ()), ("tanh", ())),
                     "rnn": (("tanh", ()),)}
LOCAL_FUNCTIONS = ("affine", "scaled_tanh")   # compositions of the library's operations, emitted here


@dataclass(frozen=True)
class RecurrenceKernel:
    """The shape of one generated recurrence."""
    cell: str      # "lstm", "gru" (reset after the product: "gru_linear") or "rnn"
    vectors: int   # gate-output vectors accumulated at once
    lanes: int
    fused: bool = True
    functions: tuple = ()   # the gate functions: (name, ((parameter, value), ...)) each; () for the defaults
    clip: float | None = None
    peepholes: bool = False
    input_forget: bool = False

    @property
    def gates(self) -> int:
        """Gate blocks of the cell."""
        return GATES[self.kernel_cell]

    @property
    def kernel_cell(self) -> str:
        """The cell without its GRU variant."""
        return self.cell.split("_")[0]

    @property
    def gate_functions(self) -> tuple:
        """The gate functions, the defaults filled in."""
        return self.functions or DEFAULT_FUNCTIONS[self.kernel_cell]

    @property
    def name(self) -> str:
        """The kernel's symbol: the shape, and a digest of the options other than the defaults."""
        base = f"snipjit_{self.cell}_{self.vectors}x{self.lanes}{'' if self.fused else '_mul_add'}"
        options = (self.gate_functions, self.clip, self.peepholes, self.input_forget)
        if options == (DEFAULT_FUNCTIONS[self.kernel_cell], None, False, False):
            return base
        return f"{base}_{hashlib.sha256(repr(options).encode()).hexdigest()[:16]}"


def _loop(g: GemmBuilder, name: str, start, stop, step: int, emit) -> None:
    """emit(i) for i in [start, stop) stepping `step`."""
    loop = CountedLoop(g.b, name, start, stop, step)
    loop.enter()
    emit(loop.index)
    loop.leave()


def _copy(g: GemmBuilder, name: str, source, target, count) -> None:
    """target[:count] = source[:count] (zeros for a null `source`): whole vectors, then single floats."""
    b = g.b
    whole = b.and_(count, _c(-g.shape.lanes))

    def vector(i):
        g.store(g.zero if source is None else g.load(g.at(source, i)), g.at(target, i))

    def single(i):
        value = ir.Constant(F32, 0.0) if source is None else b.load(g.at(source, i), typ=F32)
        b.store(value, g.at(target, i), align=4)
    _loop(g, f"{name}.vectors", _c(0), whole, g.shape.lanes, vector)
    _loop(g, f"{name}.floats", whole, count, 1, single)


def _initial(g: GemmBuilder, name: str, item, state) -> None:
    """state = the initial state of this batch entry (zeros when its pointer is null; padding lanes zero)."""
    b, d = g.b, g.d
    source = g.pointer(name)
    _loop(g, f"{name}.zero", _c(0), d["padded"], g.shape.lanes, lambda j: g.store(g.zero, g.at(state, j)))

    def copy():
        _copy(g, f"{name}.copy", g.at(source, b.mul(item, d["state_b"])), state, d["hidden"])
        return []
    g.branches(b.icmp_unsigned("!=", source, g.null), copy, lambda: [])


def _product(g: GemmBuilder, rt, vector, out, first, last) -> None:
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
    """The vectors of one step at hidden index j: X's and G's gate blocks, the state, the gate functions."""

    def __init__(self, g: GemmBuilder, xw_row, gates, j):
        self.g, self.xw_row, self.gates, self.j = g, xw_row, gates, j

    def block(self, base, k):
        """Gate block k of `base` at j."""
        return self.g.load(self.g.at(base, self.g.b.add(self.g.b.mul(self.g.d["padded"], _c(k)), self.j)))

    def summed(self, k):
        """X + G of gate block k."""
        return self.g.b.fadd(self.block(self.xw_row, k), self.block(self.gates, k))

    def splat(self, value: float):
        """A vector of the f32 constant `value`."""
        return ir.Constant(self.g.vec, [value] * self.g.shape.lanes)

    def clip(self, x):
        """x clamped to [-clip, clip] (NaN kept), or x without `clip`."""
        bound = self.g.shape.clip
        return x if bound is None else vmath.emit(self.g.b, "clip", x, lo=-bound, hi=bound,
                                                  fused_multiply_add=self.g.shape.fused)

    def fn(self, k, x):
        """Gate function k (0: f, 1: g, 2: h) of x."""
        b, (name, params) = self.g.b, self.g.shape.gate_functions[k]
        params = dict(params)
        if name == "affine":       # alpha·x + beta, rounded twice as the reference does
            return b.fadd(b.fmul(x, self.splat(params["alpha"])), self.splat(params["beta"]))
        if name == "scaled_tanh":  # alpha·tanh(beta·x)
            return b.fmul(self.splat(params["alpha"]), self.fn_named("tanh", b.fmul(x, self.splat(params["beta"]))))
        return self.fn_named(name, x, **params)

    def fn_named(self, name, x, **params):
        """The math library's function `name` of x."""
        return vmath.emit(self.g.b, name, x, fused_multiply_add=self.g.shape.fused, **params)

    def gate(self, k, function, extra=None):
        """function(clip(X + G (+ extra))) of gate block k."""
        pre = self.summed(k)
        return self.fn(function, self.clip(pre if extra is None else self.g.b.fadd(pre, extra)))


def _lstm(g: GemmBuilder, s: _Step, h, c, j, peep) -> None:
    """The LSTM's gates, the new c and h at j (`peep`: the peepholes, or None)."""
    b = g.b
    old = g.load(g.at(c, j))

    def peephole(k, state):
        return None if peep is None else b.fmul(s.block(peep, k), state)
    i = s.gate(0, 0, peephole(0, old))
    f = b.fsub(s.splat(1.0), i) if g.shape.input_forget else s.gate(2, 0, peephole(2, old))
    cell_state = b.fadd(b.fmul(f, old), b.fmul(i, s.gate(3, 1)))
    g.store(cell_state, g.at(c, j))
    o = s.gate(1, 0, peephole(1, cell_state))
    g.store(b.fmul(o, s.fn(2, cell_state)), g.at(h, j))


def _step(g: GemmBuilder, xw_row, rt, h, c, gates, spare, y_row) -> None:
    """One time step: the products, the gate math, the new state into h (and c), h into Y's row."""
    b, d, cell = g.b, g.d, g.shape.cell
    padded, lanes = d["padded"], g.shape.lanes
    width = b.mul(padded, _c(g.shape.gates))
    if cell == "gru":   # z and r first; the candidate's product reads r·h
        _product(g, rt, h, gates, _c(0), b.mul(padded, _c(2)))

        def reset_state(j):
            s = _Step(g, xw_row, gates, j)
            g.store(b.fmul(s.gate(1, 0), g.load(g.at(h, j))), g.at(spare, j))
        _loop(g, "gru.reset", _c(0), padded, lanes, reset_state)
        _product(g, rt, spare, gates, b.mul(padded, _c(2)), width)
    else:
        _product(g, rt, h, gates, _c(0), width)
    rb = g.pointer("rb") if cell.startswith("gru") else None
    peep = g.pointer("P") if g.shape.peepholes else None

    def update(j):
        s = _Step(g, xw_row, gates, j)
        if cell == "lstm":
            _lstm(g, s, h, c, j, peep)
            return
        if cell == "rnn":
            g.store(s.gate(0, 0), g.at(h, j))
            return
        old = g.load(g.at(h, j))
        z = s.gate(0, 0)
        recurrent = b.fadd(s.block(gates, 2), g.load(g.at(rb, j)))
        if cell == "gru_linear":
            recurrent = b.fmul(s.gate(1, 0), recurrent)
        n = s.fn(1, s.clip(b.fadd(s.block(xw_row, 2), recurrent)))
        g.store(b.fadd(n, b.fmul(z, b.fsub(old, n))), g.at(h, j))   # (1 - z)·n + z·h

    _loop(g, "update", _c(0), padded, lanes, update)
    _copy(g, "y", h, y_row, d["hidden"])


def _length(g: GemmBuilder, item):
    """The steps batch entry `item` runs: its sequence length, or all of them without `lens`."""
    b, lens = g.b, g.pointer("lens")

    def given():
        return [b.load(b.gep(lens, [item], source_etype=I64), typ=I64)]
    return g.branches(b.icmp_unsigned("!=", lens, g.null), given, lambda: [g.d["steps"]])[0]


def recurrence_module(shape: RecurrenceKernel) -> ir.Module:
    """The module defining kernel `shape.name`."""
    g = GemmBuilder(shape, DIMS, PTRS)
    b, d = g.b, g.d
    xw, rt, y = (g.pointer(name) for name in PTRS[:3])
    gates = g.scratch   # G, then h, c and a spare vector of padded floats
    h = g.at(gates, b.mul(d["padded"], _c(shape.gates)))
    c = g.at(h, d["padded"])
    spare = g.at(c, d["padded"])

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    item = work.index
    _initial(g, "h0", item, h)
    if shape.cell == "lstm":
        _initial(g, "c0", item, c)
    length = _length(g, item)
    backwards = b.icmp_signed("!=", d["reverse"], _c(0))

    def y_row(t):
        return g.at(y, b.add(b.mul(t, d["y_t"]), b.mul(item, d["y_b"])))
    steps = CountedLoop(b, "step", _c(0), length, 1)
    steps.enter()
    t = b.select(backwards, b.sub(b.sub(length, _c(1)), steps.index), steps.index)
    xw_row = g.at(xw, b.add(b.mul(t, d["xw_t"]), b.mul(item, d["xw_b"])))
    _step(g, xw_row, rt, h, c, gates, spare, y_row(t))
    steps.leave()
    _loop(g, "past", length, d["steps"], 1, lambda t: _copy(g, "y.zero", None, y_row(t), d["hidden"]))
    _copy(g, "Yh", h, g.at(g.pointer("Yh"), b.mul(item, d["state_b"])), d["hidden"])
    if shape.cell == "lstm":
        _copy(g, "Yc", c, g.at(g.pointer("Yc"), b.mul(item, d["state_b"])), d["hidden"])
    work.leave()
    b.ret_void()
    return g.module


__all__ = ["DEFAULT_FUNCTIONS", "DIMS", "GATES", "LOCAL_FUNCTIONS", "PTRS", "RecurrenceKernel", "recurrence_module"]
