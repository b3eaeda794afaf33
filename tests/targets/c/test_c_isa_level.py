"""The C target compiles for the ISA level SNIPJIT_ISA selects: -march=native at the host's own level,
the level's generic CPU (tuned for the host) below it."""
import shutil

import pytest

from snipjit.targets import isa
from snipjit.targets.c.gcc import CCompiler

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler")


def test_native_level_compiles_for_the_host(monkeypatch):
    monkeypatch.delenv("SNIPJIT_ISA", raising=False)
    assert CCompiler.find().arch == ("-march=native",)


@pytest.mark.parametrize("level, present, absent", [("avx2", "__AVX2__", "__AVX512F__"), ("sse", "__SSE4_2__", "__AVX__")])
def test_a_forced_level_compiles_for_that_level(monkeypatch, level, present, absent):
    try:
        target = isa.select_for_host(level)
    except isa.IsaError:
        pytest.skip(f"this CPU cannot execute {level} code")
    if target.native:
        pytest.skip(f"{level} is this CPU's own level: forcing it compiles native code")
    monkeypatch.setenv("SNIPJIT_ISA", level)
    compiler = CCompiler.find()
    assert compiler.arch == (f"-march={isa.BY_NAME[level].generic_cpu}", "-mtune=native")
    assert present in compiler.native_macros and absent not in compiler.native_macros
    assert compiler.identity != CCompiler(compiler.path).identity
