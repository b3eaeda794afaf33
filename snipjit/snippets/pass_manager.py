"""Pass bases and the pipeline both optimizers use: ordered passes a backend can extend at named
positions (the guide's positioned passes)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.graph import Graph


class BodyPass:
    """A pass over a Subgraph body (Graph IR). `run` edits the graph in place; returns True if it changed."""
    name: str = ""

    def run(self, body: Graph) -> bool:
        raise NotImplementedError


class LinearIRPass:
    """A pass over the Linear IR. `run` edits it in place; returns True if it changed."""
    name: str = ""

    def run(self, lir) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class PassPosition:
    """Where a positioned pass goes: before or after the pass named `anchor` ("" = pipeline start/end)."""
    anchor: str
    place: str = "after"   # "before" | "after"

    @staticmethod
    def after(anchor: str) -> "PassPosition":
        return PassPosition(anchor, "after")

    @staticmethod
    def before(anchor: str) -> "PassPosition":
        return PassPosition(anchor, "before")


@dataclass(frozen=True)
class PositionedPass:
    position: PassPosition
    make: Callable[[], object]   # a factory, so each compilation gets a fresh pass object


class PassPipeline:
    """An ordered list of passes with insertion by position, shared by the data-flow and control-flow
    pipelines. `run_all` calls `observer(name, ir)` after each pass (IR dumps use it)."""

    def __init__(self, passes: list):
        self.passes = list(passes)

    def insert(self, positioned: PositionedPass) -> None:
        pos = positioned.position
        names = [p.name for p in self.passes]
        if pos.anchor == "":
            index = 0 if pos.place == "before" else len(self.passes)
        elif pos.anchor in names:
            index = names.index(pos.anchor) + (1 if pos.place == "after" else 0)
        else:
            raise ValueError(f"no pass named {pos.anchor!r} to place a pass {pos.place}; passes: {names}")
        self.passes.insert(index, positioned.make())

    def run_all(self, ir, observer: Callable[[str, object], None] | None = None) -> None:
        for p in self.passes:
            p.run(ir)
            if observer is not None:
                observer(p.name, ir)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.passes]
