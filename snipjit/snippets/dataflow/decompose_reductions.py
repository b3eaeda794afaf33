"""DecomposeReductions: reductions and normalisations over the innermost axis become `ReduceLast` plus
elementwise ops, the op set the kernel generator handles.

    Softmax(x)          m = max(x); e = exp(x - m); e * (1 / sum(e))        (max-subtracted: stable;
                        m is a `shift_max`: a NaN of the row reaches every output through the sum)
    LogSoftmax(x)       d = x - m;  d - log(sum(exp(d)))
    LayerNorm(x, g, b)  c = x - mean(x); d = mean(c); (c - d) * (1 / sqrt(mean(c*c) - d*d + eps)) * g + b
                        (the corrected two-pass variance: `_normalize`)
    MVN(x)              c * (1 / (sqrt(mean(c*c)) + 1e-9)), as ONNX defines it

Per-row statistics are inverted once per row (1 / sum, 1 / std), so each element costs a multiply
instead of a division (within one rounding of the divided form).
    ReduceSum/Mean/Max/Min/Prod, ReduceL1 (sum |x|), ReduceL2 (sqrt sum x*x), ReduceSumSquare,
    ReduceLogSum (log sum), ReduceLogSumExp (m + log sum exp(x - m), m finite)

Only reductions of the last axis with kept dims reach a body (the tokenizer asks `support.py`).
"""
from __future__ import annotations

from typing import Callable

from ...ir.graph import Graph, Node, Value
from ..ops import DOMAIN
from ..pass_manager import BodyPass


class _Emit:
    """Appends decomposed nodes for one source node, with fresh value names."""

    def __init__(self, body: Graph, source: Node):
        self.body, self.source, self.nodes = body, source, []
        self.taken = {v.name for v in body.values()}

    def _name(self, hint: str) -> str:
        base = f"{self.source.outputs[0].name}_{hint}"
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}{k}"
        self.taken.add(name)
        return name

    def op(self, op: str, *inputs: Value, domain: str = "", out: Value | None = None, **attrs) -> Value:
        out = out or Value(self._name(op.lower()))
        node = Node(op, list(inputs), [out], attrs, domain=domain)
        from ...ops import infer_node
        out.type = infer_node(node)[0]
        self.nodes.append(node)
        return out

    def reduce(self, x: Value, kind: str) -> Value:
        return self.op("ReduceLast", x, domain=DOMAIN, kind=kind)

    def scalar(self, value: float) -> Value:
        return self.op("Scalar", domain=DOMAIN, value=float(value), dtype="f32", shape=[1] * len(self.source.outputs[0].type.shape))


def _softmax(e: _Emit, x: Value, out: Value) -> None:
    ex = e.op("Exp", e.op("Sub", x, e.reduce(x, "shift_max")))
    e.op("Mul", ex, e.op("Reciprocal", e.reduce(ex, "sum")), out=out)


def _log_softmax(e: _Emit, x: Value, out: Value) -> None:
    d = e.op("Sub", x, e.reduce(x, "shift_max"))
    e.op("Sub", d, e.op("Log", e.reduce(e.op("Exp", d), "sum")), out=out)


def _normalize(e: _Emit, x: Value, eps: float, scale: Value | None, bias: Value | None, out: Value,
               eps_on_std: bool = False) -> None:
    """The corrected two-pass variance: c = x - mean(x) carries the offset d = mean(c) that rounding the
    mean left; var = mean(c*c) - d*d and c - d remove it (a constant row normalises to exact zeros, and
    rows whose mean dwarfs their spread keep their precision)."""
    c = e.op("Sub", x, e.reduce(x, "mean"))
    d = e.reduce(c, "mean")
    var = e.op("Max", e.op("Sub", e.reduce(e.op("Mul", c, c), "mean"), e.op("Mul", d, d)), e.scalar(0.0))
    c = e.op("Sub", c, d)
    std = e.op("Add", e.op("Sqrt", var), e.scalar(eps)) if eps_on_std else e.op("Sqrt", e.op("Add", var, e.scalar(eps)))
    y = e.op("Mul", c, e.op("Reciprocal", std), out=out if scale is None and bias is None else None)
    if scale is not None:
        y = e.op("Mul", y, scale, out=out if bias is None else None)
    if bias is not None:
        e.op("Add", y, bias, out=out)


def _reduce(kind: str, before: str | None = None, after: str | None = None) -> Callable:
    def build(e: _Emit, x: Value, out: Value) -> None:
        if before == "square":
            x = e.op("Mul", x, x)
        elif before is not None:
            x = e.op(before, x)
        if after is None:
            _rename(e, e.reduce(x, kind), out)
        else:
            e.op(after, e.reduce(x, kind), out=out)
    return build


def _rename(e: _Emit, produced: Value, out: Value) -> None:
    """Make the last node write `out` (the source node's output value) instead of `produced`."""
    node = e.nodes[-1]
    out.type = produced.type
    node.outputs = [out]
    out.producer = node


def _log_sum_exp(e: _Emit, x: Value, out: Value) -> None:
    """m + log(sum(exp(x - m))) with m the row maximum, or 0 where that is infinite (a row of -inf
    gives -inf, a row holding +inf gives +inf, instead of inf - inf = NaN)."""
    m = e.reduce(x, "max")
    m = e.op("Where", e.op("IsInf", m, detect_negative=1, detect_positive=1), e.scalar(0.0), m)
    e.op("Add", e.op("Log", e.reduce(e.op("Exp", e.op("Sub", x, m)), "sum")), m, out=out)


REDUCTIONS: dict[str, Callable] = {
    "ReduceSum": _reduce("sum"), "ReduceMean": _reduce("mean"), "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"), "ReduceProd": _reduce("prod"), "ReduceL1": _reduce("sum", "Abs"),
    "ReduceL2": _reduce("sum", "square", "Sqrt"), "ReduceSumSquare": _reduce("sum", "square"),
    "ReduceLogSum": _reduce("sum", after="Log"), "ReduceLogSumExp": _log_sum_exp,
}


class DecomposeReductions(BodyPass):
    name = "DecomposeReductions"

    def run(self, body: Graph) -> bool:
        new_nodes: list[Node] = []
        changed = False
        for node in body.nodes:
            e = _Emit(body, node)
            x, out = node.inputs[0] if node.inputs else None, node.outputs[0]
            if node.domain:
                new_nodes.append(node)
                continue
            if node.op == "Softmax":
                _softmax(e, x, out)
            elif node.op == "LogSoftmax":
                _log_softmax(e, x, out)
            elif node.op == "LayerNormalization":
                _normalize(e, x, float(node.attrs.get("epsilon", 1e-5)), node.inputs[1],
                           node.inputs[2] if len(node.inputs) > 2 else None, out)
            elif node.op == "MeanVarianceNormalization":
                _normalize(e, x, 1e-9, None, None, out, eps_on_std=True)
            elif node.op in REDUCTIONS:
                REDUCTIONS[node.op](e, x, out)
            else:
                new_nodes.append(node)
                continue
            new_nodes.extend(e.nodes)
            changed = True
        body.nodes = new_nodes
        body.remove_dead_nodes()
        return changed


__all__ = ["DecomposeReductions"]
