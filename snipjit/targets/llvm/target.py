"""The LLVM target machine: host-CPU vectors, emitters per op, JIT through llvmlite."""
from __future__ import annotations

from ...snippets.target_machine import Emitter, KernelFunction, TargetMachine
from . import jit
from .objects import compile_to_object, load_object
from .emitters import (COMPUTE, AccumulateEmitter, BroadcastMoveEmitter, ComputeEmitter, EqualEmitter,
                       FillEmitter, HorizonEmitter, LoadEmitter, NopEmitter, ReloadEmitter, ScalarEmitter, SpillEmitter,
                       StoreEmitter)
from .brgemm import BrgemmCopyBEmitter, BrgemmEmitter
from .kernel_emitter import LLVMKernelEmitter
from .loop_emitters import LoopBeginEmitter, LoopEndEmitter

_CONTROL: dict[str, Emitter] = {
    "Parameter": NopEmitter(), "Result": NopEmitter(), "Scalar": ScalarEmitter(),
    "Load": LoadEmitter(), "BroadcastLoad": LoadEmitter(broadcast=True), "Store": StoreEmitter(),
    "BroadcastMove": BroadcastMoveEmitter(), "LoopBegin": LoopBeginEmitter(), "LoopEnd": LoopEndEmitter(),
    "Spill": SpillEmitter(), "Reload": ReloadEmitter(), "Buffer": NopEmitter(),
    "Fill": FillEmitter(), "Accumulate": AccumulateEmitter(), "Horizon": HorizonEmitter(),
    "Brgemm": BrgemmEmitter(), "BrgemmCopyB": BrgemmCopyBEmitter(),
}
_COMPUTE: dict[str, Emitter] = {**{op: ComputeEmitter(fn) for op, fn in COMPUTE.items()}, "Equal": EqualEmitter()}


class LLVMTarget(TargetMachine):
    name = "llvm"
    supports_checked = True

    def __init__(self, vector_lanes: int | None = None):
        self._fixed_lanes = vector_lanes

    @property
    def host(self) -> jit.HostInfo:
        """The CPU and ISA level code is generated for (follows SNIPJIT_ISA)."""
        return jit.host()

    @property
    def vector_lanes(self) -> int:
        return self._fixed_lanes or self.host.level.f32_lanes

    @property
    def registers(self) -> dict[str, int]:
        return {"vec": self.host.level.vector_registers, "gpr": 64}

    def supports(self, op: str) -> bool:
        return op in _CONTROL or op in _COMPUTE

    def emitter_for(self, expr) -> Emitter:
        return _CONTROL.get(expr.op) or _COMPUTE[expr.op]

    def compile_kernel(self, lir, name: str, checked: bool = False) -> KernelFunction:
        module = LLVMKernelEmitter(lir, self.vector_lanes, name, checked).emit()
        data, optimized = compile_to_object(module, opt_level(lir))
        kernel = self.load_kernel(data, name, checked)
        kernel.source = str(module)
        kernel.asm = lambda: _assembly(optimized)
        if checked:
            kernel.expressions = {e.uid: f"{e.name} {e.attrs.get('buffer', '')}" for e in lir.expressions}
        return kernel

    def kernel_binary(self, kernel: KernelFunction) -> bytes | None:
        return kernel.keepalive.data

    def load_kernel(self, data: bytes, name: str, checked: bool = False) -> KernelFunction:
        loaded = load_object(data)
        argtypes = KernelFunction.CHECKED_ARGTYPES if checked else KernelFunction.ARGTYPES
        return KernelFunction(name, loaded.cfunc(name, None, *argtypes), "", loaded, checked=checked)

    def cache_key(self) -> str:
        return f"llvm|{self.host.cpu}|{self.host.features}|{self.vector_lanes}"


def opt_level(lir) -> int:
    """LLVM's optimization level for a kernel: 1 for kernels with Brgemms, which are compiled per input
    shape while a model runs (their block products are the GEMM generator's, already scheduled; a
    soft-capped attention block of 12 heads of 64 compiled in 140 ms instead of 210-290 ms and ran as fast:
    0.381 against 0.395 ms at 128 tokens, 5.13 against 5.18 at 512, results bit for bit the same); 3 for
    the others, compiled once per model."""
    return 1 if any(e.op == "Brgemm" for e in lir.expressions) else 3


def _assembly(optimized_ir: str) -> str:
    import llvmlite.binding as llvm
    return jit.create_target_machine().emit_assembly(llvm.parse_assembly(optimized_ir))
