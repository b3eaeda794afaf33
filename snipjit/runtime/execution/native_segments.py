"""Consecutive kernel steps of a bound plan as one native call.

Between two steps the run loop executes Python: the step's argument list, its launcher, a ctypes call.
Warm, that is a few microseconds; but a large kernel streams its data through the caches, and right after
one the interpreter's code and objects are cold again (measured on Zen 4: a 4 µs step took 40 µs after a
GEMM of GPT-2's MLP). So a run of steps that are each one launch of a compiled kernel (`NativeStep`) on
memory that stays put for the bound plan — arena slots and constants, not the feeds, the caller's output
buffers or views of them — goes to the native pool as one `JobSequence`: one call from Python for the
whole run of steps. Steps are joined in plan order and run in it, so nothing about their results changes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..parallel.native_threads import JobSequence, get_native_pool, supported
from ..implementations.base import NativeStep

MIN_STEPS = 2   # a single step gains nothing from going through the sequence


@dataclass
class NativeSegment:
    """Steps run as one native call; `steps` keep their launches (the memory the calls point into) alive;
    `calls` are the request's calls they stand for, one per step."""
    steps: list[NativeStep]
    jobs: JobSequence
    calls: list[tuple]

    def __call__(self) -> None:
        self.jobs.run()
        self._count()

    def timed(self) -> list[float]:
        """Run the steps as `__call__` does and return each one's seconds: the whole run's wall time, split
        in proportion to the cycles the CPU counted between the steps."""
        start = time.perf_counter()
        shares = self.jobs.run_timed()
        elapsed = time.perf_counter() - start
        self._count()
        per_step, job = [], 0
        for step in self.steps:
            launches = len(step.launches)
            per_step.append(elapsed * sum(shares[job:job + launches]))
            job += launches
        return per_step

    def _count(self) -> None:
        for step in self.steps:
            if step.counted is not None:
                step.counted.calls += 1


def join_native_steps(calls: list[tuple], slots: list, changing: set[int]) -> list[tuple]:
    """`calls` (the request's (mode, kernel, in_slots, out_slots, step, shapes) tuples) with each run of at
    least MIN_STEPS joinable steps replaced by one ("segment", NativeSegment, ...) call. A step joins when
    it is a prepared launch whose arrays are all bound now and not in `changing` (slots that take new
    arrays per run), and whose launcher gives a `NativeStep` for them."""
    if not supported():
        return calls
    pool = get_native_pool()
    joined: list[tuple] = []
    run: list[tuple[tuple, NativeStep]] = []

    def flush() -> None:
        if len(run) >= MIN_STEPS:
            steps = [native for _, native in run]
            try:
                calls = [call for step in steps for call in step.native_calls]
                segment = NativeSegment(steps, JobSequence(calls, pool, steps), [call for call, _ in run])
            except ValueError:   # (launches made for another pool)
                joined.extend(call for call, _ in run)
            else:
                first = run[0][0]
                joined.append(("segment", segment, first[2], first[3], first[4], first[5]))
        else:
            joined.extend(call for call, _ in run)
        run.clear()

    for call in calls:
        native = _native_step(call, slots, changing)
        if native is None:
            flush()
            joined.append(call)
        else:
            run.append((call, native))
    flush()
    return joined


def _native_step(call: tuple, slots: list, changing: set[int]) -> NativeStep | None:
    mode, launcher, ins, outs = call[:4]
    args = list(ins) + list(outs)
    if mode != "launch" or not hasattr(launcher, "native_step") or any(s < 0 for s in outs) or \
            any(s >= 0 and (s in changing or slots[s] is None) for s in args):
        return None
    return launcher.native_step([slots[s] if s >= 0 else None for s in args])   # (s < 0: an absent input)
