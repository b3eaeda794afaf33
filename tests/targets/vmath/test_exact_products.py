"""The builder's exact-product helpers at every ISA level: ``two_product`` gives a*b = p + e exactly,
``mul_add_exact`` rounds a*b + c once where the sum cancels (FMA, or f64 lanes without one), and
``fma`` asks for no FMA on levels without one (checked in the accuracy tests' assembly)."""
from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from snipjit.targets import isa
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.vmath import LLVMVectorBuilder
from snipjit.targets.vmath.vector import Vec, mul_add_exact, two_product

F32 = ir.FloatType()
I64 = ir.IntType(64)


def compile_products(level: isa.IsaLevel) -> tuple[jit.CompiledModule, ctypes._CFuncPtr]:
    """``products(a, b, c, p, e, m, n)``: p, e = two_product(a, b); m = mul_add_exact(a, b, c), for n a
    multiple of the level's lanes."""
    width = level.f32_lanes
    vec = ir.VectorType(F32, width)
    module = ir.Module(name="products")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [F32.as_pointer()] * 6 + [I64]), "products")
    *pointers, n = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    at = [b.bitcast(b.gep(p, [i]), vec.as_pointer()) for p in pointers]
    vb = LLVMVectorBuilder(b, width, level.fused_multiply_add)
    x, y, z = (Vec(vb, b.load(p, align=4), "f32") for p in at[:3])
    product, error = two_product(x, y)
    for value, p in zip((product, error, mul_add_exact(x, y, z)), at[3:]):
        b.store(value.value, p, align=4)
    following = b.add(i, I64(width))
    i.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed("<", following, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    compiled = jit.compile(module)
    return compiled, compiled.cfunc("products", None, *[ctypes.c_void_p] * 6, ctypes.c_int64)


def test_two_product_is_exact_and_mul_add_rounds_cancelling_sums_once(level: isa.IsaLevel):
    rng = np.random.default_rng(7)
    n = 4096
    a = (rng.uniform(-1, 1, n) * 2.0 ** rng.integers(-40, 40, n)).astype(np.float32)
    b = (rng.uniform(-1, 1, n) * 2.0 ** rng.integers(-40, 40, n)).astype(np.float32)
    exact = a.astype(np.float64) * b.astype(np.float64)   # 48 significand bits: exact in float64
    nudge = np.spacing(np.abs(exact.astype(np.float32))) * rng.integers(-3, 4, n)
    c = (-exact.astype(np.float32) + nudge).astype(np.float32)   # a*b + c cancels to a few ulp of a*b
    p, e, m = (np.empty(n, np.float32) for _ in range(3))
    _, products = compile_products(level)
    products(*(v.ctypes.data for v in (a, b, c, p, e, m)), n)
    assert np.array_equal(p, exact.astype(np.float32))
    assert np.array_equal(p.astype(np.float64) + e.astype(np.float64), exact)
    assert np.array_equal(m, (exact + c.astype(np.float64)).astype(np.float32))   # exact in float64 too
