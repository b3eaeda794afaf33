"""What every kernel built by hand rather than by the Snippets generator shares (the GEMM-like kernels' `GemmBuilder`,
the window kernel's `WindowBuilder`, LRN): f32 vectors of the ISA level's width, the intrinsics on them (declared
once per module), and addresses, broadcasts, loads, stores and multiply-adds through the current IR builder."""
from __future__ import annotations

from typing import Protocol

from llvmlite import ir

from .tail_store import store_tail

F32 = ir.FloatType()
I32 = ir.IntType(32)
I1 = ir.IntType(1)


class KernelShape(Protocol):
    """What the builders read of a kernel's shape (`gemm.MicroKernel`, the window, int8, attention, Winograd ones)."""
    lanes: int     # f32 lanes per vector
    fused: bool    # FMA instructions (else a multiply and an add)

    @property
    def name(self) -> str: ...


class VectorBuilder:
    """f32 vector helpers emitting through `b` (the builder of the function being emitted) for `shape`."""
    shape: KernelShape
    b: ir.IRBuilder

    def __init__(self, shape: KernelShape, builder: ir.IRBuilder):
        self.shape, self.b, self.module = shape, builder, builder.module
        self.declare_vectors(builder.module)

    def declare_vectors(self, module: ir.Module) -> None:
        """The vector and mask types, and the intrinsics of `module` (declared there once: a builder made for
        code inside another kernel's module finds them)."""
        lanes, ptr = self.shape.lanes, ir.PointerType()
        self.vec = vec = ir.VectorType(F32, lanes)
        self.mask_t = mask_t = ir.VectorType(I1, lanes)

        def declare(name: str, typ: ir.FunctionType) -> ir.Function:
            return module.globals.get(name) or ir.Function(module, typ, name)

        self.fma = declare(f"llvm.fma.v{lanes}f32", ir.FunctionType(vec, [vec, vec, vec]))
        self.masked_load = declare(f"llvm.masked.load.v{lanes}f32.p0", ir.FunctionType(vec, [ptr, I32, mask_t, vec]))
        self.masked_store = declare(f"llvm.masked.store.v{lanes}f32.p0",
                                    ir.FunctionType(ir.VoidType(), [vec, ptr, I32, mask_t]))
        self.prefetch = declare("llvm.prefetch.p0", ir.FunctionType(ir.VoidType(), [ptr, I32, I32, I32]))
        self.zero = ir.Constant(vec, None)
        self.null = ir.Constant(ptr, None)

    def at(self, base, index):
        """The address of float `index` from `base`."""
        return self.b.gep(base, [index], source_etype=F32)

    def splat(self, value, typ=F32):
        """`value` (of type `typ`) in every lane."""
        b, lanes = self.b, self.shape.lanes
        v = b.insert_element(ir.Constant(ir.VectorType(typ, lanes), None), value, ir.Constant(I32, 0))
        return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def constant(self, value: float):
        return ir.Constant(self.vec, [value] * self.shape.lanes)

    def multiply_add(self, a, b, c):
        if self.shape.fused:
            return self.b.call(self.fma, [a, b, c])
        return self.b.fadd(self.b.fmul(a, b), c)

    def load(self, address, mask=None):
        """The vector at `address`, or under `mask` its lanes (zeros elsewhere)."""
        if mask is None:
            return self.b.load(address, typ=self.vec, align=4)
        return self.b.call(self.masked_load, [address, ir.Constant(I32, 4), mask, self.zero])

    def store(self, value, address, mask=None):
        """Store `value`, or under `mask` the lanes below a count (`tail_store`)."""
        self.store_all([value], [address], mask)

    def store_all(self, values: list, addresses: list, mask=None):
        """Store each of `values` at its address, or under `mask` (one for all) the lanes below a count."""
        if mask is None:
            for value, address in zip(values, addresses):
                self.b.store(value, address, align=4)
        else:
            store_tail(self.b, values, addresses, mask, self.masked_store)

    def max_with_nan(self, a, b_):
        """The larger of a and b_, NaN where either is (a NaN anywhere in a window reaches its output, as in
        NumPy). x86's max instruction returns its second operand where either is NaN: the two orders, whose
        results agree but for NaN, or-ed bit by bit (a NaN's exponent and nonzero mantissa survive the or).
        llvm.maximum does this too but orders -0 below +0 as well: five instructions instead of three."""
        b, ints = self.b, ir.VectorType(I32, self.shape.lanes)
        first = b.select(b.fcmp_ordered(">", a, b_), a, b_)
        second = b.select(b.fcmp_ordered(">", b_, a), b_, a)
        return b.bitcast(b.or_(b.bitcast(first, ints), b.bitcast(second, ints)), self.vec)

    def prefetch_to_l2(self, address) -> None:
        """Ask for the cache line at `address` in L2, for reading (never faults: any address will do)."""
        self.b.call(self.prefetch, [address, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])

    def prefetch_for_write(self, address) -> None:
        """Ask for the cache line at `address` in L1, owned for writing (never faults: any address will do)."""
        self.b.call(self.prefetch, [address, ir.Constant(I32, 1), ir.Constant(I32, 3), ir.Constant(I32, 1)])
