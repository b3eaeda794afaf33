"""A request (stream): one program's state for one thread — its arena and the run loop.

Binding a resolved plan to a request allocates the request's arena and turns every planned slot into an
array view of it, once per input-shape signature. A run then fills the input slots, gives the graph
outputs their buffers (the caller's, or last run's when the caller let go of them, or new ones), and
calls each step's kernel with prepared argument lists.
"""
from __future__ import annotations

import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ...ir.graph import TensorType
from ...ops.registry import OpError
from ..parallel import blas_threads
from ..caches.kernel_cache import recording
from ..parallel.native_threads import existing_native_pool
from ..parallel.workers import Workers, running_on
from ..errors import ExecutionError
from .feeds import FeedChecker, FeedError
from ...memory.solver import aligned_array, aligned_empty
from .native_segments import join_native_steps
from .profile import Profile, StepCounters
from ..planning.program import Program, ResolvedPlan

@dataclass
class BoundPlan:
    plan: ResolvedPlan
    arena: np.ndarray
    slots: list                                  # the request's slot array for this signature
    calls: list[tuple]                           # (mode, kernel, in_slots, out_slots, step, out_shapes)
    numpy_steps: bool = True                     # some step may run NumPy (needs its BLAS/FP guards)
    joined: list[tuple] | None = None            # `calls` with runs of kernel steps as one native call each
    views_of_escaping: list[int] = field(default_factory=list)   # slots viewing an output buffer of the run

class Request:
    """One stream of a program: runs on the calling thread, plus `workers`' threads when it has its own
    (else the process's pools); one run at a time."""

    def __init__(self, program: Program, runtime_constants=None, workers: Workers | None = None):
        self.program = program
        self.workers = workers
        if workers is not None:
            weakref.finalize(self, workers.close)
        self.runtime_constants = runtime_constants
        self._entry_inputs = {v.name for v in program.graph.inputs}
        self._check_feeds = FeedChecker(program.graph.inputs)
        self.profile: Profile | None = None   # set to collect per-step counters
        self.join_steps = True                # runs of kernel steps as one native call (`native_segments`)
        self._bound: dict[tuple, BoundPlan] = {}
        self._last_outputs: dict[int, np.ndarray] = {}
        self._output_names = [v.name for v in program.graph.outputs]

    @property
    def arena_bytes(self) -> int:
        return sum(b.arena.nbytes for b in self._bound.values())

    def run(self, feeds: Mapping[str, object], outputs: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Run the program on `feeds`; returns the outputs in graph order. Arrays given in `outputs`
        (by output name) receive the results and are returned in their place."""
        # kernels chosen while running belong to the program (its artifact); they run on the request's
        # workers, else on those of the request around it (a control-flow body's), else the process's
        with recording(self.program.kernels):
            if self.workers is None:
                return self._run(feeds, outputs)
            with running_on(self.workers):
                return self._run(feeds, outputs)

    def _run(self, feeds: Mapping[str, object], outputs: Mapping[str, np.ndarray] | None) -> list[np.ndarray]:
        p = self.program
        pool = existing_native_pool()
        if pool is not None:   # (its workers wake while the feeds are checked)
            pool.wake()
        if self.runtime_constants is not None:
            feeds = self.runtime_constants.complete(feeds, self._entry_inputs)
        arrays = self._check_feeds(feeds)
        key = tuple(a.shape for a in arrays)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = self._bind(arrays)
        slots = bound.slots
        for s, a in zip(p.input_slots, arrays):
            slots[s] = a
        given = self._caller_buffers(outputs, bound.plan, arrays)
        for s, t in bound.plan.escaping.items():
            slots[s] = given[s] if s in given else self._recycle(s, t)
        try:
            self._execute(bound)
            result = [slots[s] if bound.plan.owns(s) or s in p.input_slots
                      else np.array(slots[s]) for s in p.output_slots]   # constants: hand out copies
            # every escaping buffer, not only the outputs': an output that is a view of one (a Reshape of
            # a network's pooled features) recycles it too, so the step writing it keeps its prepared launch
            escaped = {s: slots[s] for s in bound.plan.escaping}
        finally:
            for s in p.input_slots:
                slots[s] = None
            for s in bound.plan.escaping:
                slots[s] = None
            for s in bound.views_of_escaping:   # (made again each run)
                slots[s] = None
        self._last_outputs.update(escaped)
        if outputs:
            result = self._copy_into_caller(result, outputs)
        return result

    def _execute(self, bound: BoundPlan) -> None:
        if self.profile is not None:
            with blas_threads.single_threaded(), np.errstate(all="ignore"):
                self._execute_profiled(bound)
        elif not bound.numpy_steps:   # generated kernels only: no BLAS threads or FP flags to guard
            for call in bound.joined:
                self._call(bound.slots, *call)
        else:
            # one BLAS thread per request; inf/NaN results are values here, not errors
            with blas_threads.single_threaded(), np.errstate(all="ignore"):
                for call in bound.joined:
                    self._call(bound.slots, *call)

    def _execute_profiled(self, bound: BoundPlan) -> None:
        """Run the steps as `_execute` does, timing each: a step of a native segment by the cycles counted
        between the segment's steps (no Python between them, as when not profiled), the others around
        their call."""
        counters = {c.index: c for c in self.profile.steps}
        index = {id(s): i for i, s in enumerate(self.program.steps)}

        def count(call: tuple, seconds: float) -> None:
            step = call[4]
            c = counters.get(index[id(step)])
            if c is None:
                c = counters[index[id(step)]] = StepCounters(index[id(step)], step.kind, "+".join(step.ops))
                self.profile.steps.append(c)
            c.calls += 1
            c.seconds += seconds
            c.bytes += sum(bound.slots[i].nbytes for i in call[2] + call[3]
                           if i >= 0 and isinstance(bound.slots[i], np.ndarray))

        for call in bound.joined:
            if call[0] == "segment":
                segment = call[1]
                for step_call, seconds in zip(segment.calls, segment.timed()):
                    count(step_call, seconds)
                continue
            start = time.perf_counter()
            self._call(bound.slots, *call)
            count(call, time.perf_counter() - start)

    @staticmethod
    def _call(slots: list, mode: str, kernel, ins, outs, step, shapes) -> None:
        args = [slots[i] if i >= 0 else None for i in ins]
        try:
            if mode == "segment":   # (its steps' arguments are bound in it)
                kernel()
            elif mode == "launch":
                args += [slots[o] for o in outs]
                kernel(args)
            elif mode == "into":
                kernel.run_into(args, [slots[o] for o in outs])
            elif mode == "view":
                slots[outs[0]] = args[0].reshape(shapes[0])
            else:
                for o, r in zip(outs, kernel(args)):
                    slots[o] = r
        except (OpError, FeedError, ExecutionError):
            raise
        except Exception as e:  # name the step instead of a bare NumPy error
            raise ExecutionError(f"step {step.kind} {step.node.label()} failed: {type(e).__name__}: {e}") from e

    def _bind(self, arrays: list[np.ndarray]) -> BoundPlan:
        p = self.program
        plan = p.plan_for([TensorType.of(a.dtype, a.shape) for a in arrays])
        arena = aligned_empty(plan.memory.arena_size)
        slots: list = [None] * p.num_slots
        for s, data in p.constants:
            slots[s] = data
        for s, v in plan.resolution.values.items():
            slots[s] = v
        for s, (offset, t) in plan.arena_slots.items():
            n = int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize
            slots[s] = arena[offset:offset + n].view(t.dtype.np).reshape(t.shape)
        types = plan.resolution.types
        for s, r in plan.inplace_of.items():   # in step order: the input's memory is bound before
            slots[s] = slots[r].reshape(types[s].shape)
        # written straight into a Concat's output, which may be a slice of another's: the outer ones first
        for s, (whole, start, end) in reversed(plan.channel_slices.items()):
            slots[s] = slots[whole][..., start:end]
        calls = []
        for step, mode in zip(p.steps, plan.modes):
            if mode == "skip":
                continue
            if mode == "view" and all(slots[i] is not None for i in step.in_slots if i >= 0) and \
                    step.in_slots[0] not in plan.escaping and step.in_slots[0] not in p.input_slots:
                slots[step.out_slots[0]] = slots[step.in_slots[0]].reshape(types[step.out_slots[0]].shape)
                continue   # a view of arena memory: made once here, nothing to do per run
            shapes = [types[s].shape if types[s] is not None else None for s in step.out_slots]
            out_mode = "into" if mode == "into" or (mode == "call" and all(s in plan.escaping and
                                                                           types[s] is not None
                                                                           for s in step.out_slots)) else mode
            launch = self._prebind(step, out_mode, slots, plan, types)
            if launch is not None:
                calls.append(("launch", launch, step.in_slots, step.out_slots, step, shapes))
            else:
                calls.append((out_mode, step.kernel, step.in_slots, step.out_slots, step, shapes))
        changing = set(p.input_slots) | set(plan.escaping)
        views = [s for s in range(p.num_slots) if s not in plan.escaping and plan.owns(s)]
        return BoundPlan(plan, arena, slots, calls, numpy_steps=any(c[0] not in ("launch", "view") for c in calls),
                         joined=join_native_steps(calls, slots, changing) if self.join_steps else calls,
                         views_of_escaping=views)

    def _prebind(self, step, mode: str, slots: list, plan: ResolvedPlan, types):
        """A launcher with argument arrays prepared once, for kernels that offer one (`bind`)."""
        args = step.in_slots + step.out_slots
        if mode != "into" or not step.kernel.binds or any(s < 0 or types[s] is None for s in step.out_slots) \
                or any(s >= 0 and types[s] is None for s in step.in_slots):
            return None
        changing = set(self.program.input_slots) | set(plan.escaping)
        fixed = {i: slots[s] for i, s in enumerate(args)   # (a slice of a Concat's output read where it is too)
                 if s >= 0 and s not in changing and isinstance(slots[s], np.ndarray)
                 and step.kernel.reads_in_place(i, slots[s])}
        fixed.update((i, None) for i, s in enumerate(step.in_slots) if s < 0)   # (absent optional inputs)
        return step.kernel.bind([types[s].shape if s >= 0 else None for s in step.in_slots], fixed,
                                len(step.out_slots))

    def _recycle(self, slot: int, t: TensorType | None) -> np.ndarray | None:
        """Last run's output buffer when nobody else holds it or a view of it any more, else a new one,
        starting on a cache line (NumPy's own start 16 bytes past one: a kernel storing vectors there
        splits half of its stores over two lines, 1.5x slower on a product of K=64)."""
        if t is None:
            return None
        old = self._last_outputs.get(slot)
        # (a view of the buffer holds the memory's owner, the buffer's base, not the buffer itself)
        if old is not None and sys.getrefcount(old) <= 3 and (old.base is None or sys.getrefcount(old.base) <= 2) \
                and old.shape == t.shape and old.dtype == t.dtype.np:
            return old
        if t.dtype.np.hasobject:
            return np.empty(t.shape, t.dtype.np)
        return aligned_array(t.shape, t.dtype.np)

    def _caller_buffers(self, outputs: Mapping[str, np.ndarray] | None, plan: ResolvedPlan,
                        feeds: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
        """Caller buffers that outputs can be computed into directly (others are copied at the end):
        not one that may overlap a feed, which the steps would overwrite while they still read it."""
        if not outputs:
            return {}
        unknown = set(outputs) - set(self._output_names)
        if unknown:
            raise FeedError(f"unknown output(s) {sorted(unknown)}; the model's outputs are {self._output_names}")
        given = {}
        for name, s in zip(self._output_names, self.program.output_slots):
            buf, t = outputs.get(name), plan.escaping.get(s)
            if buf is None or t is None:
                continue
            if not isinstance(buf, np.ndarray) or buf.shape != t.shape or buf.dtype != t.dtype.np:
                raise FeedError(f"output buffer '{name}' must be {t.dtype.np}{list(t.shape)}, got "
                                f"{getattr(buf, 'dtype', type(buf).__name__)}{list(getattr(buf, 'shape', []))}")
            if buf.flags.c_contiguous and buf.flags.writeable and \
                    not any(np.may_share_memory(buf, a) for a in feeds):
                given[s] = buf
        return given

    def _copy_into_caller(self, result: list[np.ndarray], outputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        for i, name in enumerate(self._output_names):
            buf = outputs.get(name)
            if buf is None or buf is result[i]:
                continue
            if not isinstance(buf, np.ndarray) or buf.shape != result[i].shape or buf.dtype != result[i].dtype:
                raise FeedError(f"output buffer '{name}' must be {result[i].dtype}{list(result[i].shape)}, got "
                                f"{getattr(buf, 'dtype', type(buf).__name__)}{list(getattr(buf, 'shape', []))}")
            np.copyto(buf, result[i])
            result[i] = buf
        return result
