"""The Snippets generator: prepare the Linear IR for code emission, bind emitters, produce a kernel.

Preparation is target-independent: register allocation (InitLiveRanges → AssignRegisters, with
InsertRegSpills until the target's registers suffice), tail loops, and loop offset clean-ups. Emission
is the target's: each expression gets the emitter the TargetMachine maps its op to, and the target's
kernel emitter produces the whole function.
"""
from __future__ import annotations

from typing import Callable

from .target_machine import KernelFunction, TargetMachine, TargetError
from .lowered.linear_ir import LinearIR, LinearIRError
from .lowered.passes.assign_registers import AssignRegisters
from .lowered.passes.cleanup_loop_offsets import CleanupLoopOffsets
from .lowered.passes.init_live_ranges import InitLiveRanges
from .lowered.passes.insert_reg_spills import InsertRegSpills
from .lowered.passes.insert_specific_iterations import InsertSpecificIterations
from .lowered.passes.optimize_loop_single_evaluation import OptimizeLoopSingleEvaluation

Observer = Callable[[str, LinearIR], None]


class Generator:
    def __init__(self, target: TargetMachine):
        self.target = target

    def prepare(self, lir: LinearIR, observer: Observer | None = None) -> None:
        def done(name: str) -> None:
            if observer is not None:
                observer(name, lir)

        assign = AssignRegisters(self.target.registers)
        for _ in range(64):
            InitLiveRanges().run(lir)
            done("InitLiveRanges")
            if assign.run(lir):
                done("AssignRegisters")
                break
            InsertRegSpills().run(lir)
            done("InsertRegSpills")
        else:
            raise LinearIRError("register allocation did not converge")
        for p in (InsertSpecificIterations(), CleanupLoopOffsets(), OptimizeLoopSingleEvaluation()):
            p.run(lir)
            done(p.name)

    def generate(self, lir: LinearIR, name: str, observer: Observer | None = None,
                 checked: bool = False) -> KernelFunction:
        self.prepare(lir, observer)
        for e in lir.expressions:
            if not self.target.supports(e.op):
                raise TargetError(f"target {self.target.name} has no emitter for {e.op}")
            e.emitter = self.target.emitter_for(e)
        if checked:
            return self.target.compile_kernel(lir, name, checked=True)
        return self.target.compile_kernel(lir, name)
