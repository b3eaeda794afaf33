"""C emitters: one per Linear IR op, each writing the C statements of one expression.

Data values live in `vf` variables. Booleans (comparison results) are kept in the same variables as
all-ones/all-zeros 32-bit lane patterns, like the LLVM target; `vm_to_mask`/`vm_from_mask` convert.
Elementwise math comes from the math library's table (`vmath.ELEMENTWISE`): the kernel calls a C
function rendered from the library's definition (`vmath_render`), carried in the kernel's source.

Compute ops are C expressions over their input variables (`COMPUTE`); attributes the node leaves out
take the op's registered defaults.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...ops.registry import REQUIRED, get_op, has_op
from ...snippets.target_machine import Emitter
from ..vmath import ELEMENTWISE, MathCall
from .kernel_emitter import KernelContext, LoopFrame

Compute = Callable[[KernelContext, list[str], dict], str]


def c_float(value: float) -> str:
    """An f32 constant as a C literal (rounded to f32 like the LLVM target's constants)."""
    x = np.float32(value)
    if math.isnan(x):
        return '__builtin_nanf("")'
    if math.isinf(x):
        return "__builtin_inff()" if x > 0 else "-__builtin_inff()"
    text = str(x)
    return text + ("f" if any(c in text for c in ".e") else ".0f")


def attributes(expr) -> dict:
    """The expression's attributes with the op's registered defaults filled in."""
    domain = expr.node.domain if expr.node is not None else ""
    if not has_op(expr.op, domain):
        return dict(expr.attrs)
    defaults = {k: v for k, v in get_op(expr.op, domain).attrs.items() if v is not REQUIRED}
    return {**defaults, **expr.attrs}


# ---- compute ops as C expressions ---------------------------------------------------------------------
def infix(op: str) -> Compute:
    """A binary operator, chained left to right over any number of inputs (Sum of three is (a+b)+c)."""
    return lambda ctx, ins, attrs: f" {op} ".join(ins)


def call(fn: str) -> Compute:
    """A vmath.h function of the inputs."""
    return lambda ctx, ins, attrs: f"{fn}({', '.join(ins)})"


def library(entry: MathCall) -> Compute:
    """The math library's function for an op, rendered into the kernel's source once per parameter set."""
    return lambda ctx, ins, attrs: ctx.math_call(entry.op, entry.arguments(attrs), ins)


def chain(fn: str) -> Compute:
    """A variadic op as nested calls of a binary function: fn(fn(a, b), c)."""
    def emit(ctx: KernelContext, ins: list[str], attrs: dict) -> str:
        acc = ins[0]
        for v in ins[1:]:
            acc = f"{fn}({acc}, {v})"
        return acc
    return emit


def compare(op: str) -> Compute:
    return lambda ctx, ins, attrs: f"vm_from_mask({ins[0]} {op} {ins[1]})"


def logic(op: str) -> Compute:
    return lambda ctx, ins, attrs: f"(vf)((vi){ins[0]} {op} (vi){ins[1]})"


def _clip(ctx: KernelContext, ins: list[str], attrs: dict) -> str:
    x = ins[0]
    if len(ins) > 1:
        x = f"vm_maximum({x}, {ins[1]})"
    if len(ins) > 2:
        x = f"vm_minimum({x}, {ins[2]})"
    return x


def _is_inf(ctx: KernelContext, ins: list[str], attrs: dict) -> str:
    tests = [f"({ins[0]} == {sign}__builtin_inff())"
             for sign, on in (("", attrs["detect_positive"]), ("-", attrs["detect_negative"])) if on]
    return f"vm_from_mask({' | '.join(tests)})" if tests else "vm_bool(0)"


COMPUTE: dict[str, Compute] = {
    "Add": infix("+"), "Sub": infix("-"), "Mul": infix("*"), "Div": infix("/"),
    "Max": chain("vm_maximum"), "Min": chain("vm_minimum"), "Sum": infix("+"),
    "Floor": call("vm_floor"), "Ceil": call("vm_ceil"), "Clip": _clip,
    **{op: library(entry) for op, entry in ELEMENTWISE.items()},
    "Equal": compare("=="), "Less": compare("<"), "LessOrEqual": compare("<="), "Greater": compare(">"),
    "GreaterOrEqual": compare(">="),
    "And": logic("&"), "Or": logic("|"), "Xor": logic("^"),
    "Not": lambda ctx, ins, attrs: f"vm_from_mask((vi){ins[0]} == 0)",
    "Where": lambda ctx, ins, attrs: f"vm_sel(vm_to_mask({ins[0]}), {ins[1]}, {ins[2]})",
    "IsNaN": lambda ctx, ins, attrs: f"vm_from_mask(vm_isnan({ins[0]}))",
    "IsInf": _is_inf,
}

# Equal on two booleans compares their lane patterns as integers (as floats, all ones is a NaN).
_EQUAL_MASKS = "vm_from_mask((vi){0} == (vi){1})"


class ComputeEmitter(Emitter):
    def __init__(self, op: str, fn: Compute):
        self.op = op
        self.fn = fn

    def emit(self, ctx: KernelContext, expr) -> None:
        ins = [ctx.vec(r) for r in expr.in_regs]
        ctx.comment(expr)
        if self.op == "Equal" and all(expr.input_source(i).dtype == "bool" for i in range(2)):
            value = _EQUAL_MASKS.format(*ins)
        else:
            value = self.fn(ctx, ins, attributes(expr))
        ctx.line(f"{ctx.vec(expr.out_regs[0])} = {value};")


# ---- memory, constants, registers ------------------------------------------------------------------------
class NopEmitter(Emitter):
    """Parameter, Result and Buffer: their pointers are set by the kernel emitter and loop emitters."""

    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.comment(expr, str(expr.attrs.get("name", "")) or "memory marker")


class ScalarEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        value = expr.attrs["value"]
        ctx.comment(expr)
        text = f"vm_bool({int(bool(value))})" if expr.dtype == "bool" else f"vm_splat({c_float(value)})"
        ctx.line(f"{ctx.vec(expr.out_regs[0])} = {text};")


class LoadEmitter(Emitter):
    """Loads a vector (its first `remK` lanes in tail loops) or, with count 1, one element into every lane."""

    def __init__(self, broadcast: bool = False):
        self.broadcast = broadcast

    def emit(self, ctx: KernelContext, expr) -> None:
        buffer = tuple(expr.attrs["buffer"])
        suffix = "_bool" if ctx.buffer_dtypes[buffer] == "bool" else ""
        ptr = ctx.buffer_ptr(buffer)
        rem = ctx.remaining() if expr.attrs.get("tail") else None
        if self.broadcast or expr.attrs.get("count") == 1:
            value = f"vm_load1{suffix}({ptr})"
        elif rem is not None:
            value = f"vm_load{suffix}_n({ptr}, {rem})"
        else:
            value = f"vm_load{suffix}({ptr})"
        ctx.comment(expr, f"{buffer[0]} {buffer[1]}")
        ctx.line(f"{ctx.vec(expr.out_regs[0])} = {value};")


class StoreEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        buffer = tuple(expr.attrs["buffer"])
        suffix = "_bool" if ctx.buffer_dtypes[buffer] == "bool" else ""
        ptr, value = ctx.buffer_ptr(buffer), ctx.vec(expr.in_regs[0])
        rem = ctx.remaining() if expr.attrs.get("tail") else None
        ctx.comment(expr, f"{buffer[0]} {buffer[1]}")
        if expr.attrs.get("count") == 1:   # one element: lane 0
            ctx.line(f"vm_store1{suffix}({ptr}, {value});")
        elif rem is not None:
            ctx.line(f"vm_store{suffix}_n({ptr}, {value}, {rem});")
        else:
            ctx.line(f"vm_store{suffix}({ptr}, {value});")


class BroadcastMoveEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.comment(expr)
        ctx.line(f"{ctx.vec(expr.out_regs[0])} = vm_lane0({ctx.vec(expr.in_regs[0])});")


class SpillEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.comment(expr)
        ctx.line(f"{ctx.spill_slot(expr.attrs['slot'])} = {ctx.vec(expr.in_regs[0])};")


class ReloadEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.comment(expr)
        ctx.line(f"{ctx.vec(expr.out_regs[0])} = {ctx.spill_slot(expr.attrs['slot'])};")


# ---- reductions ------------------------------------------------------------------------------------------
_COMBINE: dict[str, str] = {
    "sum": "{0} + {1}", "mean": "{0} + {1}", "prod": "{0} * {1}",
    "max": "vm_maximum({0}, {1})", "min": "vm_minimum({0}, {1})", "shift_max": "vm_maximum({0}, {1})",
}


class FillEmitter(Emitter):
    """An accumulator's start: the reduction's identity in every lane."""

    def emit(self, ctx: KernelContext, expr) -> None:
        ctx.comment(expr)
        ctx.line(f"{ctx.vec(expr.out_regs[0])} = vm_splat({c_float(expr.attrs['value'])});")


class AccumulateEmitter(Emitter):
    """acc = acc op x; in a tail only the live lanes change."""

    def emit(self, ctx: KernelContext, expr) -> None:
        acc, x = (ctx.vec(r) for r in expr.in_regs)
        new = _COMBINE[expr.attrs["kind"]].format(acc, x)
        mask = ctx.tail_mask()
        ctx.comment(expr, expr.attrs["kind"])
        ctx.line(f"{ctx.vec(expr.out_regs[0])} = {new if mask is None else f'vm_sel({mask}, {new}, {acc})'};")


class HorizonEmitter(Emitter):
    """Combine all lanes by a butterfly of shuffles (the LLVM target's order), leaving the result in every
    lane; mean divides by the reduced count."""

    def emit(self, ctx: KernelContext, expr) -> None:
        src, out = ctx.vec(expr.in_regs[0]), ctx.vec(expr.out_regs[0])
        combine = _COMBINE[expr.attrs["kind"]]
        ctx.comment(expr, expr.attrs["kind"])
        if out != src:
            ctx.line(f"{out} = {src};")
        step = ctx.lanes // 2
        while step:
            lanes = ", ".join(str(i ^ step) for i in range(ctx.lanes))
            ctx.line(f"{out} = {combine.format(out, f'VM_SHUFFLE({out}, {lanes})')};")
            step //= 2
        if expr.attrs["kind"] == "mean":
            ctx.line(f"{out} = {out} / (float){ctx.operand(expr.attrs['count'])};")


# ---- loops -------------------------------------------------------------------------------------------------
class LoopBeginEmitter(Emitter):
    """A counted loop is a C `for` over the counter register; a loop evaluated once is a block; a tail is a
    block guarded by its element count."""

    def emit(self, ctx: KernelContext, expr) -> None:
        loop_id = expr.attrs["loop_id"]
        info = ctx.lir.loop_manager[loop_id]
        frame = LoopFrame(loop_id)
        if not expr.loop_ids and info.parent_id is None:   # a nest begins: scratch buffers start at their rows
            ctx.rebase_buffers(e for e in ctx.lir.expressions if loop_id in e.loop_ids)
        work = ctx.sym(info.work_amount)
        if info.is_tail:
            frame.remaining = ctx.variable(f"rem{loop_id}", "int64_t")
            count = f"{ctx.operand(info.work_amount)} % {info.increment}" if info.parent_id is not None else work
            ctx.comment(expr, f"tail of loop {info.parent_id if info.parent_id is not None else loop_id} "
                              f"over dim {info.dim}")
            ctx.line(f"{frame.remaining} = {count};")
            ctx.open(f"if ({frame.remaining} > 0)")
        elif info.evaluate_once:
            ctx.comment(expr, f"loop {loop_id} over dim {info.dim}, one iteration of {info.increment}")
            ctx.open()
        else:
            n = ctx.counter(expr.out_regs[0])
            ctx.comment(expr, f"loop {loop_id} over dim {info.dim}, {work} elements by {info.increment}")
            ctx.open(f"for ({n} = {work}; {n} >= {info.increment}; {n} -= {info.increment})")
        ctx.loops.append(frame)


class LoopEndEmitter(Emitter):
    """Pointer increments at the end of every iteration, finalization offsets after the loop."""

    def emit(self, ctx: KernelContext, expr) -> None:
        frame = ctx.loops.pop()
        info = ctx.lir.loop_manager[frame.loop_id]
        ctx.comment(expr)
        for lp in info.ports:
            if lp.is_incremented and not lp.ptr_increment.is_zero:
                reg = self._buffer_reg(ctx, lp)
                if frame.remaining is None:
                    ctx.shift_buffer(reg, lp.ptr_increment * info.increment, lp.data_size)
                else:
                    ctx.shift_buffer(reg, lp.ptr_increment, lp.data_size, times=frame.remaining)
        ctx.close()
        for lp in info.ports:
            if not lp.finalization_offset.is_zero:
                ctx.shift_buffer(self._buffer_reg(ctx, lp), lp.finalization_offset, lp.data_size)

    @staticmethod
    def _buffer_reg(ctx: KernelContext, lp):
        return ctx.buffer_regs[tuple(lp.port.expr.attrs["buffer"])]
