"""LLVM emitters: one per Linear IR op.

Data values live in `<lanes x float>` registers. Booleans (comparison results) are kept in the same
registers as all-ones/all-zeros 32-bit lane patterns, so every value fits one register class; `mask()`
and `unmask()` convert. Elementwise math comes from the math library's table (`vmath.ELEMENTWISE`),
rendered by `vmath.emit` (polynomials, never libm calls).
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ...snippets.target_machine import Emitter
from ..vmath import ELEMENTWISE, MathCall
from . import vmath
from .kernel_emitter import F32, I1, I8, I32, I64, PTR, KernelContext, splat
from .tail_store import store_tail

Values = list[ir.Value]


# ---- value helpers ---------------------------------------------------------------------------------
def mask(ctx: KernelContext, v: ir.Value) -> ir.Value:
    ints = ctx.builder.bitcast(v, ir.VectorType(I32, ctx.lanes))
    return ctx.builder.icmp_signed("!=", ints, ir.Constant(ints.type, None))


def unmask(ctx: KernelContext, m: ir.Value) -> ir.Value:
    return ctx.builder.bitcast(ctx.builder.sext(m, ir.VectorType(I32, ctx.lanes)), ctx.vec)


def const(ctx: KernelContext, value: float) -> ir.Value:
    return ir.Constant(ctx.vec, [float(value)] * ctx.lanes)


def intrinsic(ctx: KernelContext, name: str, *args: ir.Value) -> ir.Value:
    ty = args[0].type
    suffix = f"v{ty.count}f32"
    fn = ctx.intrinsic(f"{name}.{suffix}", ty, [a.type for a in args])
    return ctx.builder.call(fn, list(args))


def vm(call: MathCall) -> Callable:
    """A compute function from the math library's entry for an op."""
    def fn(ctx: KernelContext, ins: Values, attrs: dict) -> ir.Value:
        return vmath.emit(ctx.builder, call.op, *ins, **call.arguments(attrs))
    return fn


def select(ctx: KernelContext, m: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    return ctx.builder.select(m, a, b)


def fcmp(op: str) -> Callable:
    def fn(ctx: KernelContext, ins: Values, attrs: dict) -> ir.Value:
        return unmask(ctx, ctx.builder.fcmp_ordered(op, ins[0], ins[1]))
    return fn


def logic(op: str) -> Callable:
    def fn(ctx: KernelContext, ins: Values, attrs: dict) -> ir.Value:
        a, b = (ctx.builder.bitcast(v, ir.VectorType(I32, ctx.lanes)) for v in ins)
        return ctx.builder.bitcast(getattr(ctx.builder, op)(a, b), ctx.vec)
    return fn


def chain(combine: Callable[[KernelContext, ir.Value, ir.Value], ir.Value]) -> Callable:
    """A variadic op (Sum/Max/Min of n inputs) as a chain of a binary operation."""
    def fn(ctx: KernelContext, ins: Values, attrs: dict) -> ir.Value:
        acc = ins[0]
        for v in ins[1:]:
            acc = combine(ctx, acc, v)
        return acc
    return fn


def _is_inf(ctx, ins, attrs):
    b = ctx.builder
    pos = b.fcmp_ordered("==", ins[0], const(ctx, float("inf")))
    neg = b.fcmp_ordered("==", ins[0], const(ctx, float("-inf")))
    off = ir.Constant(pos.type, None)
    return unmask(ctx, b.or_(pos if attrs["detect_positive"] else off, neg if attrs["detect_negative"] else off))


def _clip(ctx, ins, attrs):
    x = ins[0]
    if len(ins) > 1:
        x = intrinsic(ctx, "llvm.maximum", x, ins[1])
    if len(ins) > 2:
        x = intrinsic(ctx, "llvm.minimum", x, ins[2])
    return x


COMPUTE: dict[str, Callable[[KernelContext, Values, dict], ir.Value]] = {
    "Add": lambda c, i, a: c.builder.fadd(i[0], i[1]),
    "Sub": lambda c, i, a: c.builder.fsub(i[0], i[1]),
    "Mul": lambda c, i, a: c.builder.fmul(i[0], i[1]),
    "Div": lambda c, i, a: c.builder.fdiv(i[0], i[1]),
    "Max": chain(lambda c, a, b: intrinsic(c, "llvm.maximum", a, b)),
    "Min": chain(lambda c, a, b: intrinsic(c, "llvm.minimum", a, b)),
    "Sum": chain(lambda c, a, b: c.builder.fadd(a, b)),
    "Floor": lambda c, i, a: intrinsic(c, "llvm.floor", i[0]),
    "Ceil": lambda c, i, a: intrinsic(c, "llvm.ceil", i[0]),
    "Clip": _clip,
    **{op: vm(call) for op, call in ELEMENTWISE.items()},
    "Less": fcmp("<"), "LessOrEqual": fcmp("<="), "Greater": fcmp(">"),
    "GreaterOrEqual": fcmp(">="),
    "And": logic("and_"), "Or": logic("or_"), "Xor": logic("xor"),
    "Not": lambda c, i, a: unmask(c, c.builder.not_(mask(c, i[0]))),
    "Where": lambda c, i, a: c.builder.select(mask(c, i[0]), i[1], i[2]),
    "IsNaN": lambda c, i, a: unmask(c, c.builder.fcmp_unordered("uno", i[0], i[0])),
    "IsInf": _is_inf,
}


# ---- emitters ----------------------------------------------------------------------------------------
class ComputeEmitter(Emitter):
    def __init__(self, fn: Callable):
        self.fn = fn

    def emit(self, ctx: KernelContext, expr) -> None:
        ins = [ctx.read(r) for r in expr.in_regs]
        ctx.write(expr.out_regs[0], self.fn(ctx, ins, expr.attrs))


class EqualEmitter(Emitter):
    """Equal compares floats, or bool masks by their bit patterns (an all-ones lane reads as NaN)."""

    def emit(self, ctx: KernelContext, expr) -> None:
        a, b = (ctx.read(r) for r in expr.in_regs)
        if all(c.source.expr.dtype == "bool" for c in expr.inputs):
            a, b = (ctx.builder.bitcast(v, ir.VectorType(I32, ctx.lanes)) for v in (a, b))
            ctx.write(expr.out_regs[0], unmask(ctx, ctx.builder.icmp_signed("==", a, b)))
        else:
            ctx.write(expr.out_regs[0], unmask(ctx, ctx.builder.fcmp_ordered("==", a, b)))


class NopEmitter(Emitter):
    """Parameter and Result: their data pointers are set by the kernel emitter."""

    def emit(self, ctx: KernelContext, expr) -> None:
        pass


class ScalarEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        value = expr.attrs["value"]
        if expr.dtype == "bool":
            ctx.write(expr.out_regs[0], unmask(ctx, ir.Constant(ir.VectorType(I1, ctx.lanes), [bool(value)] * ctx.lanes)))
        else:
            ctx.write(expr.out_regs[0], const(ctx, value))


def _element_type(dtype: str) -> ir.Type:
    return I8 if dtype == "bool" else F32


def _check(ctx: KernelContext, expr, buffer: tuple, ety: ir.Type, count: int | None) -> None:
    """Checked mode: verify the bytes this access touches (one element, a vector, or a tail's part)."""
    if ctx.checks is None:
        return
    elem = 1 if ety == I8 else 4
    if count is None:
        frame = next((f for f in reversed(ctx.loops) if f.remaining is not None), None) if expr.attrs.get("tail") else None
        n = frame.remaining if frame is not None else ir.Constant(I64, ctx.lanes)
    else:
        n = ir.Constant(I64, count)
    ctx.check_access(expr, buffer, ctx.builder.mul(n, ir.Constant(I64, elem)))


class LoadEmitter(Emitter):
    """Loads a vector (masked in tail loops) or, with count 1, one element into lane 0."""

    def __init__(self, broadcast: bool = False):
        self.broadcast = broadcast

    def emit(self, ctx: KernelContext, expr) -> None:
        b = ctx.builder
        buffer = tuple(expr.attrs["buffer"])
        dtype = ctx.buffer_dtypes[buffer]
        ety = _element_type(dtype)
        ptr = ctx.buffer_ptr(buffer)
        _check(ctx, expr, buffer, ety, 1 if self.broadcast or expr.attrs.get("count") == 1 else None)
        if self.broadcast or expr.attrs.get("count") == 1:
            x = b.load(ptr, typ=ety)
            vec = splat(b, x, ctx.lanes)
        else:
            vty = ir.VectorType(ety, ctx.lanes)
            m = ctx.tail_mask() if expr.attrs.get("tail") else None
            if m is None:
                vec = b.load(ptr, typ=vty, align=1 if dtype == "bool" else 4)
            else:
                fn = ctx.intrinsic(f"llvm.masked.load.v{ctx.lanes}{'i8' if dtype == 'bool' else 'f32'}.p0",
                                   vty, [PTR, I32, m.type, vty])
                vec = b.call(fn, [ptr, ir.Constant(I32, 1 if dtype == "bool" else 4), m, ir.Constant(vty, None)])
        ctx.write(expr.out_regs[0], unmask(ctx, b.icmp_signed("!=", vec, ir.Constant(vec.type, None)))
                  if dtype == "bool" else vec)


class StoreEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        b = ctx.builder
        buffer = tuple(expr.attrs["buffer"])
        dtype = ctx.buffer_dtypes[buffer]
        value = ctx.read(expr.in_regs[0])
        if dtype == "bool":
            value = b.zext(mask(ctx, value), ir.VectorType(I8, ctx.lanes))
        ptr = ctx.buffer_ptr(buffer)
        _check(ctx, expr, buffer, _element_type(dtype), 1 if expr.attrs.get("count") == 1 else None)
        if expr.attrs.get("count") == 1:   # one element: lane 0
            b.store(b.extract_element(value, ir.Constant(I32, 0)), ptr)
            return
        m = ctx.tail_mask() if expr.attrs.get("tail") else None
        if m is None:
            b.store(value, ptr, align=1 if dtype == "bool" else 4)
        else:
            fn = ctx.intrinsic(f"llvm.masked.store.v{ctx.lanes}{'i8' if dtype == 'bool' else 'f32'}.p0",
                               ir.VoidType(), [value.type, PTR, I32, m.type])
            store_tail(b, [value], [ptr], m, fn, 1 if dtype == "bool" else 4)


class BroadcastMoveEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        v = ctx.read(expr.in_regs[0])
        lane0 = ctx.builder.extract_element(v, ir.Constant(I32, 0))
        ctx.write(expr.out_regs[0], splat(ctx.builder, lane0, ctx.lanes))


class SpillEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.builder.store(ctx.read(expr.in_regs[0]), _spill_slot(ctx, expr.attrs["slot"]))


class ReloadEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.write(expr.out_regs[0], ctx.builder.load(_spill_slot(ctx, expr.attrs["slot"]), typ=ctx.vec))


def _spill_slot(ctx: KernelContext, slot: int) -> ir.Value:
    if slot not in ctx.spill_slots:
        with ctx.builder.goto_block(ctx._entry):
            ctx.builder.position_at_start(ctx._entry)
            ctx.spill_slots[slot] = ctx.builder.alloca(ctx.vec, name=f"spill{slot}")
    return ctx.spill_slots[slot]


class FillEmitter(Emitter):
    """An accumulator's start: the reduction's identity in every lane."""

    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.write(expr.out_regs[0], const(ctx, expr.attrs["value"]))


_COMBINE: dict[str, Callable[[KernelContext, ir.Value, ir.Value], ir.Value]] = {
    "sum": lambda c, a, b: c.builder.fadd(a, b),
    "mean": lambda c, a, b: c.builder.fadd(a, b),
    "prod": lambda c, a, b: c.builder.fmul(a, b),
    "max": lambda c, a, b: intrinsic(c, "llvm.maximum", a, b),
    "min": lambda c, a, b: intrinsic(c, "llvm.minimum", a, b),
    # one vmaxps: NaN need not propagate (see REDUCE_KINDS)
    "shift_max": lambda c, a, b: c.builder.select(c.builder.fcmp_ordered(">", a, b), a, b),
}


class AccumulateEmitter(Emitter):
    """acc = acc op x; in a tail only the live lanes change."""

    def emit(self, ctx: KernelContext, expr) -> None:
        acc, x = (ctx.read(r) for r in expr.in_regs)
        new = _COMBINE[expr.attrs["kind"]](ctx, acc, x)
        m = ctx.tail_mask()
        ctx.write(expr.out_regs[0], new if m is None else ctx.builder.select(m, new, acc))


class HorizonEmitter(Emitter):
    """Combine all lanes (a butterfly of shuffles), leaving the result in every lane; mean divides by
    the reduced count."""

    def emit(self, ctx: KernelContext, expr) -> None:
        b = ctx.builder
        v = ctx.read(expr.in_regs[0])
        combine = _COMBINE[expr.attrs["kind"]]
        step = ctx.lanes // 2
        while step:
            mask = ir.Constant(ir.VectorType(I32, ctx.lanes), [i ^ step for i in range(ctx.lanes)])
            v = combine(ctx, v, b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), mask))
            step //= 2
        if expr.attrs["kind"] == "mean":
            count = b.sitofp(ctx.sym(expr.attrs["count"]), F32)
            v = b.fdiv(v, splat(b, count, ctx.lanes))
        ctx.write(expr.out_regs[0], v)
