"""The C target machine: host-CPU vectors, emitters per op, kernels compiled by gcc and loaded with ctypes."""
from __future__ import annotations

from ...snippets.target_machine import Emitter, KernelFunction, TargetMachine
from .gcc import CCompiler, load_shared_object
from .emitters import (COMPUTE, AccumulateEmitter, BroadcastMoveEmitter, ComputeEmitter, FillEmitter,
                       HorizonEmitter, LoadEmitter, LoopBeginEmitter, LoopEndEmitter, NopEmitter, ReloadEmitter,
                       ScalarEmitter, SpillEmitter, StoreEmitter)
from .kernel_emitter import CKernelEmitter

_CONTROL: dict[str, Emitter] = {
    "Parameter": NopEmitter(), "Result": NopEmitter(), "Buffer": NopEmitter(), "Scalar": ScalarEmitter(),
    "Load": LoadEmitter(), "BroadcastLoad": LoadEmitter(broadcast=True), "Store": StoreEmitter(),
    "BroadcastMove": BroadcastMoveEmitter(), "LoopBegin": LoopBeginEmitter(), "LoopEnd": LoopEndEmitter(),
    "Spill": SpillEmitter(), "Reload": ReloadEmitter(),
    "Fill": FillEmitter(), "Accumulate": AccumulateEmitter(), "Horizon": HorizonEmitter(),
}
_COMPUTE: dict[str, Emitter] = {op: ComputeEmitter(op, fn) for op, fn in COMPUTE.items()}


class CTarget(TargetMachine):
    """Raises TargetError when no C compiler is on PATH."""
    name = "c"

    def __init__(self, vector_lanes: int | None = None, compiler: CCompiler | None = None):
        self.compiler = compiler or CCompiler.find()
        features = self.compiler.native_macros
        self._avx512 = "__AVX512F__" in features
        self._lanes = vector_lanes or (16 if self._avx512 else 8 if "__AVX__" in features else 4)

    @property
    def vector_lanes(self) -> int:
        return self._lanes

    @property
    def registers(self) -> dict[str, int]:
        return {"vec": 32 if self._avx512 else 16, "gpr": 64}

    def supports(self, op: str) -> bool:
        return op in _CONTROL or op in _COMPUTE

    def emitter_for(self, expr) -> Emitter:
        return _CONTROL.get(expr.op) or _COMPUTE[expr.op]

    def compile_kernel(self, lir, name: str) -> KernelFunction:
        source = CKernelEmitter(lir, self.vector_lanes, name).emit()
        kernel = self.load_kernel(self.compiler.compile(source), name)
        kernel.source = source
        kernel.asm = lambda: self.compiler.assembly(source)
        return kernel

    def kernel_binary(self, kernel: KernelFunction) -> bytes | None:
        return kernel.keepalive.data

    def load_kernel(self, data: bytes, name: str) -> KernelFunction:
        library = load_shared_object(data)
        return KernelFunction(name, library.function(name, None, *KernelFunction.ARGTYPES), "", library)

    def cache_key(self) -> str:
        return f"c|{self.compiler.identity}|{self._lanes}"
