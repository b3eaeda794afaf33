"""The strided copy kernel's machine code on CPUs other than this one: no lane masks anywhere (AVX2 runs
them as vmaskmov, slow on AMD), and its dense rows copy by whole vectors of the CPU's width."""
import pytest
from machine_code import CPUS, innermost_loops

from snipjit.targets import isa
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.copy import copy_module


@pytest.mark.parametrize("cpu, level", CPUS)
@pytest.mark.parametrize("element_bytes", [1, 2, 4, 8])
def test_rows_copy_without_masks(cpu, level, element_bytes):
    asm = jit.assembly_for(copy_module("copy", element_bytes), cpu)
    assert "maskmov" not in asm and "{%k" not in asm
    register = "zmm" if level is isa.AVX512 else "ymm"
    assert any(sum(register in line for line in loop) >= 2 for loop in innermost_loops(asm))
