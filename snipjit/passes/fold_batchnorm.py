"""FoldBatchNorm: per-channel affine ops folded into the weights of the Conv/Gemm/MatMul before them.

An inference BatchNormalization is `y = x * s + t` per channel (axis 1), with
`s = scale / sqrt(var + epsilon)` and `t = B - mean * s`; a Mul or Add by a constant that varies only
along the channel axis is the same with `t = 0` or `s = 1`. When such an op reads the output of

* `Conv(x, W, b)`:      W[c, ...] *= s[c],    b = b * s + t;
* `Gemm(A, B, C)`:      the columns of op(B) *= s, C = beta * C * s + t (and beta = 1);
* `MatMul(A, W)`, W 2-D: the columns of W *= s; a shift stays as an Add after the MatMul,

and that output has no other reader, the op disappears into the weights. The weight constants and
BatchNormalization parameters must be constant (compile-time or runtime constants, see
ConstantAnalysis); the pass does not compute anything itself: it writes the arithmetic on them as graph
nodes, which `fold_constants` (or the runtime folding function) evaluates with the reference kernels.
Several ops in a row fold one after the other (DenseNet: Conv -> BN -> Mul -> Add becomes one Conv).

A BatchNormalization that cannot fold into a producer, but whose parameters are constant, becomes
`Mul(x, s) -> Add(t)` with s and t shaped [C, 1, ..., 1], which fold to two small constants.

Run `fold_constants` after this pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.dtypes import DType
from ..ir.graph import Graph, Node, Value
from ..ir.shape import is_static
from ..ops import infer_node
from .constant_analysis import ConstantAnalysis, FreshNames


class _Emitter:
    """Writes new nodes (typed as they are made) to be added to the graph."""

    def __init__(self, graph: Graph):
        self.names = FreshNames(graph)
        self.nodes: list[Node] = []

    def const(self, data, hint: str) -> Value:
        return Value.constant(self.names(hint), np.asarray(data))

    def shape(self, dims: list[int], hint: str) -> Value:
        return self.const(np.array(dims, dtype=np.int64), hint)

    def op(self, op: str, *inputs: Value | None, hint: str, out: Value | None = None, **attrs) -> Value:
        out = out if out is not None else Value(self.names(hint))
        node = Node(op, list(inputs), [out], attrs)
        out.type = infer_node(node)[0]
        self.nodes.append(node)
        return out

    def cast(self, v: Value, dt: DType, hint: str) -> Value:
        return v if v.dtype == dt else self.op("Cast", v, to=dt.onnx, hint=hint)


@dataclass
class Affine:
    """`y = x * scale + shift` along one axis of x; scale/shift are [C] vectors or None (1 / 0)."""
    node: Node
    scale: Value | None
    shift: Value | None


def _is_per_channel(c: Value, data: Value, axis: int) -> bool:
    """c broadcasts into data's shape without enlarging it and varies at most along `axis`."""
    shape, cs = data.shape, c.shape
    if not is_static(cs) or shape is None or len(cs) > len(shape) or not isinstance(shape[axis], int):
        return False
    padded = (1,) * (len(shape) - len(cs)) + tuple(cs)
    return all(d == 1 or (i == axis and d == shape[axis]) for i, d in enumerate(padded))


def as_affine(node: Node, data: Value, axis: int, analysis: ConstantAnalysis, emit: _Emitter) -> Affine | None:
    """`node` as a per-channel affine map of `data` along `axis` (emitting the nodes computing its
    scale and shift vectors), or None."""
    if node.domain or len(node.outputs) != 1 or data.shape is None or not data.dtype.is_float:
        return None
    axis %= len(data.shape)
    hint = node.outputs[0].name
    if node.op == "BatchNormalization" and node.inputs[0] is data and axis == 1:
        if node.attrs.get("training_mode", 0) or not all(analysis.is_constant(v) for v in node.inputs[1:]):
            return None
        scale, bias, mean, var = (emit.cast(v, data.dtype, f"{hint}_cast") for v in node.inputs[1:])
        eps = emit.const(np.array(node.attrs.get("epsilon", 1e-5), dtype=data.dtype.np), f"{hint}_epsilon")
        std = emit.op("Sqrt", emit.op("Add", var, eps, hint=f"{hint}_var"), hint=f"{hint}_std")
        s = emit.op("Div", scale, std, hint=f"{hint}_scale")
        t = emit.op("Sub", bias, emit.op("Mul", mean, s, hint=f"{hint}_mean"), hint=f"{hint}_shift")
        return Affine(node, s, t)
    if node.op in ("Mul", "Add") and data in node.inputs:
        c = node.inputs[1] if node.inputs[0] is data else node.inputs[0]
        if c is data or not analysis.is_constant(c) or c.dtype != data.dtype or not _is_per_channel(c, data, axis):
            return None
        vec = emit.op("Reshape", c, emit.shape([-1], f"{hint}_flat"), hint=f"{hint}_vec")
        if vec.shape[0] != data.shape[axis]:
            # one value for every channel: spread it with a Mul (an Expand might stay unfolded)
            ones = emit.const(np.ones(data.shape[axis], dtype=data.dtype.np), f"{hint}_ones")
            vec = emit.op("Mul", vec, ones, hint=f"{hint}_vec")
        return Affine(node, vec, None) if node.op == "Mul" else Affine(node, None, vec)
    return None


def _column(vec: Value, rank: int, axis: int, emit: _Emitter, hint: str) -> Value:
    """The [C] vector reshaped to broadcast along `axis` of a rank-`rank` tensor."""
    dims = [1] * rank
    dims[axis] = -1
    return emit.op("Reshape", vec, emit.shape(dims, f"{hint}_dims"), hint=hint)


def _scaled(v: Value, factor: Value | None, emit: _Emitter, hint: str) -> Value:
    return v if factor is None else emit.op("Mul", v, factor, hint=hint)


def _shifted(v: Value | None, shift: Value | None, emit: _Emitter, hint: str) -> Value | None:
    if shift is None:
        return v
    return shift if v is None else emit.op("Add", v, shift, hint=hint)


# ---- folding into the producer: each returns False when it cannot take this affine map -------------------
def _into_conv(conv: Node, aff: Affine, emit: _Emitter) -> bool:
    w = conv.inputs[1]
    if w.shape is None:
        return False
    hint = w.name
    scale = None if aff.scale is None else _column(aff.scale, len(w.shape), 0, emit, f"{hint}_scale")
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    if bias is not None:
        bias = _scaled(bias, aff.scale, emit, f"{hint}_bias")
    bias = _shifted(bias, aff.shift, emit, f"{hint}_bias_folded")
    conv.inputs = [conv.inputs[0], _scaled(w, scale, emit, f"{hint}_folded")]
    if bias is not None:
        conv.inputs.append(bias)
    return True


def _into_gemm(gemm: Node, aff: Affine, emit: _Emitter) -> bool:
    b = gemm.inputs[1]
    hint = b.name
    if aff.scale is not None:
        columns = _column(aff.scale, 2, 0 if gemm.attrs.get("transB", 0) else 1, emit, f"{hint}_scale")
        gemm.inputs[1] = emit.op("Mul", b, columns, hint=f"{hint}_folded")
    c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
    if c is not None:
        beta = gemm.attrs.get("beta", 1.0)
        if beta != 1.0:
            c = emit.op("Mul", c, emit.const(np.array(beta, dtype=c.dtype.np), f"{hint}_beta"), hint=f"{hint}_c")
        c = _scaled(c, aff.scale, emit, f"{hint}_c_scaled")
    c = _shifted(c, aff.shift, emit, f"{hint}_c_folded")
    if c is not None:
        gemm.inputs[2:] = [c]
        gemm.attrs["beta"] = 1.0
    return True


def _into_matmul(mm: Node, aff: Affine, emit: _Emitter) -> bool:
    """Only the scale: a MatMul has no bias input (the caller leaves the shift as an Add)."""
    w = mm.inputs[1]
    if w.shape is None or len(w.shape) != 2:
        return False
    mm.inputs[1] = emit.op("Mul", w, aff.scale, hint=f"{w.name}_folded")
    return True


@dataclass(frozen=True)
class Producer:
    channel_axis: int                      # the axis of the output a per-channel op may vary along
    weights: tuple[int, ...]               # inputs that must be constant (when present)
    takes_shift: bool                      # whether it has a bias the shift can go into
    fold: Callable[[Node, Affine, _Emitter], bool]


PRODUCERS: dict[str, Producer] = {
    "Conv": Producer(1, (1, 2), True, _into_conv),
    "Gemm": Producer(-1, (1, 2), True, _into_gemm),
    "MatMul": Producer(-1, (1,), False, _into_matmul),
}


def _fold_chain(node: Node, producer: Producer, graph_outputs: set[Value], uses: dict,
                analysis: ConstantAnalysis, emit: _Emitter, removed: set[int]) -> None:
    """Fold the per-channel affine ops that follow `node`, one after the other."""
    while True:
        out = node.outputs[0]
        readers = uses.get(out, [])
        if out in graph_outputs or len(readers) != 1:
            return
        mark = len(emit.nodes)
        aff = as_affine(readers[0][0], out, producer.channel_axis, analysis, emit)
        useful = aff is not None and (producer.takes_shift or aff.scale is not None)
        if not useful or not producer.fold(node, aff, emit):
            del emit.nodes[mark:]  # drop the vectors computed for nothing
            return
        removed.add(id(aff.node))
        result = aff.node.outputs[0]
        if aff.shift is not None and not producer.takes_shift:
            emit.op("Add", out, aff.shift, hint="", out=result)
            return
        node.outputs = [result]
        result.producer = node


def _standalone(bn: Node, analysis: ConstantAnalysis, emit: _Emitter) -> bool:
    x = bn.inputs[0]
    if x.shape is None or len(x.shape) < 2:
        return False
    aff = as_affine(bn, x, 1, analysis, emit)
    if aff is None:
        return False
    hint = bn.outputs[0].name
    scaled = emit.op("Mul", x, _column(aff.scale, len(x.shape) - 1, 0, emit, f"{hint}_scale_c"), hint=f"{hint}_scaled")
    emit.op("Add", scaled, _column(aff.shift, len(x.shape) - 1, 0, emit, f"{hint}_shift_c"), hint="",
            out=bn.outputs[0])
    return True


def fold_batchnorm(graph: Graph, options: dict | None = None) -> Graph:
    """Fold BatchNormalization and per-channel Mul/Add into the Conv/Gemm/MatMul weights before them, and
    turn the other constant-parameter BatchNormalizations into Mul + Add (see the module docstring).
    Option `constant_inputs`: inputs declared constant count as constant weights."""
    analysis = ConstantAnalysis.of(graph, options)
    uses = graph.consumers()
    graph_outputs = set(graph.outputs)
    emit = _Emitter(graph)
    removed: set[int] = set()
    for node in list(graph.nodes):
        producer = PRODUCERS.get(node.op) if not node.domain else None
        if producer is None or id(node) in removed:
            continue
        weights = [node.inputs[i] for i in producer.weights if i < len(node.inputs)]
        if all(w is None or analysis.is_constant(w) for w in weights):
            _fold_chain(node, producer, graph_outputs, uses, analysis, emit, removed)
    for node in graph.nodes:
        if node.op == "BatchNormalization" and not node.domain and id(node) not in removed:
            if len(node.outputs) == 1 and _standalone(node, analysis, emit):
                removed.add(id(node))
    graph.nodes = [n for n in graph.nodes if id(n) not in removed] + emit.nodes
    graph.toposort()
    return graph


__all__ = ["fold_batchnorm", "as_affine", "Affine", "PRODUCERS"]
