"""The GEMM microkernel's machine code on CPUs other than this one (LLVM compiles for any x86 CPU name):
the hot K loop of every register block the runtime uses, in products and in convolutions, holds its
FMAs, no masked load or store and no stack access (no register spills), on AVX2 and on AVX-512 CPUs.
(A convolution of an NCHW image, a network's 3-channel input, unrolls a kernel row and its channels: its hot loop
is the one over kernel rows, which keeps every vector in registers for a fixed column stride.)"""
import re

import pytest
from machine_code import CPUS, hot_loop, innermost_loops

from snipjit.targets import isa
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.gemm import MicroKernel, gemm_module, register_blocks


@pytest.mark.parametrize("cpu, level", CPUS)
@pytest.mark.parametrize("block", ["wide", "narrow", "thin", "three"])
@pytest.mark.parametrize("kind", ["gemm", "conv"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_the_hot_k_loop_has_no_masks_and_no_spills(cpu, level, block, kind, prefetch):
    """(A kernel asking for B's next slice ahead does it in the same loop: `prefetch` lines per iteration.)"""
    blocks = register_blocks(level.vector_registers)
    index = ["wide", "narrow", "thin", "three"].index(block)
    if index >= len(blocks):
        pytest.skip(f"no {block} block on {level.vector_registers} registers")
    mr, vectors, unroll = blocks[index]
    shape = MicroKernel(mr, vectors, level.f32_lanes, unroll, conv=kind == "conv", prefetch=prefetch)
    loop = hot_loop(jit.assembly_for(gemm_module(shape), cpu))
    register = "zmm" if level is isa.AVX512 else "ymm"
    fmas = sum(re.search(rf"vfmadd\w+\s+.*%{register}", line) is not None for line in loop)
    assert fmas >= mr * vectors * unroll and fmas % (mr * vectors) == 0
    prefetches = sum(re.match(r"\s*prefetcht1\s", line) is not None for line in loop)
    assert prefetches == prefetch * fmas // (mr * vectors * unroll)
    assert not [line for line in loop if "maskmov" in line or "{%k" in line]
    # (no stack access but, at most, two general registers read from it: loop bounds and offsets, one load per
    # mr·vectors·unroll FMAs each, where the tail panels' stores after the loop leave the 6x2 block one register
    # short, and a convolution's output pixel carried from block to block the 4x3 block's K loop on Haswell)
    stack = [line for line in loop if "(%rsp)" in line]
    reloads = [line for line in stack if re.match(r"\s*(movq|cmpq|addq)\s+-?\d+\(%rsp\), %r\w+$", line)]
    assert stack == reloads and len(reloads) <= 2


def test_the_portable_level_multiplies_and_adds_without_library_calls():
    mr, vectors, unroll = register_blocks(isa.SSE.vector_registers)[0]
    shape = MicroKernel(mr, vectors, isa.SSE.f32_lanes, unroll, fused=False)
    asm = jit.assembly_for(gemm_module(shape), "x86-64-v2")
    assert "call" not in asm and "mulps" in asm and "ymm" not in asm


@pytest.mark.parametrize("cpu, level", CPUS)
@pytest.mark.parametrize("block", ["wide", "narrow"])
@pytest.mark.parametrize("width, stride", [(7, 2), (3, 2), (4, 4), (3, 1)])
def test_a_first_layers_kernel_rows_keep_their_vectors_in_registers(cpu, level, block, width, stride):
    """A network's first layer (3 channels, NCHW): each kernel row's taps and channels unrolled, its rows at
    offsets known when generating — with the column stride a runtime value, AVX-512's 7×7 rows spilled
    ~170 vectors each; blocks reaching past the image's columns read the same line from a buffer."""
    mr, vectors, _ = register_blocks(level.vector_registers)[["wide", "narrow"].index(block)]
    shape = MicroKernel(mr, vectors, level.f32_lanes, 1, conv=True, planar=True, kernel_width=width, channels=3,
                        column_stride=stride)
    register = "zmm" if level is isa.AVX512 else "ymm"
    fmas = mr * vectors * width * 3
    lines = [loop for loop in innermost_loops(jit.assembly_for(gemm_module(shape), cpu))
             if sum(re.search(rf"vfmadd\w+\s+.*%{register}", line) is not None for line in loop) == fmas]
    assert len(lines) == 2   # the blocks inside the image's columns, and those reaching past them (from a buffer)
    assert not [line for loop in lines for line in loop if "(%rsp)" in line and f"%{register}" in line]


@pytest.mark.parametrize("cpu, level", CPUS)
def test_a_first_layers_kernel_prefetches_the_next_blocks_output_lines(cpu, level):
    """Once per output line of the row block (outside the kernel-row loops); an NHWC convolution's kernel does not."""
    mr, vectors, _ = register_blocks(level.vector_registers)[0]
    planar = MicroKernel(mr, vectors, level.f32_lanes, 1, conv=True, planar=True, kernel_width=7, channels=3,
                         column_stride=2)
    asm = jit.assembly_for(gemm_module(planar), cpu)
    prefetches = [line for line in asm.splitlines() if re.match(r"\s*prefetch(w|t0)\s", line)]
    lines_per_row = -(-planar.nr // 16)
    assert len(prefetches) >= mr * lines_per_row
    assert not [line for loop in innermost_loops(asm) for line in loop if "prefetch" in line]
    nhwc = MicroKernel(mr, vectors, level.f32_lanes, 1, conv=True)
    assert "prefetch" not in jit.assembly_for(gemm_module(nhwc), cpu)
