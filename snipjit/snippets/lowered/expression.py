"""`Expression`: one operation of the Linear IR, with its ports, descriptors, loops and emitter; and the ports
themselves: how an expression sees its data (`PortDescriptor`), which port of which expression
(`ExpressionPort`), and the edges between them (`PortConnector`)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ...ir.graph import Node

@dataclass(frozen=True, order=True)
class Reg:
    """A register: `kind` is its class ("gpr" for pointers and counters, "vec" for data), `index` is
    abstract until AssignRegisters makes it physical."""
    kind: str
    index: int

    def __str__(self) -> str:
        return f"{self.kind}{self.index}"


@dataclass
class PortDescriptor:
    """How an expression interprets the data on one port.

    shape: the tensor shape (rank-aligned master-shape dims; 1 where the port broadcasts);
    layout: the order of dims in memory (identity for planar data);
    subtensor: the part of the tensor one emitter invocation processes (e.g. (vector_lanes,));
    reg: the register the value lives in, once assigned.
    """
    shape: tuple
    layout: tuple[int, ...] = ()
    subtensor: tuple = ()
    reg: Reg | None = None

    def __post_init__(self):
        if not self.layout:
            self.layout = tuple(range(len(self.shape)))

    def clone(self) -> "PortDescriptor":
        return PortDescriptor(self.shape, self.layout, self.subtensor, self.reg)


@dataclass(frozen=True)
class ExpressionPort:
    """One input or output port of an expression, made on demand."""
    expr: Expression
    type: str   # "in" or "out"
    index: int

    @property
    def descriptor(self) -> PortDescriptor:
        descs = self.expr.in_descs if self.type == "in" else self.expr.out_descs
        return descs[self.index]

    @property
    def connector(self) -> "PortConnector":
        conns = self.expr.inputs if self.type == "in" else self.expr.outputs
        return conns[self.index]

    def __hash__(self) -> int:
        return hash((id(self.expr), self.type, self.index))

    def __eq__(self, other) -> bool:
        return (isinstance(other, ExpressionPort) and self.expr is other.expr and self.type == other.type
                and self.index == other.index)

    def __repr__(self) -> str:
        return f"{self.expr.name}.{self.type}{self.index}"


@dataclass(eq=False)
class PortConnector:
    """The edge from one output port to every input port that reads it."""
    source: ExpressionPort
    consumers: list[ExpressionPort] = field(default_factory=list)

    def add_consumer(self, port: ExpressionPort) -> None:
        if port not in self.consumers:
            self.consumers.append(port)

    def remove_consumer(self, port: ExpressionPort) -> None:
        self.consumers = [c for c in self.consumers if c != port]


_ids = itertools.count()


@dataclass(eq=False)
class Expression:
    op: str
    attrs: dict[str, Any] = field(default_factory=dict)
    inputs: list[PortConnector] = field(default_factory=list)
    outputs: list[PortConnector] = field(default_factory=list)
    in_descs: list[PortDescriptor] = field(default_factory=list)
    out_descs: list[PortDescriptor] = field(default_factory=list)
    loop_ids: list[int] = field(default_factory=list)   # enclosing loops, outermost first
    node: Node | None = None                            # the body node it was made from
    dtype: str = "f32"                                  # element type of its outputs
    live_regs: set[Reg] = field(default_factory=set)    # registers live across it (InitLiveRanges)
    emitter: Any = None
    uid: int = field(default_factory=lambda: next(_ids))

    @property
    def name(self) -> str:
        return f"{self.op}#{self.uid}"

    def input_port(self, i: int) -> ExpressionPort:
        return ExpressionPort(self, "in", i)

    def output_port(self, i: int) -> ExpressionPort:
        return ExpressionPort(self, "out", i)

    def input_source(self, i: int) -> "Expression":
        return self.inputs[i].source.expr

    def consumers(self, i: int = 0) -> list[ExpressionPort]:
        return list(self.outputs[i].consumers)

    @property
    def in_regs(self) -> list[Reg | None]:
        return [d.reg for d in self.in_descs]

    @property
    def out_regs(self) -> list[Reg | None]:
        return [d.reg for d in self.out_descs]

    def __repr__(self) -> str:
        return f"Expression({self.name})"
