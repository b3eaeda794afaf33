"""`Expression`: one operation of the Linear IR, with its ports, descriptors, loops and emitter."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ...ir.graph import Node
from .port import ExpressionPort, PortConnector, PortDescriptor, Reg

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
