"""Run a math library function over an f32 array on either target: a JIT-compiled LLVM loop or a C
loop compiled by gcc, both ``void f(const float *x, [const float *y,] float *out, int64_t n)`` walking
the array one vector of W lanes at a time with masked tails (so lengths need not divide W). Code is
compiled for the ISA level SNIPJIT_ISA selects (the tests' ``level`` fixture sets it), once per level."""
from __future__ import annotations

import ctypes
import functools

import numpy as np
from llvmlite import ir

from snipjit.targets.c.gcc import CCompiler, load_shared_object
from snipjit.targets.c.vmath_render import function_name, render_function
from snipjit.targets.llvm import jit, vmath
from snipjit.targets.llvm.array_map import map_kernel
from snipjit.targets import TargetError, isa
from snipjit.targets.vmath import lookup



def symbol(op: str, params: dict) -> str:
    return "run_" + function_name(op, params)


def c_compiler() -> CCompiler | None:
    try:
        return CCompiler.find()
    except TargetError:
        return None


# ---- LLVM -------------------------------------------------------------------------------------------
def _llvm_kernel(module: ir.Module, op: str, params: dict, width: int) -> None:
    map_kernel(module, symbol(op, params), lambda b, *xs: vmath.emit(b, op, *xs, **params), lookup(op).arity, width)


@functools.cache
def _llvm_module(functions: tuple[tuple[str, tuple], ...], width: int, level: str) -> jit.CompiledModule:
    module = ir.Module(name=f"vmath_w{width}")
    for op, params in functions:
        _llvm_kernel(module, op, dict(params), width)
    return jit.compile(module)


# ---- C ----------------------------------------------------------------------------------------------
def c_source(functions: tuple[tuple[str, tuple], ...], width: int) -> str:
    lines = [f"#define VM_LANES {width}", '#include "vmath.h"']
    for op, params in functions:
        params = dict(params)
        arity = lookup(op).arity
        name = function_name(op, params)
        lines.append(render_function(op, params, width))
        args = ", ".join(f"x{k}" for k in range(arity))
        pointers = "".join(f"const float *in{k}, " for k in range(arity))
        lines += [
            f"void {symbol(op, params)}({pointers}float *out, int64_t n) {{",
            "    for (int64_t i = 0; i < n; i += VM_LANES) {",
            "        int64_t m = n - i < VM_LANES ? n - i : VM_LANES;",
            *(f"        vf x{k} = vm_load_n((const char *)(in{k} + i), m);" for k in range(arity)),
            f"        vm_store_n((char *)(out + i), {name}({args}), m);",
            "    }",
            "}",
        ]
    return "\n".join(lines) + "\n"


@functools.cache
def _c_library(functions: tuple[tuple[str, tuple], ...], width: int, level: str):
    return load_shared_object(CCompiler.find().compile(c_source(functions, width)))


# ---- both ---------------------------------------------------------------------------------------------
TARGETS = ("llvm", "c")


def _level() -> str:
    """The ISA level code is compiled for now (a cache key: the compiled code differs per level)."""
    return isa.current().level.name


def run(target: str, functions: tuple[tuple[str, tuple], ...], op: str, params: dict, width: int,
        *inputs: np.ndarray) -> np.ndarray:
    """``op(params)`` over ``inputs`` on ``target``, from a module holding every one of ``functions``
    (compiled once per target and width)."""
    inputs = [np.ascontiguousarray(a, dtype=np.float32) for a in inputs]
    out = np.empty_like(inputs[0])
    argtypes = [ctypes.c_void_p] * (len(inputs) + 1) + [ctypes.c_int64]
    if target == "llvm":
        kernel = _llvm_module(functions, width, _level()).cfunc(symbol(op, params), None, *argtypes)
    else:
        kernel = _c_library(functions, width, _level()).function(symbol(op, params), None, *argtypes)
    kernel(*(a.ctypes.data for a in inputs), out.ctypes.data, out.size)
    return out


def assembly(target: str, functions: tuple[tuple[str, tuple], ...], width: int) -> str:
    if target == "llvm":
        return _llvm_module(functions, width, _level()).asm()
    return CCompiler.find().assembly(c_source(functions, width))
