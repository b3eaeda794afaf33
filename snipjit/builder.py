"""Build Graph IR from Python or from its text form. From Python: `b.input`, `b.const`, `b.op("Add", x, y)` (or `b.Add(x, y)`), `b.output`.

    b = GraphBuilder()
    x = b.input("x", "f32", ["batch", 384])
    y = b.Relu(b.Mul(x, b.const(np.float32(2.0))))
    b.output(y, "y")
    graph = b.build()

Types are inferred as nodes are added, so a mistake raises at the line that made it. From text:
`parse_graph(text)`, which infers the types the text leaves out.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .ir import text
from .ir.graph import Graph, Node, TensorType, Value
from .ops import infer_node
from .ops.infer_shapes import infer_shapes


def parse_graph(source: str, elided: str | None = None, infer: bool = True) -> Graph:
    """A graph from its text form (`snipjit.ir.text`); values printed without a type get one from shape
    inference unless `infer` is False. `elided="zeros"` accepts constants printed as `<elided>`."""
    return text.parse_graph(source, elided, infer_shapes if infer else None)


class GraphBuilder:
    def __init__(self, name: str = "main"):
        self.graph = Graph(name=name)
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def input(self, name: str, dtype, shape) -> Value:
        v = Value(name, TensorType.of(dtype, shape))
        self.graph.inputs.append(v)
        return v

    def const(self, data, name: str | None = None) -> Value:
        return Value.constant(name or self._name("c"), np.asarray(data))

    def op(self, op: str, *inputs: Value | None, outputs: int = 1, name: str = "", domain: str = "",
           **attrs: Any) -> Value | list[Value]:
        outs = [Value(self._name("t")) for _ in range(outputs)]
        node = Node(op, list(inputs), outs, attrs, name, domain)
        for out, t in zip(outs, infer_node(node)):
            out.type = t
        self.graph.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def output(self, value: Value, name: str | None = None) -> Value:
        if name is not None:
            value.name = name
        self.graph.outputs.append(value)
        return value

    def build(self) -> Graph:
        self.graph.validate()
        return self.graph

    def __getattr__(self, op: str):
        if not op[:1].isupper():
            raise AttributeError(op)
        return lambda *inputs, **kw: self.op(op, *inputs, **kw)
