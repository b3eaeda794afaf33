"""Which graph nodes the Snippets compiler can take into a fused kernel.

The tokenizer asks `is_supported(node)`: elementwise math on f32 tensors (masks of comparisons may flow
between ops inside a kernel as bool), and reductions and normalisations along the innermost axis, which
the data-flow optimizer decomposes into `ReduceLast` and elementwise ops. Each op listed here has an
emitter in every target.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import boolean, f32
from ..ir.graph import Node

ELEMENTWISE_OPS: frozenset[str] = frozenset({
    # arithmetic
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Neg", "Abs", "Reciprocal", "Sqrt", "Sign",
    "Floor", "Ceil", "Round", "Exp", "Log", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
    "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    # activations
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Softplus", "Softsign", "Mish", "Gelu", "ThresholdedRelu", "Clip",
    # comparisons, logic, selection
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where",
    "IsNaN", "IsInf",
})


REDUCE_OPS: frozenset[str] = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
})
NORMALIZATION_OPS: frozenset[str] = frozenset({"Softmax", "LogSoftmax", "LayerNormalization",
                                              "MeanVarianceNormalization"})


def reduces_innermost_axis(node: Node) -> bool:
    """Reductions and normalisations fuse when they work along the innermost axis only (keeping it as
    a size-1 dim); the kernel then accumulates along its innermost loop."""
    x = node.inputs[0]
    rank = len(x.type.shape) if x is not None and x.type is not None and x.type.shape is not None else None
    if not rank:
        return False
    last = rank - 1

    def is_last(axis) -> bool:
        return isinstance(axis, (int, np.integer)) and int(axis) % rank == last

    a = node.attrs
    if node.op in ("Softmax", "LogSoftmax"):
        return is_last(a.get("axis", -1))
    if node.op == "LayerNormalization":
        return is_last(a.get("axis", -1)) and a.get("stash_type", 1) == 1 and \
            all(v is not None and v.type.shape is not None and len(v.type.shape) == 1 for v in node.inputs[1:])
    if node.op == "MeanVarianceNormalization":
        axes = a.get("axes", [0, 2, 3])
        return len(axes) == 1 and is_last(axes[0])
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    return (a.get("keepdims", 1) == 1 and not a.get("noop_with_empty_axes", 0) and axes is not None
            and axes.is_constant and axes.data.size == 1 and is_last(axes.data.reshape(-1)[0]))


def is_supported(node: Node) -> bool:
    """True when the node is an op the Snippets compiler fuses, on types its kernels handle."""
    if node.domain or len(node.outputs) != 1:
        return False
    if node.op in REDUCE_OPS or node.op in NORMALIZATION_OPS:
        return _f32_only(node, data_inputs=1 if node.op in REDUCE_OPS else None) and reduces_innermost_axis(node)
    if node.op not in ELEMENTWISE_OPS:
        return False
    for v in list(node.inputs) + list(node.outputs):
        if v is None:
            return False  # kernels have no optional inputs
        if v.type is None or v.type.shape is None or v.type.dtype not in (f32, boolean):
            return False
    return True


def _f32_only(node: Node, data_inputs: int | None) -> bool:
    data = node.inputs if data_inputs is None else node.inputs[:data_inputs]
    return all(v is not None and v.type is not None and v.type.shape is not None and v.type.dtype == f32
               for v in list(data) + list(node.outputs))
