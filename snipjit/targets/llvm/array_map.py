"""An LLVM function that maps a vector body over arrays: ``out[i] = body(builder, *inputs[i])`` over full
vectors, then one masked remainder. The math library's accuracy tests and its throughput benchmark compile
its functions through it, one such function each.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

F32 = ir.FloatType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)


def _splat(b: ir.IRBuilder, scalar: ir.Value, width: int) -> ir.Value:
    vec = ir.VectorType(scalar.type, width)
    one = b.insert_element(ir.Constant(vec, None), scalar, I32(0))
    return b.shuffle_vector(one, ir.Constant(vec, None), ir.Constant(ir.VectorType(I32, width), [0] * width))


def _masked(b: ir.IRBuilder, kind: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
    vec = ret if kind == "load" else args[0].type
    name = f"llvm.masked.{kind}.v{vec.count}f32.p0"
    fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, args)


def map_kernel(module: ir.Module, name: str, body: Callable[..., ir.Value], arity: int, width: int) -> None:
    """``out[i] = body(builder, *inputs[i])`` over full vectors, then one masked remainder."""
    vec = ir.VectorType(F32, width)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [F32.as_pointer()] * (arity + 1) + [I64]), name=name)
    *inputs, out, n = fn.args
    entry, loop, tail, masked, done = (fn.append_basic_block(s) for s in ("entry", "loop", "tail", "masked", "done"))
    b = ir.IRBuilder(entry)
    full = b.and_(n, I64(-width))
    b.cbranch(b.icmp_signed(">", full, I64(0)), loop, tail)

    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    pointers = [b.bitcast(b.gep(p, [i]), vec.as_pointer()) for p in (*inputs, out)]
    operands = [b.load(p, align=4) for p in pointers[:-1]]
    b.store(body(b, *operands), pointers[-1], align=4)
    following = b.add(i, I64(width))
    i.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed("<", following, full), loop, tail)

    b.position_at_end(tail)
    b.cbranch(b.icmp_signed("<", full, n), masked, done)
    b.position_at_end(masked)
    lanes = b.add(_splat(b, full, width), ir.Constant(ir.VectorType(I64, width), list(range(width))))
    mask = b.icmp_signed("<", lanes, _splat(b, n, width))
    zeros = ir.Constant(vec, [0.0] * width)
    operands = [_masked(b, "load", vec, b.gep(p, [full]), I32(4), mask, zeros) for p in inputs]
    _masked(b, "store", ir.VoidType(), body(b, *operands), b.gep(out, [full]), I32(4), mask)
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
