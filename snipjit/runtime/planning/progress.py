"""Compile progress on a terminal: shown only when stderr is a terminal and the work takes over a
second, so scripts and logs stay clean."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, delay: float = 1.0, stream=None):
        self.total = total
        self.label = label
        self.delay = delay
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.shown = False
        self.done = 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not getattr(self.stream, "isatty", lambda: False)():
            return
        if self.shown or time.perf_counter() - self.start > self.delay:
            self.shown = True
            self.stream.write(f"\r{self.label} {self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write(f"\r{self.label} {self.done}/{self.total} in "
                              f"{time.perf_counter() - self.start:.1f} s\n")
            self.stream.flush()
