"""Which graph nodes the Snippets compiler can take into a fused kernel.

The tokenizer asks `is_supported(node)`. Today that is elementwise math on f32 tensors (masks of
comparisons may flow between ops inside a kernel as bool); reductions over the last axis join with the
reduction work. Each op listed here has an emitter in every target.
"""
from __future__ import annotations

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


def is_supported(node: Node) -> bool:
    """True when the node is an op the Snippets compiler fuses, on types its kernels handle."""
    if node.domain or node.op not in ELEMENTWISE_OPS or len(node.outputs) != 1:
        return False
    for v in list(node.inputs) + list(node.outputs):
        if v is None:
            return False  # kernels have no optional inputs
        if v.type is None or v.type.shape is None or v.type.dtype not in (f32, boolean):
            return False
    return True
