"""Host-tuned LLVM JIT: parse, verify, optimise at O3 and load LLVM IR into executable memory.

Everything is compiled for the CPU this process runs on (its name *and* feature string): a
default target machine only assumes SSE2, which would throw away AVX2/AVX-512. `SNIPJIT_ISA` may force
a lower instruction-set level (see `targets.isa`): the features above it are then switched off.

Thread safety: llvmlite serialises every call into libllvmlite behind one process-wide lock
(``llvmlite.binding.ffi.lib``), so the LLVM side of concurrent compiles never overlaps; the GIL
is released while a thread waits for that lock or runs a compiled kernel, and the Python side
(IR text building) runs concurrently. What llvmlite does not guard is object ownership across
calls: an MCJIT engine takes ownership of its target machine, so every compile gets a fresh
one, and the only shared state here (one-time initialisation) is behind ``_init_lock``.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass, field

import llvmlite.binding as llvm
from llvmlite import ir

from ..isa import IsaLevel, highest_level, requested_level, select_for_host


class JitError(RuntimeError):
    """LLVM IR that does not parse or verify, or a symbol the compiled module does not define."""


@dataclass(frozen=True)
class HostInfo:
    """The CPU kernels are compiled for."""

    triple: str
    cpu: str
    features: str  # LLVM feature string: "+avx2,-avx512f,..."

    def has_feature(self, name: str) -> bool:
        return f"+{name}" in self.features.split(",")

    @property
    def level(self) -> IsaLevel:
        """The instruction-set level these features execute."""
        return highest_level(self.features)

    @property
    def vector_bits(self) -> int:
        return self.level.vector_bits

    def vector_lanes(self, dtype_bits: int = 32) -> int:
        """Lanes of a ``dtype_bits`` element type in one native vector register."""
        return self.vector_bits // dtype_bits


_init_lock = threading.Lock()


@functools.cache
def _initialize() -> None:
    with _init_lock:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()


def host() -> HostInfo:
    """The CPU code is compiled for: the host's, at the level `SNIPJIT_ISA` asks for (default: its own)."""
    return _host(requested_level())  # (cached per level: a test may switch levels)


@functools.cache
def _host(level: str | None) -> HostInfo:
    _initialize()
    chosen = select_for_host(level)
    return HostInfo(triple=llvm.get_process_triple(), cpu=chosen.cpu, features=chosen.features)


def create_target_machine(opt_level: int = 3, cpu: HostInfo | None = None) -> llvm.TargetMachine:
    """A target machine for the host CPU (or `cpu`). Each MCJIT engine owns its own, so make one per use."""
    _initialize()
    info = cpu or host()
    target = llvm.Target.from_triple(info.triple)
    return target.create_target_machine(
        cpu=info.cpu, features=info.features, opt=opt_level, jit=True
    )


@dataclass(eq=False)
class CompiledModule:
    """Machine code of one module; the code stays valid exactly as long as this object lives."""

    engine: llvm.ExecutionEngine = field(repr=False)
    functions: frozenset[str]
    optimized_ir: str = field(repr=False)
    opt_level: int
    _asm: str | None = field(default=None, repr=False)

    def address(self, name: str) -> int:
        if name not in self.functions:
            known = sorted(self.functions)
            raise JitError(f"compiled module defines no function {name!r}; it has {known}")
        return self.engine.get_function_address(name)

    def cfunc(self, name: str, restype, *argtypes) -> ctypes._CFuncPtr:
        """A ctypes callable for ``name`` that keeps this module alive while it exists."""
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))
        fn.keepalive = self
        return fn

    def llvm_ir(self) -> str:
        """The module after optimisation."""
        return self.optimized_ir

    def asm(self) -> str:
        """Host assembly of the optimised module (regenerated from ``llvm_ir`` on first call)."""
        if self._asm is None:
            module = llvm.parse_assembly(self.optimized_ir)
            self._asm = create_target_machine(self.opt_level).emit_assembly(module)
        return self._asm


def _optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine, opt_level: int) -> None:
    tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    vectorize = opt_level >= 2
    tuning.loop_vectorization = vectorize
    tuning.slp_vectorization = vectorize
    tuning.loop_unrolling = vectorize
    passes = llvm.create_pass_builder(machine, tuning)
    passes.getModulePassManager().run(module, passes)


def optimized_module(source: str | ir.Module, opt_level: int = 3, cpu: HostInfo | None = None
                     ) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse, verify and optimise ``source`` for the host CPU (or `cpu`); the module and its target machine."""
    _initialize()
    try:
        module = llvm.parse_assembly(str(source))
    except RuntimeError as exc:
        raise JitError(f"LLVM IR does not parse: {exc}") from None
    try:
        module.verify()
    except RuntimeError as exc:
        raise JitError(f"LLVM IR does not verify: {exc}") from None
    machine = create_target_machine(opt_level, cpu)
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    _optimize(module, machine, opt_level)
    return module, machine


def assembly_for(source: str | ir.Module, cpu: str, features: str = "", opt_level: int = 3) -> str:
    """The assembly of ``source`` compiled for another x86 CPU (LLVM's name; `features` adjust its
    defaults): how generated code looks on machines other than this one."""
    target = HostInfo(host().triple, cpu, features)
    module, machine = optimized_module(source, opt_level, target)
    return machine.emit_assembly(module)


def compile(source: str | ir.Module, *, opt_level: int = 3) -> CompiledModule:
    """Parse, verify, optimise and JIT ``source`` for the host CPU."""
    module, machine = optimized_module(source, opt_level)
    functions = frozenset(f.name for f in module.functions if not f.is_declaration)
    optimized_ir = str(module)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return CompiledModule(engine, functions, optimized_ir, opt_level)
