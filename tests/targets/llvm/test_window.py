"""The window kernel's machine code on CPUs other than this one: masked loads and stores (AVX2's slow
vmaskmov, AVX-512's mask registers) appear only in the functions of the channel tail, the hot loop of
the widest register block holds its FMAs without vector spills, and the portable level needs no library calls."""
import re

import pytest
from machine_code import CPUS, innermost_loops

from snipjit.targets import isa
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.window import COMBINES, WindowKernel, window_blocks, window_module
from snipjit.targets.llvm.window_reuse import FEW_COLUMNS



def kernel(combine: str, level: isa.IsaLevel, kw: int = 0, sw: int = 1, rows: int = 1) -> WindowKernel:
    """(Square kernels and strides: two rows are paired at the column stride.)"""
    pixels, vectors = window_blocks(level.vector_registers, kw, rows, sw=sw)
    return WindowKernel(combine, pixels, vectors, level.f32_lanes, level.fused_multiply_add, kw=kw, sw=sw, rows=rows,
                        registers=level.vector_registers, kh=kw, sh=sw if rows == 2 else 1)


def functions(asm: str) -> dict[str, str]:
    """Each function's assembly, by name."""
    parts = re.split(r"^(snipjit_window_\w+):\n", asm, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def masked(text: str) -> bool:
    return "maskmov" in text or "{%k" in text


@pytest.mark.parametrize("cpu, level", CPUS)
@pytest.mark.parametrize("combine, kw, rows",
                         [(combine, 0, 1) for combine in COMBINES] + [("madd", 3, 1), ("madd", 3, 2), ("max", 3, 1)])
def test_masks_only_in_the_channel_tail(cpu, level, combine, kw, rows):
    shape = kernel(combine, level, kw, rows=rows)
    bodies = functions(jit.assembly_for(window_module(shape), cpu))
    # the kernel, 3 pixel blocks × (vectors, one vector, masked tail); reusing inputs, every block width
    # × (whole vectors inside the input, clipped, the masked tail on the tap loop; two rows inside, clipped)
    # and a row function per width (and per one or two rows)
    assert len(bodies) == 1 + ((3 + 1 if rows == 1 else 5 + 2) * shape.pixels if kw else 3 * 3)
    for name, body in bodies.items():
        assert masked(body) == name.endswith("_masked"), name
    if level is isa.AVX2:
        assert any("vmaskmov" in body for body in bodies.values())


@pytest.mark.parametrize("cpu, level", CPUS)
@pytest.mark.parametrize("kw, sw, mode", [(0, 1, ""), (3, 1, "_reuse"), (5, 1, "_reuse"), (7, 1, "_reuse"),
                                         (5, 2, "_reuse"), (3, 1, "_clipped"), (7, 1, "_clipped"), (3, 2, "_clipped"),
                                         (3, 1, "_reuse2"), (3, 1, "_clipped2"), (5, 2, "_reuse2"),
                                         (5, 2, "_clipped2")])
def test_the_widest_block_s_tap_loop_keeps_its_vectors_in_registers(cpu, level, kw, sw, mode):
    """kw: the variant reusing inputs, its blocks one loop over the channel vectors with the kernel rows
    unrolled, each loading a kernel row's (pixels - 1)·sw + kw input columns and kw weight vectors once (two
    rows, at row stride sw: each of their kh + sw input rows feeding both output rows) and the bias."""
    if mode.endswith("2") and kw == 5 and level.vector_registers < 32:
        pytest.skip("two rows of a 5×5 leave 2 pixels on 16 registers: not paired (window_launch.pairs)")
    shape = kernel("madd", level, kw, sw, rows=2 if mode.endswith("2") else 1)
    bodies = functions(jit.assembly_for(window_module(shape), cpu))
    register = "zmm" if level is isa.AVX512 else "ymm"
    for pixels in (shape.pixels, shape.pixels // 2):
        name = f"{shape.name}_{pixels}x{1 if kw else shape.vectors}{mode}"
        loops = [loop for loop in innermost_loops(bodies[name]) if any("vfmadd" in line for line in loop)]
        if not kw:
            loops = [max(loops, key=lambda lines: sum("vfmadd" in line for line in lines))]
        assert len(loops) == 1
        for loop in loops:
            fmas = sum(re.search(rf"vfmadd\w+\s+.*%{register}", line) is not None for line in loop)
            per_pass = pixels * kw if kw else pixels * shape.vectors   # a kernel row's, or a tap's
            assert fmas >= per_pass and fmas % per_pass == 0
            # (the loop over channel vectors ends in the clamp, its bounds maybe reloaded: not a spill of the FMAs')
            taps = loop[:max(i for i, line in enumerate(loop) if "vfmadd" in line) + 1] if kw else loop
            assert not [line for line in taps if masked(line) or re.search(r"\(%rsp\).*mm|mm.*\(%rsp\)", line)]
            if kw:
                rows, registers, kh = shape.rows, shape.registers, shape.kh
                assert fmas == rows * kh * per_pass
                loads = sum(re.search(rf"vmovups\s+\S*\(.*%{register}|vfmadd\w+\s+\S*\(", line) is not None
                            for line in taps)
                # weights are FMA memory operands unless they fit beside the accumulators and an input column
                columns, live = (pixels - 1) * sw + kw, rows * (pixels + kw)
                weights = kw if live + 1 <= registers else pixels * kw   # per kernel row
                input_rows = kh + (rows - 1) * shape.sh
                assert loads <= input_rows * columns + rows * kh * weights + 1, "\n".join(loop)   # (+ the bias)


@pytest.mark.parametrize("cpu, level", CPUS[1::2])   # (one AVX2 and one AVX-512 CPU: each case compiles a module)
@pytest.mark.parametrize("kw, sw", [(3, 2), (5, 2), (7, 1)])
def test_a_wide_block_makes_its_column_addresses_instead_of_reloading_them(cpu, level, kw, sw):
    """Past FEW_COLUMNS input columns per row, the block's loop over channel vectors makes the columns'
    addresses (`column_addresses`) rather than reloading a spilled pointer before each input load: what it
    reads from the stack is a few values per input row (the row's pointer, whether it lies inside the input, and
    on 16-pixel blocks a base LLVM keeps there), not one per input column."""
    shape = kernel("madd", level, kw, sw)
    assert (shape.pixels - 1) * sw + kw > FEW_COLUMNS
    bodies = functions(jit.assembly_for(window_module(shape), cpu))
    loops = [loop for loop in innermost_loops(bodies[f"{shape.name}_{shape.pixels}x1_reuse"])
             if any("vfmadd" in line for line in loop)]
    assert len(loops) == 1
    stack = [line for line in loops[0] if "(%rsp)" in line]
    assert len(stack) <= 3 * shape.kh + 3, "\n".join(loops[0])


@pytest.mark.parametrize("cpu, level", CPUS[1::2])
@pytest.mark.parametrize("kw, sw", [(3, 2), (7, 1)])
def test_a_max_pool_block_loads_each_input_column_once(cpu, level, kw, sw):
    """A max pool reusing inputs: per kernel row, each of the block's (pixels - 1)·sw + kw input columns loaded
    once (or folded into a max) and fed to every pixel whose window holds it, two max instructions per tap
    (the NaN-keeping max), no vector spill."""
    shape = kernel("max", level, kw, sw)
    bodies = functions(jit.assembly_for(window_module(shape), cpu))
    loops = [loop for loop in innermost_loops(bodies[f"{shape.name}_{shape.pixels}x1_reuse"])
             if any("vmaxps" in line for line in loop)]
    assert len(loops) == 1
    loop = loops[0]
    maxes = 2 * shape.kh * shape.pixels * kw   # (less a pixel's worth: a max with the initial -inf folds)
    assert maxes - shape.pixels <= sum("vmaxps" in line for line in loop) <= maxes
    register = "zmm" if level is isa.AVX512 else "ymm"
    loads = sum(re.search(rf"vmovups\s+\S*\(.*%{register}|vmaxps\s+\S*\(", line) is not None for line in loop)
    assert loads <= shape.kh * ((shape.pixels - 1) * sw + kw), "\n".join(loop)
    assert not [line for line in loop if re.search(rf"\(%rsp\).*{register}|{register}.*\(%rsp\)", line)]


def test_the_portable_level_multiplies_and_adds_without_library_calls():
    asm = jit.assembly_for(window_module(kernel("madd", isa.SSE)), "x86-64-v2")
    named = [target for target in re.findall(r"call\w*\s+(\S+)", asm) if not target.startswith("*")]
    assert all(target.startswith("snipjit_window_") for target in named) and "fma" not in asm
    assert "mulps" in asm and "ymm" not in asm


def test_an_unknown_combine_is_refused():
    with pytest.raises(ValueError, match="combine"):
        WindowKernel("min", 4, 2, 8)
    with pytest.raises(ValueError, match="mean does not reuse"):
        WindowKernel("mean", 4, 1, 8, kw=3, kh=3)
    with pytest.raises(ValueError, match="max reuses inputs one output row at a time"):
        WindowKernel("max", 4, 1, 8, kw=3, kh=3, rows=2)
    with pytest.raises(ValueError, match="kernel rows"):   # (else its blocks would have no FMAs)
        WindowKernel("madd", 4, 1, 8, kw=3)
    with pytest.raises(ValueError, match="kernel rows"):
        WindowKernel("madd", 4, 1, 8, kw=3, grouped=1, kh=3)
    with pytest.raises(ValueError, match="row stride 1 or 2"):   # (a row stride only for two rows at once)
        WindowKernel("madd", 4, 1, 8, kw=5, kh=5, sh=2)
    with pytest.raises(ValueError, match="row stride 1 or 2"):
        WindowKernel("madd", 4, 1, 8, kw=5, kh=5, rows=2, sh=3)


@pytest.mark.parametrize("cpu, level", [("znver3", isa.AVX2), ("skylake-avx512", isa.AVX512), ("x86-64-v2", isa.SSE)])
@pytest.mark.parametrize("kw, sw, vectors", [(3, 1, 1), (3, 2, 1), (7, 1, 1), (3, 1, 2), (5, 1, 2)])
def test_a_grouped_kernel_s_blocks_broadcast_each_column_once_per_channel_without_spills(cpu, level, kw, sw, vectors):
    """The grouped variant (one or two vectors per group): per input row and channel of the group, each input
    column broadcast once (AVX-512: at most, it may fold them into the FMAs), kw weight vectors per group vector
    loaded once, no mask, no vector spill, in the widest block inside the input and clipped."""
    pixels, _ = window_blocks(level.vector_registers, kw, 1, vectors, level.fused_multiply_add)
    if vectors == 2 and pixels < 4:
        pytest.skip(f"two vectors per group at kernel width {kw} leave {pixels} pixels per block: not taken")
    shape = WindowKernel("madd", pixels, 1, level.f32_lanes, level.fused_multiply_add, kw=kw, sw=sw,
                         registers=level.vector_registers, grouped=vectors)
    bodies = functions(jit.assembly_for(window_module(shape), cpu))
    assert len(bodies) == 1 + 3 * shape.pixels   # the kernel, blocks inside and clipped, a row function per width
    assert not any(masked(body) for body in bodies.values())
    register = {isa.AVX512: "zmm", isa.AVX2: "ymm", isa.SSE: "xmm"}[level]
    product = "vfmadd" if level.fused_multiply_add else "mulps"
    columns, group = (pixels - 1) * sw + kw, level.f32_lanes * vectors
    for mode in ("reuse", "clipped"):
        loops = [loop for loop in innermost_loops(bodies[f"{shape.name}_{pixels}x1_{mode}"])
                 if any(product in line for line in loop)]
        assert len(loops) == 1   # the kernel rows' loop
        loop = loops[0]
        assert sum(product in line for line in loop) == group * pixels * kw * vectors
        broadcasts = sum(re.search(r"vbroadcastss|shufps", line) is not None for line in loop)   # (SSE: movss, shufps)
        assert broadcasts <= group * columns
        assert not [line for line in loop if re.search(rf"\(%rsp\).*{register}|{register}.*\(%rsp\)", line)]


def test_blocks_reusing_inputs_are_widest_for_wide_kernels_of_column_stride_1_on_32_registers():
    assert window_blocks(32, 5) == (16, 1) and window_blocks(32, 7) == (16, 1)
    assert window_blocks(32, 5, sw=2) == (8, 1) and window_blocks(32, 3) == (8, 1) and window_blocks(32, 3, 2) == (8, 1)
    assert window_blocks(16, 5) == (8, 1) and window_blocks(16, 7) == (8, 1)
