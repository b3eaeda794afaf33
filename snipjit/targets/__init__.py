"""Code generation targets. `get_target(name)` gives the process-wide instance of a target; the name
comes from the compile option `target=`, else the SNIPJIT_JIT environment variable, else "llvm"."""
from __future__ import annotations

import functools
import os

from ..snippets.target_machine import Emitter, KernelFunction, TargetError, TargetMachine

TARGETS = ("llvm", "c")


def get_target(name: str | None = None) -> TargetMachine:
    name = name or os.environ.get("SNIPJIT_JIT") or "llvm"
    if name not in TARGETS:
        raise TargetError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
    return _make(name)


@functools.cache
def _make(name: str) -> TargetMachine:
    if name == "c":
        from .c.target import CTarget
        return CTarget()
    from .llvm.target import LLVMTarget
    return LLVMTarget()


__all__ = ["get_target", "TargetMachine", "Emitter", "KernelFunction", "TargetError", "TARGETS"]
