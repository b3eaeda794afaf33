"""Per-step performance counters: calls, time, bytes moved and achieved bandwidth.

`CompiledModel.profile(feeds, runs=10)` runs the model as a request does and times every step: a step of
a native segment (kernel steps run as one native call) by the CPU's cycle counter read between the steps,
so nothing runs between them that would not otherwise, the others with a timer around the call. It returns
a `Profile`, whose table lists each step's implementation, the ops it covers, its calls, total and mean
time, the bytes it reads and writes, and GB/s — next to the whole inference time measured the same
runs, so the steps can be checked to account for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StepCounters:
    index: int
    kind: str
    ops: str
    calls: int = 0
    seconds: float = 0.0
    bytes: int = 0

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds else 0.0


@dataclass
class Profile:
    steps: list[StepCounters] = field(default_factory=list)
    runs: int = 0
    total_seconds: float = 0.0     # whole inferences, measured around `run`

    @property
    def step_seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    def table(self, top: int | None = None) -> str:
        rows = sorted(self.steps, key=lambda s: -s.seconds)[:top]
        per_run = self.total_seconds / max(self.runs, 1)
        lines = [f"{'step':>5} {'kind':<10} {'ops':<36} {'calls':>6} {'total ms':>9} {'mean us':>9} "
                 f"{'MB':>8} {'GB/s':>6} {'share':>6}"]
        for s in rows:
            mean = s.seconds / max(s.calls, 1)
            share = s.seconds / self.total_seconds if self.total_seconds else 0.0
            lines.append(f"{s.index:>5} {s.kind:<10} {s.ops[:36]:<36} {s.calls:>6} {s.seconds * 1e3:>9.3f} "
                         f"{mean * 1e6:>9.1f} {s.bytes / max(s.calls, 1) / 1e6:>8.2f} {s.gbps:>6.1f} {share:>6.1%}")
        lines.append(f"{self.runs} runs: {per_run * 1e3:.3f} ms per inference; steps account for "
                     f"{self.step_seconds / self.total_seconds:.1%} of it" if self.total_seconds else "no runs")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
