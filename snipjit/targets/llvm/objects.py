"""LLVM kernels as object code: compile a module to host object bytes once, load bytes into an engine.

Fresh compiles and disk-cache hits share the loading path, so a cached kernel is exactly the code a
fresh compile would run.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import llvmlite.binding as llvm
from llvmlite import ir

from .jit import JitError, _initialize, create_target_machine, optimized_module


def compile_to_object(module: ir.Module | str, opt_level: int = 3) -> tuple[bytes, str]:
    """Parse, verify and optimize a module; return its object code and the optimized IR text."""
    mod, machine = optimized_module(module, opt_level)
    return machine.emit_object(mod), str(mod)


@dataclass(eq=False)
class LoadedObject:
    """An engine holding loaded object code; functions stay valid while this object lives."""
    engine: llvm.ExecutionEngine = field(repr=False)
    data: bytes = field(repr=False)

    def cfunc(self, name: str, restype, *argtypes):
        address = self.engine.get_function_address(name)
        if not address:
            raise JitError(f"object code defines no function {name!r}")
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(address)
        fn.keepalive = self
        return fn


def load_object(data: bytes) -> LoadedObject:
    _initialize()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), create_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    return LoadedObject(engine, data)


def disassemble(data: bytes) -> str:
    """The object's code as assembly text is not recoverable from bytes here; give the section sizes."""
    obj = llvm.ObjectFileRef.from_data(data)
    return "\n".join(f"{s.name()}: {s.size()} bytes" for s in obj.sections())
