"""The compiled program: one chosen implementation per node, shared by all requests.

Values are numbered into slots; a request holds one array per slot, so running a step is a list lookup
for its inputs, a call, and a store of its outputs. Constants live in the program and are never copied.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..ir.graph import Graph, Node, Value
from .implementations import choose_implementation

Kernel = Callable[[Sequence[np.ndarray | None]], list[np.ndarray]]


@dataclass
class Step:
    kind: str                  # "reference", "snippet", "blas", ...
    ops: list[str]             # source op types this step covers
    node: Node
    kernel: Kernel
    in_slots: list[int]        # -1 for a missing optional input
    out_slots: list[int]

    @property
    def name(self) -> str:
        return self.node.name or self.node.outputs[0].name

    def __repr__(self) -> str:
        return f"Step({self.kind}: {'+'.join(self.ops)} -> {', '.join(o.name for o in self.node.outputs)})"


@dataclass
class Program:
    graph: Graph
    steps: list[Step]
    slots: dict[int, int]                     # id(Value) -> slot
    constants: list[tuple[int, np.ndarray]]   # (slot, data), loaded once into every request
    input_slots: list[int]
    output_slots: list[int]
    num_slots: int = field(default=0)

    @staticmethod
    def build(graph: Graph, options: dict) -> "Program":
        slots: dict[int, int] = {}

        def slot(v: Value | None) -> int:
            if v is None:
                return -1
            return slots.setdefault(id(v), len(slots))

        input_slots = [slot(v) for v in graph.inputs]
        constants = [(slot(v), v.data) for v in graph.constants]
        steps = []
        for node in graph.nodes:
            kind, kernel = choose_implementation(node, options)
            steps.append(Step(kind, covered_ops(node), node, kernel,
                              [slot(v) for v in node.inputs], [slot(v) for v in node.outputs]))
        output_slots = [slot(v) for v in graph.outputs]
        return Program(graph, steps, slots, constants, input_slots, output_slots, len(slots))


def covered_ops(node: Node) -> list[str]:
    """The source op types a node stands for (a fused Subgraph lists its body's ops)."""
    body = node.attrs.get("body") if node.op == "Subgraph" else None
    return [n.op for n in body.nodes] if isinstance(body, Graph) else [node.op]
