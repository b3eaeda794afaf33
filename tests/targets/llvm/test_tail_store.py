"""Storing a vector's first lanes (`tail_store`): every count from none to all at every ISA level the host
runs, for floats and bytes, writes exactly those lanes; AVX2's code has no masked store (vmaskmov) and the
GEMM's tail panels none either; AVX-512's stores under a mask register."""
import ctypes
import re

import numpy as np
import pytest
from llvmlite import ir
from machine_code import CPUS

from snipjit.targets import isa
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.gemm import MicroKernel, gemm_module, register_blocks
from snipjit.targets.llvm.kernel_emitter import splat
from snipjit.targets.llvm.tail_store import cheap_masked_stores, store_tail

I64 = ir.IntType(64)
I32 = ir.IntType(32)


def tail_module(lanes: int, element: ir.Type) -> ir.Module:
    """`void tail(src, dst, count)`: dst[:count] = src[:count] for a vector of `lanes` elements."""
    module = ir.Module("tail")
    ptr, vec = ir.PointerType(), ir.VectorType(element, lanes)
    mask_t = ir.VectorType(ir.IntType(1), lanes)
    suffix = "f32" if isinstance(element, ir.FloatType) else "i8"
    masked_store = ir.Function(module, ir.FunctionType(ir.VoidType(), [vec, ptr, I32, mask_t]),
                               f"llvm.masked.store.v{lanes}{suffix}.p0")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64]), "tail")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    src, dst, count = fn.args
    value = b.load(src, typ=vec, align=1)
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    store_tail(b, [value], [dst], b.icmp_signed("<", lane_ids, splat(b, count, lanes)), masked_store,
               4 if isinstance(element, ir.FloatType) else 1)
    b.ret_void()
    return module


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_every_count_stores_exactly_the_first_lanes(level, dtype):
    lanes = level.f32_lanes
    element = ir.FloatType() if dtype == np.float32 else ir.IntType(8)
    compiled = jit.compile(tail_module(lanes, element))
    tail = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(compiled.address("tail"))
    src = (np.arange(1, lanes + 1) * 3).astype(dtype)
    for count in range(lanes + 3):   # (counts past the lanes select them all)
        dst = np.full(lanes + 4, 99, dtype)
        tail(src.ctypes.data, dst.ctypes.data, count)
        stored = min(count, lanes)
        assert (dst[:stored] == src[:stored]).all(), (count, dst)
        assert (dst[stored:] == 99).all(), (count, dst)


def _masked_stores(asm: str) -> list[str]:
    """vmaskmov stores: the memory operand last (AT&T)."""
    return [line for line in asm.splitlines() if re.search(r"vmaskmovp[sd]\s+%[xy]mm\d+,\s*%[xy]mm\d+,\s*[^%\s]", line)]


@pytest.mark.parametrize("cpu, level", CPUS)
def test_avx2_stores_pieces_and_avx512_a_masked_store(cpu, level):
    asm = jit.assembly_for(tail_module(level.f32_lanes, ir.FloatType()), cpu)
    if cheap_masked_stores(level.f32_lanes):
        assert re.search(r"vmovups\s+%zmm\d+,\s*\S+\s*\{%k", asm)
    else:
        assert not _masked_stores(asm) and "vmovss" in asm
        assert any(op in asm for op in ("vmovlps", "vmovsd", "vmovq"))   # (two lanes)


@pytest.mark.parametrize("cpu", [cpu for cpu, level in CPUS if level is isa.AVX2])
@pytest.mark.parametrize("kind", ["gemm", "conv"])
def test_the_gemm_stores_its_tail_panels_without_vmaskmov(cpu, kind):
    for mr, vectors, unroll in register_blocks(isa.AVX2.vector_registers):
        shape = MicroKernel(mr, vectors, isa.AVX2.f32_lanes, unroll, conv=kind == "conv")
        asm = jit.assembly_for(gemm_module(shape), cpu)
        assert not _masked_stores(asm), (shape.name, _masked_stores(asm)[:3])
