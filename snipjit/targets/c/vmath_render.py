"""The math library (snipjit/targets/vmath) rendered as C functions over vmath.h's vector types.

``render_function`` turns one math function, for one set of parameters and one vector width, into
a ``static inline`` C function of ``vf`` operands; a kernel that uses it carries it in its source.
``CVectorBuilder`` writes one C statement per vector operation (``vf t7 = t5 * t6;``), using only
the primitives of vmath.h (vm_fma, vm_sqrt, vm_roundeven, vm_any, ...), so the C compiler sees the
same IEEE operations in the same order as the LLVM renderer emits; -ffp-contract=off keeps it
from fusing anything the definition does not fuse, and vm_fma is asked for only on ISA levels with
an FMA instruction, as the LLVM renderer's llvm.fmuladd.

f64 and i64 values (the library's double-precision steps) are held in parts of ``part_lanes(lanes)``
lanes, as vmath.h's ``vd``/``vl``: GCC vectors of doubles wider than a register turn into scalar code. A handle of a
64-bit kind is therefore a tuple of part expressions, one of a 32-bit kind a single expression.
"""
from __future__ import annotations

import hashlib
import math
from typing import Callable

import numpy as np

from ..isa import IsaLevel, current
from ..vmath import Vec, VectorBuilder, lookup

_TYPES = {"f32": "vf", "i32": "vi", "m32": "vi", "f64": "vd", "i64": "vl", "m64": "vl"}
_WIDE = ("f64", "i64", "m64")
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&", "or": "|", "xor": "^",
          "shl": "<<", "ashr": ">>"}
_UNARY = {("fabs", "f32"): "vm_abs", ("fabs", "f64"): "vm_absd", ("sqrt", "f32"): "vm_sqrt",
          ("roundeven", "f32"): "vm_roundeven", ("roundeven", "f64"): "vm_roundevend"}


def part_lanes(lanes: int) -> int:
    """Lanes per part of f64/i64 values, as vmath.h's VM_PART_LANES: at most one 512-bit register
    (16 lanes come only with AVX-512) and at most one 256-bit register for 8 lanes (AVX2)."""
    return 8 if lanes > 8 else min(lanes, 4)


def c_literal(kind: str, number: float | int) -> str:
    """An exact C literal of a lane value (floats in hex, f32 rounded like the LLVM constants)."""
    if kind in ("i32", "i64"):
        return str(int(number))
    value = float(np.float32(number)) if kind == "f32" else float(number)
    suffix = "f" if kind == "f32" else ""
    if math.isnan(value):
        return f'__builtin_nan{suffix}("")'
    if math.isinf(value):
        return f"{'-' if value < 0 else ''}__builtin_inf{suffix}()"
    return f"{value.hex()}{suffix}"


class CVectorBuilder(VectorBuilder):
    """Writes the C statements of vector operations on ``lanes``-wide values into ``lines``."""

    def __init__(self, lanes: int, fused_multiply_add: bool, indent: str = "    "):
        self.lanes = lanes
        self.fused_multiply_add = fused_multiply_add
        self.part_lanes = part_lanes(lanes)
        self.parts = lanes // self.part_lanes
        self.lines: list[str] = []
        self.constants: dict[tuple[str, str], str] = {}   # (C type, literal) -> name of a splat
        self.depth = 1
        self.indent = indent
        self._count = 0

    # ---- statements ------------------------------------------------------------------------------
    def _line(self, text: str) -> None:
        self.lines.append(self.indent * self.depth + text)

    def _temp(self, ctype: str, expr: str) -> str:
        name = f"t{self._count}"
        self._count += 1
        self._line(f"{ctype} {name} = {expr};")
        return name

    def _each(self, kind: str, make: Callable[..., str], *handles):
        """One statement per part for 64-bit kinds, one for the whole vector otherwise."""
        if kind in _WIDE:
            return tuple(self._temp(_TYPES[kind], make(*(h[p] for h in handles))) for p in range(self.parts))
        return self._temp(_TYPES[kind], make(*handles))

    # ---- the builder's operations ----------------------------------------------------------------
    def constant(self, kind: str, number: float | int):
        ctype = _TYPES[kind]
        key = (ctype, c_literal(kind, number))
        if key not in self.constants:
            self.constants[key] = f"k{len(self.constants)}"
        return (self.constants[key],) * self.parts if kind in _WIDE else self.constants[key]

    def constant_lines(self) -> list[str]:
        """The splatted constants, as vector literals (cheaper to compile than splat calls)."""
        lines = []
        for (ctype, literal), name in self.constants.items():
            lanes = self.part_lanes if ctype in ("vd", "vl") else self.lanes
            lines.append(f"{self.indent}const {ctype} {name} = {{{', '.join([literal] * lanes)}}};")
        return lines

    def binary(self, op: str, kind: str, a, b):
        return self._each(kind, lambda x, y: f"{x} {_INFIX[op]} {y}", a, b)

    def unary(self, op: str, kind: str, a):
        if op == "neg":
            return self._each(kind, lambda x: f"-{x}", a)
        if op == "not":
            return self._each(kind, lambda x: f"~{x}", a)
        return self._each(kind, lambda x: f"{_UNARY[op, kind]}({x})", a)

    def fma(self, kind: str, a, b, c):
        fn = "vm_fmad" if kind == "f64" else "vm_fma"
        return self._each(kind, lambda x, y, z: f"{fn}({x}, {y}, {z})", a, b, c)

    def copysign(self, kind: str, magnitude, sign):
        if kind != "f32":
            raise NotImplementedError(f"copysign on {kind} lanes")
        return self._temp("vf", f"vm_copysign({magnitude}, {sign})")

    def compare(self, op: str, kind: str, a, b):
        mask = "m64" if kind in _WIDE else "m32"
        if op == "uno":
            make = lambda x, y: f"({x} != {x}) | ({y} != {y})"  # noqa: E731
        elif op == "ult":
            make = lambda x, y: f"(vu){x} < (vu){y}"  # noqa: E731
        elif op == "!=" and kind in ("f32", "f64"):   # ordered: false with a NaN
            make = lambda x, y: f"({x} < {y}) | ({x} > {y})"  # noqa: E731
        else:
            make = lambda x, y: f"{x} {op} {y}"  # noqa: E731
        return self._each(mask, make, a, b)

    def select(self, kind: str, mask, a, b):
        ctype, bits = _TYPES[kind], "vl" if kind in _WIDE else "vi"
        mask = self._mask_for(kind, mask)
        return self._each(kind, lambda m, x, y: f"({ctype})((({bits}){x} & {m}) | (({bits}){y} & ~{m}))",
                          mask, a, b)

    def convert(self, op: str, source: str, target: str, a):
        ctype = _TYPES[target]
        if op == "bitcast" or (source in _WIDE) == (target in _WIDE):
            make = (lambda x: f"({ctype}){x}") if op == "bitcast" else \
                (lambda x: f"__builtin_convertvector({x}, {ctype})")
            return self._each(target, make, a)
        if target in _WIDE:   # f32 -> f64 by parts
            return tuple(self._temp(ctype, f"__builtin_convertvector((vm_part_f)"
                                           f"{self._part(a, p)}, {ctype})") for p in range(self.parts))
        return self._narrow(a, target)

    def _narrow(self, parts: tuple[str, ...], target: str) -> str:
        """64-bit parts converted to 32-bit lanes (f32, or i32 from i64/f64) and joined."""
        ctype = _TYPES[target]
        part_type = "vm_part_f" if target == "f32" else "vm_part_i"
        narrowed = [self._temp(part_type, f"__builtin_convertvector({h}, {part_type})") for h in parts]
        if self.parts == 1:
            return self._temp(ctype, f"({ctype}){narrowed[0]}")
        return self._temp(ctype, f"({ctype})VM_JOIN((vm_part_f){narrowed[0]}, (vm_part_f){narrowed[1]})")

    def _mask_for(self, kind: str, mask):
        """A mask of 32-bit lanes as one of 64-bit lanes (by parts) or back, to select ``kind``."""
        if (kind in _WIDE) == isinstance(mask, tuple):
            return mask
        if kind in _WIDE:
            floats = self._temp("vf", f"(vf){mask}")
            return tuple(self._temp("vl", f"__builtin_convertvector((vm_part_i){self._part(floats, p)}, vl)")
                         for p in range(self.parts))
        return self._narrow(mask, "m32")

    def _part(self, value: str, p: int) -> str:
        return value if self.parts == 1 else f"VM_PART({value}, {p})"

    def branch_if_any(self, mask, compute, defaults, kinds):
        results = [self._each(kind, lambda x: x, default) for kind, default in zip(kinds, defaults)]
        test = " | ".join(f"vm_anyd({m})" for m in mask) if isinstance(mask, tuple) else f"vm_any({mask})"
        self._line(f"if (__builtin_expect({test}, 0)) {{")
        self.depth += 1
        for result, value in zip(results, compute()):
            for target, source in zip(*((result, value) if isinstance(result, tuple) else ((result,), (value,)))):
                self._line(f"{target} = {source};")
        self.depth -= 1
        self._line("}")
        return results


def function_name(name: str, params: dict) -> str:
    """The C name of math function ``name`` with ``params``: vmath_exp, vmath_elu_3f1c0a2b, ...
    (vmath.h's primitives are vm_*)."""
    if not params:
        return f"vmath_{name}"
    digest = hashlib.sha256(repr(sorted(params.items())).encode()).hexdigest()[:8]
    return f"vmath_{name}_{digest}"


def render_function(name: str, params: dict, lanes: int, isa_level: IsaLevel | None = None) -> str:
    """The C definition of math function ``name`` (with ``params``) for vectors of ``lanes`` lanes, for
    ``isa_level`` (default: the level kernels are compiled for, ``current()``)."""
    op = lookup(name)
    builder = CVectorBuilder(lanes, (isa_level or current().level).fused_multiply_add)
    operands = [f"x{i}" for i in range(op.arity)]
    result = op(*(Vec(builder, x, "f32") for x in operands), **params)
    signature = ", ".join(f"vf {x}" for x in operands)
    described = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return "\n".join([
        f"/* {name}{f' ({described})' if described else ''}: rendered from snipjit's math library */",
        f"static inline __attribute__((always_inline)) vf {function_name(name, params)}({signature})",
        "{",
        *builder.constant_lines(),
        *builder.lines,
        f"    return {result.value};",
        "}",
        "",
    ])
