"""A request (stream): one program's state for one thread — slot storage and the run loop."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ops.registry import OpError
from .feeds import FeedError, check_feeds
from .program import Program


class ExecutionError(RuntimeError):
    """A step failed at run time; the message names the step."""


class Request:
    def __init__(self, program: Program):
        self.program = program
        self._slots: list[np.ndarray | None] = [None] * program.num_slots
        for slot, data in program.constants:
            self._slots[slot] = data

    def run(self, feeds: Mapping[str, object], outputs: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Run the program on `feeds`; returns the outputs in graph order. Arrays given in `outputs`
        (by output name) receive the results and are returned in their place."""
        p = self.program
        arrays, _ = check_feeds(p.graph.inputs, feeds)
        slots = self._slots
        for s, a in zip(p.input_slots, arrays):
            slots[s] = a
        try:
            for step in p.steps:
                try:
                    results = step.kernel([slots[i] if i >= 0 else None for i in step.in_slots])
                except (OpError, FeedError):
                    raise
                except Exception as e:  # name the step instead of a bare NumPy error
                    raise ExecutionError(f"step {step.kind} {step.node.label()} failed: {type(e).__name__}: {e}") from e
                for s, r in zip(step.out_slots, results):
                    slots[s] = r
            result = [slots[s] for s in p.output_slots]
        finally:
            self._release()
        if outputs:
            result = self._write_outputs(result, outputs)
        return result

    def _write_outputs(self, result: list[np.ndarray], outputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        names = [v.name for v in self.program.graph.outputs]
        unknown = set(outputs) - set(names)
        if unknown:
            raise FeedError(f"unknown output(s) {sorted(unknown)}; the model's outputs are {names}")
        for i, name in enumerate(names):
            buf = outputs.get(name)
            if buf is None:
                continue
            if buf.shape != result[i].shape or buf.dtype != result[i].dtype:
                raise FeedError(f"output buffer '{name}' must be {result[i].dtype}{list(result[i].shape)}, "
                                f"got {buf.dtype}{list(buf.shape)}")
            np.copyto(buf, result[i])
            result[i] = buf
        return result

    def _release(self) -> None:
        """Drop references to activations so their memory is freed between runs."""
        keep = {s for s, _ in self.program.constants}
        for i in range(len(self._slots)):
            if i not in keep:
                self._slots[i] = None
