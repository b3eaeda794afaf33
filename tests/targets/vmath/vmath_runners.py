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
from snipjit.targets import TargetError, isa
from snipjit.targets.vmath import lookup

F32 = ir.FloatType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)


def symbol(op: str, params: dict) -> str:
    return "run_" + function_name(op, params)


def c_compiler() -> CCompiler | None:
    try:
        return CCompiler.find()
    except TargetError:
        return None


# ---- LLVM -------------------------------------------------------------------------------------------
def _splat(b: ir.IRBuilder, scalar: ir.Value, width: int) -> ir.Value:
    vec = ir.VectorType(scalar.type, width)
    one = b.insert_element(ir.Constant(vec, None), scalar, I32(0))
    return b.shuffle_vector(one, ir.Constant(vec, None), ir.Constant(ir.VectorType(I32, width), [0] * width))


def _masked(b: ir.IRBuilder, kind: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
    vec = ret if kind == "load" else args[0].type
    name = f"llvm.masked.{kind}.v{vec.count}f32.p0"
    fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, args)


def _llvm_kernel(module: ir.Module, op: str, params: dict, width: int) -> None:
    arity = lookup(op).arity
    vec = ir.VectorType(F32, width)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [F32.as_pointer()] * (arity + 1) + [I64]),
                     name=symbol(op, params))
    *inputs, out, n = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, I64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    lane_ids = ir.Constant(ir.VectorType(I64, width), list(range(width)))
    mask = b.icmp_signed("<", b.add(_splat(b, i, width), lane_ids), _splat(b, n, width))
    zeros = ir.Constant(vec, [0.0] * width)
    operands = [_masked(b, "load", vec, b.gep(p, [i]), I32(4), mask, zeros) for p in inputs]
    _masked(b, "store", ir.VoidType(), vmath.emit(b, op, *operands, **params), b.gep(out, [i]), I32(4), mask)
    following = b.add(i, I64(width))
    i.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed("<", following, n), loop, done)
    b.position_at_end(done)
    b.ret_void()


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
