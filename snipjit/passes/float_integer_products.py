"""FloatIntegerProducts: a MatMulInteger whose int32 result only becomes float32 runs as a float32 product,
or, for dynamically quantized activations and int8 weights, as one int8 product of the float activations.

Models quantized dynamically (ONNX Runtime's `quantize_dynamic`) compute each linear layer as

    x_q, s, z = DynamicQuantizeLinear(x);  y = Cast(MatMulInteger(x_q, W_q, z, W_z), to=float) * s * W_s

MatMulInteger itself is a NumPy reference kernel, ten times slower than the float product on the
generated GEMM. Where the int32 result is read only by a Cast to float32, it is not observable as an
integer, so the product is rewritten as

    Cast(MatMulInteger(a, b, za, zb), float)  ->  MatMul(Cast(a, float) - Cast(za, float), (b - zb) as float)

with the constant weights centered and converted here (then packed like any MatMul's). A
DynamicQuantizeLinear read only by such products is taken apart too: its scale from ReduceMin/ReduceMax
(per row, then of the rows: parallel kernels) and scalar arithmetic, and instead of its uint8 values, the centered values clip(round(x / s) + z, 0, 255)
- z as float arithmetic that fuses into one generated kernel (a NaN in x then propagates, where the
integer operator leaves NaNs out of the range). The operands are
the same integers; the sums are float32 instead of exact int32, which the Cast would round for sums past
2^24 anyway: the results differ from the integer product's by float32 rounding (about 1e-7 relative per
term summed), far below the quantization step.

Where the activations come from such a DynamicQuantizeLinear and the weights are int8 without a zero
point (`quantize_dynamic`'s default), the product is instead `DynamicQuantizedMatMul(x, s, z, W)`
(`ops.int8`): the int8 kernels quantize x themselves and multiply with integer dot products, exactly
(option `int8=False` keeps the float32 product).
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import boolean, i8
from ..ir.graph import Graph, Node, Value
from ..ops.int8 import DOMAIN as INT8
from .node_writer import NodeWriter

FLOAT = 1   # onnx.TensorProto.FLOAT


def _constant(v: Value | None) -> np.ndarray | None:
    return None if v is None or not v.is_constant else v.data


def float_integer_products(graph: Graph, options: dict | None = None) -> Graph:
    consumers = graph.consumers()
    outputs = set(map(id, graph.outputs))
    products: list[tuple[Node, Node, np.ndarray, np.ndarray | None]] = []
    for node in graph.nodes:
        if node.op != "MatMulInteger" or node.domain or id(node.outputs[0]) in outputs:
            continue
        readers = consumers.get(node.outputs[0], [])
        if len(readers) != 1 or readers[0][0].op != "Cast" or readers[0][0].attrs.get("to") != FLOAT:
            continue
        a, b = node.inputs[:2]
        za = node.inputs[2] if len(node.inputs) > 2 else None
        zb = node.inputs[3] if len(node.inputs) > 3 else None
        weights, weights_zero = _constant(b), _constant(zb)
        if weights is None or (zb is not None and weights_zero is None) or a.type is None or b.type is None or \
                weights.ndim != 2 or (za is not None and za.type is not None and za.type.shape not in ((), (1,))):
            continue   # (constant 2-D weights; a per-tensor zero point for the activations)
        products.append((node, readers[0][0], weights, weights_zero))
    int8 = bool((options or {}).get("int8", True))
    replaced: dict[int, list[Node]] = {}
    centered: dict[int, tuple[Value, Value]] = {}   # id of a DynamicQuantizeLinear taken apart -> (centered values, z)
    taken = {id(node) for node, *_ in products}
    for node, cast, weights, weights_zero in products:
        dql = node.inputs[0].producer
        if dql is not None and id(dql) not in centered and _only_read_by(dql, taken, consumers, outputs) and \
                len(node.inputs) > 2 and node.inputs[2] is dql.outputs[2]:
            replaced[id(dql)], centered[id(dql)] = _centered_dynamic_quantize(dql)
        found = centered.get(id(dql)) if dql is not None else None
        replaced[id(node)] = []
        if found is not None and int8 and node.inputs[1].dtype == i8 and not (weights_zero is not None and
                                                                             weights_zero.any()):
            inputs = [dql.inputs[0], dql.outputs[1], found[1], node.inputs[1]]
            replaced[id(cast)] = [Node("DynamicQuantizedMatMul", inputs, [cast.outputs[0]], {}, cast.name, INT8)]
        else:
            replaced[id(cast)] = _float_product(node, cast, weights, weights_zero, found and found[0])
    if replaced:
        graph.nodes = [m for n in graph.nodes for m in replaced.get(id(n), [n])]
        graph.remove_dead_nodes()   # (centered values no float product reads)
    return graph


def _only_read_by(dql: Node, products: set[int], consumers, outputs: set[int]) -> bool:
    """Whether `dql` is a DynamicQuantizeLinear whose quantized values and zero point only the
    products read (its scale may go anywhere)."""
    if dql.op != "DynamicQuantizeLinear" or dql.domain or len(dql.outputs) != 3:
        return False
    return all(id(v) not in outputs and all(id(n) in products for n, _ in consumers.get(v, []))
               for v in (dql.outputs[0], dql.outputs[2]))


def _centered_dynamic_quantize(dql: Node) -> tuple[list[Node], tuple[Value, Value]]:
    """DynamicQuantizeLinear(x) as float arithmetic: its scale (into its own output value) and, instead of
    the quantized values, those values minus the zero point, (clip(round(x / s) + z, 0, 255) - z), which
    the float products read."""
    x, scale = dql.inputs[0], dql.outputs[1]
    step = NodeWriter(scale.name)
    zero, one = step.const("zero", np.float32(0)), step.const("one", np.float32(1))
    lo, hi = (step(op, [value, zero], (1, 1)) for op, value in zip(("Min", "Max"), _extremes(step, x)))
    width = step("Sub", [hi, lo], (1, 1))
    empty = step("Equal", [width, zero], (1, 1), dtype=boolean)
    wide = step("Where", [empty, one, step("Div", [width, step.const("levels", np.float32(255))], (1, 1))], (1, 1))
    step("Reshape", [wide, step.const("scalar", np.zeros(0, np.int64))], (), out=scale)
    top = step.const("top", np.float32(255))
    z = step("Round", [step("Clip", [step("Sub", [zero, step("Div", [lo, wide], (1, 1))], (1, 1)), zero, top],
                            (1, 1))], (1, 1))
    z = step("Reshape", [z, step.const("scalar_zero", np.zeros(0, np.int64))], ())   # (keeps x's rank below)
    q = step("Clip", [step("Add", [step("Round", [step("Div", [x, scale], x.type.shape)], x.type.shape), z],
                           x.type.shape), zero, top], x.type.shape)
    return step.nodes, (step("Sub", [q, z], x.type.shape), z)


def _extremes(step: NodeWriter, x: Value) -> tuple[Value, Value]:
    """x's minimum and maximum as [1, 1] values: along x's last axis (a parallel kernel, which the kernel
    making x can take in), then of those (a short one)."""
    last = step.const("last", np.array([-1], np.int64))
    flat = step.const("flat", np.array([1, -1], np.int64))
    shape = x.type.shape
    if len(shape) < 2:
        row = step("Reshape", [x, flat], (1, None))
        return tuple(step(op, [row, last], (1, 1), {"keepdims": 1}) for op in ("ReduceMin", "ReduceMax"))
    per_row = tuple(shape[:-1]) + (1,)
    return tuple(step(op, [step("Reshape", [step(op, [x, last], per_row, {"keepdims": 1}), flat], (1, None)),
                           last], (1, 1), {"keepdims": 1}) for op in ("ReduceMin", "ReduceMax"))


def _float_product(node: Node, cast: Node, weights: np.ndarray, weights_zero: np.ndarray | None,
                   centered: Value | None) -> list[Node]:
    """The float product in place of `cast`; `centered`: the activations minus their zero point, when
    already computed (a DynamicQuantizeLinear taken apart), else from the integers here."""
    a = node.inputs[0]
    za = node.inputs[2] if len(node.inputs) > 2 else None
    step = NodeWriter(cast.outputs[0].name)
    levels = weights.astype(np.int32) - (0 if weights_zero is None else weights_zero.astype(np.int32))
    b = step.const("weights", np.ascontiguousarray(levels.astype(np.float32)))
    x = centered
    if x is None:
        x = step("Cast", [a], a.type.shape, {"to": FLOAT})
        if za is not None:
            x = step("Sub", [x, step("Cast", [za], za.type.shape, {"to": FLOAT})], a.type.shape)
    step("MatMul", [x, b], None, out=cast.outputs[0])
    return step.nodes
