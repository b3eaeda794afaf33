"""Loop descriptions of the Linear IR: `LoopPort`, `LoopInfo` and the `LoopManager` that owns them."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..symbolic import Sym
from .expression import ExpressionPort


@dataclass
class LoopPort:
    """A memory port crossing a loop boundary, with its data-pointer arithmetic (in elements).

    ptr_increment is added after every iteration (per unit of the loop's increment); the
    finalization_offset is added once after the loop ends. `is_incremented` is False for ports that
    broadcast along the loop's dim (or whose pointer another port already shifts)."""
    port: ExpressionPort
    is_incremented: bool = True
    ptr_increment: Sym = field(default_factory=Sym)
    finalization_offset: Sym = field(default_factory=Sym)
    data_size: int = 4


@dataclass
class LoopInfo:
    """A loop over one dim of the master shape: `work_amount` elements, `increment` per iteration."""
    dim: int
    work_amount: Sym
    increment: int
    entry_points: list[LoopPort] = field(default_factory=list)
    exit_points: list[LoopPort] = field(default_factory=list)
    evaluate_once: bool = False       # OptimizeLoopSingleEvaluation: body runs at most once, no branch back
    is_tail: bool = False             # InsertSpecificIterations: the remainder iteration of a split loop
    parent_id: int | None = None      # the loop this one was split from (tails) or None

    @property
    def ports(self) -> list[LoopPort]:
        return self.entry_points + self.exit_points

    def clone(self) -> "LoopInfo":
        return replace(self, entry_points=[replace(p) for p in self.entry_points],
                       exit_points=[replace(p) for p in self.exit_points])


class LoopManager:
    def __init__(self):
        self.loops: dict[int, LoopInfo] = {}
        self._next = 0

    def add(self, info: LoopInfo) -> int:
        loop_id = self._next
        self._next += 1
        self.loops[loop_id] = info
        return loop_id

    def __getitem__(self, loop_id: int) -> LoopInfo:
        return self.loops[loop_id]

    def remove(self, loop_id: int) -> None:
        del self.loops[loop_id]
