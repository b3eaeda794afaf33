"""Nodes a pass writes in place of others: each new value and node named after a base name and its place."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType, f32
from ..ir.graph import Node, TensorType, Value


class NodeWriter:
    """`writer(op, inputs, shape)` appends a node computing a new value (float32 unless `dtype` says
    otherwise, or into `out`) to `writer.nodes`; `writer.const(hint, value)` makes a constant."""

    def __init__(self, base: str):
        self.base = base
        self.nodes: list[Node] = []

    def const(self, hint: str, value) -> Value:
        return Value.constant(f"{self.base}/{hint}", np.asarray(value))

    def __call__(self, op: str, inputs: list[Value], shape, attrs: dict | None = None, out: Value | None = None,
                 dtype: DType = f32) -> Value:
        name = f"{self.base}/{op.lower()}{len(self.nodes)}"
        out = out or Value(name, TensorType(dtype, shape))
        self.nodes.append(Node(op, inputs, [out], dict(attrs or {}), name))
        return out
