"""The math library (snipjit/targets/vmath) rendered as LLVM IR on ``<N x float>`` values.

``LLVMVectorBuilder`` implements the library's vector operations with plain instructions and
intrinsics that lower inline (llvm.fmuladd, sqrt, fabs, copysign, roundeven, and
vector.reduce.or for branches), never libm calls. No fast-math flags: LLVM keeps every
operation as written. The library asks for an FMA only on ISA levels with an FMA instruction, where
llvm.fmuladd is that one instruction, as the C renderer's vm_fma; elsewhere it writes a multiply and
an add, or an FMA-free exact product.

``emit(builder, name, *operands, **params)`` emits function ``name`` at the builder's position
for the ISA level code is compiled for (``isa_level=`` another) and returns the ``ir.Value`` of its
result; ``OPS`` is the library's registry.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ..isa import IsaLevel, current
from ..vmath import OPS, Vec, VectorBuilder, lookup

F32 = ir.FloatType()
F64 = ir.DoubleType()
ELEMENTS = {"f32": F32, "f64": F64, "i32": ir.IntType(32), "i64": ir.IntType(64),
            "m32": ir.IntType(1), "m64": ir.IntType(1)}
_FLOAT_OPS = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}
_INT_OPS = {"add": "add", "sub": "sub", "mul": "mul", "and": "and_", "or": "or_", "xor": "xor",
            "shl": "shl", "ashr": "ashr"}
_UNARY_INTRINSICS = {"fabs": "llvm.fabs", "sqrt": "llvm.sqrt", "roundeven": "llvm.roundeven"}

__all__ = ["OPS", "LLVMVectorBuilder", "emit"]


class LLVMVectorBuilder(VectorBuilder):
    """Vector operations on ``lanes``-wide LLVM vectors, emitted through an ``ir.IRBuilder``."""

    def __init__(self, builder: ir.IRBuilder, lanes: int, fused_multiply_add: bool):
        self.ir = builder
        self.lanes = lanes
        self.fused_multiply_add = fused_multiply_add

    def _type(self, kind: str) -> ir.VectorType:
        return ir.VectorType(ELEMENTS[kind], self.lanes)

    def _intrinsic(self, name: str, kind: str, *args: ir.Value, ret: ir.Type | None = None) -> ir.Value:
        """Call an intrinsic overloaded on the vector type of ``kind``."""
        vector = self._type(kind)
        full_name = f"{name}.v{self.lanes}{vector.element.intrinsic_name}"
        module = self.ir.module
        fn = module.globals.get(full_name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(ret or vector, [a.type for a in args]), full_name)
        return self.ir.call(fn, list(args))

    def constant(self, kind: str, number: float | int) -> ir.Value:
        return ir.Constant(self._type(kind), [number] * self.lanes)

    def binary(self, op: str, kind: str, a: ir.Value, b: ir.Value) -> ir.Value:
        table = _FLOAT_OPS if kind in ("f32", "f64") else _INT_OPS
        return getattr(self.ir, table[op])(a, b)

    def unary(self, op: str, kind: str, a: ir.Value) -> ir.Value:
        if op == "neg":
            return self.ir.fneg(a) if kind in ("f32", "f64") else self.ir.neg(a)
        if op == "not":
            return self.ir.not_(a)
        return self._intrinsic(_UNARY_INTRINSICS[op], kind, a)

    def fma(self, kind: str, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        return self._intrinsic("llvm.fmuladd", kind, a, b, c)

    def copysign(self, kind: str, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
        return self._intrinsic("llvm.copysign", kind, magnitude, sign)

    def compare(self, op: str, kind: str, a: ir.Value, b: ir.Value) -> ir.Value:
        if op == "uno":
            return self.ir.fcmp_unordered("uno", a, b)
        if op == "ult":
            return self.ir.icmp_unsigned("<", a, b)
        if kind in ("f32", "f64"):  # ordered: false whenever a NaN is involved
            return self.ir.fcmp_ordered(op, a, b)
        return self.ir.icmp_signed(op, a, b)

    def select(self, kind: str, mask: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.ir.select(mask, a, b)

    def convert(self, op: str, source: str, target: str, a: ir.Value) -> ir.Value:
        return getattr(self.ir, op)(a, self._type(target))

    def branch_if_any(self, mask: ir.Value, compute: Callable[[], list[ir.Value]],
                      defaults: list[ir.Value], kinds: list[str]) -> list[ir.Value]:
        b = self.ir
        any_lane = self._intrinsic("llvm.vector.reduce.or", "m32", mask, ret=ir.IntType(1))
        entry = b.block
        slow = b.append_basic_block("vmath.slow")
        done = b.append_basic_block("vmath.done")
        b.cbranch(any_lane, slow, done).set_weights([1, 1000])
        b.position_at_end(slow)
        chosen = compute()
        slow_end = b.block
        b.branch(done)
        b.position_at_end(done)
        merged = []
        for value, fallback in zip(chosen, defaults):
            phi = b.phi(value.type)
            phi.add_incoming(fallback, entry)
            phi.add_incoming(value, slow_end)
            merged.append(phi)
        return merged


def emit(builder: ir.IRBuilder, name: str, *operands: ir.Value, isa_level: IsaLevel | None = None,
         fused_multiply_add: bool | None = None, **params) -> ir.Value:
    """Emit math function ``name`` on ``<N x float>`` operands for ``isa_level`` (default: the level
    code is compiled for, ``current()``), or for a level with or without FMA (`fused_multiply_add`,
    all the functions ask of a level); KeyError names the known ops."""
    op = lookup(name)
    if len(operands) != op.arity:
        raise TypeError(f"{name} takes {op.arity} operand(s), got {len(operands)}")
    for value in operands:
        if not (isinstance(value.type, ir.VectorType) and value.type.element == F32):
            raise TypeError(f"{name}: operands must be <N x float>, got {value.type}")
    if fused_multiply_add is None:
        fused_multiply_add = (isa_level or current().level).fused_multiply_add
    vb = LLVMVectorBuilder(builder, operands[0].type.count, fused_multiply_add)
    return op(*(Vec(vb, v, "f32") for v in operands), **params).value
