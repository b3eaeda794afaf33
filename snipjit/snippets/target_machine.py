"""The target-independent interface between the Snippets generator and a code generation backend.

A `TargetMachine` tells the generator what the hardware offers (vector lanes, registers per class),
maps each Linear IR op to an `Emitter`, and turns an emitted kernel into a callable `KernelFunction`.
"""
from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable


class TargetError(RuntimeError):
    """The target cannot compile this kernel (missing compiler, unsupported op)."""


class Emitter(ABC):
    """Emits the code of one expression. `ctx` is the target's kernel-building context."""

    @abstractmethod
    def emit(self, ctx: Any, expr) -> None:
        ...


@dataclass
class KernelFunction:
    """A compiled kernel: `fn(ptrs, dims, begin, end, scratch)` processes iterations [begin, end) of the
    parallel domain; `ptrs` are the data pointers of the inputs then the outputs, `dims` the master
    shape, `scratch` the calling thread's scratchpad (`scratch_rows` rows of the innermost dim)."""
    name: str
    fn: Callable                      # ctypes function
    source: str                       # LLVM IR or C source, for debugging
    keepalive: Any = field(default=None, repr=False)
    asm: Callable[[], str] | None = field(default=None, repr=False)

    checked: bool = False             # takes buffer sizes and an error record (checked mode)
    expressions: dict[int, str] = field(default_factory=dict)   # checked mode: expression id -> name

    ARGTYPES = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
    CHECKED_ARGTYPES = ARGTYPES + (ctypes.c_void_p, ctypes.c_void_p)


class TargetMachine(ABC):
    name: str = ""
    supports_checked: bool = False   # whether compile_kernel can emit checked kernels

    @property
    @abstractmethod
    def vector_lanes(self) -> int:
        """f32 lanes in one vector register."""

    @property
    @abstractmethod
    def registers(self) -> dict[str, int]:
        """Physical registers available to kernels, per class ("vec", "gpr")."""

    @abstractmethod
    def supports(self, op: str) -> bool:
        """Whether an emitter exists for a Linear IR op."""

    @abstractmethod
    def emitter_for(self, expr) -> Emitter:
        ...

    @abstractmethod
    def compile_kernel(self, lir, name: str, checked: bool = False) -> KernelFunction:
        """Emit the whole kernel for a prepared Linear IR (emitters bound) and compile it; `checked`
        kernels verify every memory access (see KernelFunction.CHECKED_ARGTYPES)."""

    def cache_key(self) -> str:
        """What distinguishes this target's code: name, CPU and features."""
        return self.name

    def kernel_binary(self, kernel: KernelFunction) -> bytes | None:
        """The kernel's machine code as bytes for the disk cache (None: this target does not cache)."""
        return None

    def load_kernel(self, data: bytes, name: str) -> KernelFunction:
        """A kernel from bytes `kernel_binary` gave (raises if they are not usable)."""
        raise TargetError(f"target {self.name} cannot load cached kernels")
