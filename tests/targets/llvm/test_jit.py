"""The host JIT: CPU detection, compiling and calling, error reporting, assembly, threads."""
import ctypes
import gc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from llvmlite import ir

from snipjit.targets.llvm import jit

F32 = ir.FloatType()
I64 = ir.IntType(64)


def cpuinfo_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def fma_kernel(width: int) -> ir.Module:
    """void axpy(float* x, float* out, i64 n): out = x*x + 1, n a multiple of ``width``."""
    vec = ir.VectorType(F32, width)
    module = ir.Module(name=f"axpy{width}")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [F32.as_pointer()] * 2 + [I64]), "axpy")
    x, out, n = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, I64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    src = b.bitcast(b.gep(x, [i]), vec.as_pointer())
    dst = b.bitcast(b.gep(out, [i]), vec.as_pointer())
    v = b.load(src, align=4)
    b.store(b.fadd(b.fmul(v, v), ir.Constant(vec, [1.0] * width)), dst, align=4)
    following = b.add(i, I64(width))
    i.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return module


def run_axpy(compiled: jit.CompiledModule, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    fn = compiled.cfunc("axpy", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    fn(x.ctypes.data, out.ctypes.data, x.size)
    return out


def test_host_has_a_named_cpu_and_the_features_cpuinfo_lists(monkeypatch):
    monkeypatch.delenv("SNIPJIT_ISA", raising=False)   # the host's own level, not a forced lower one
    host = jit.host()
    assert host.cpu and host.cpu != "generic"
    assert host.has_feature("sse2") and not host.has_feature("no-such-feature")
    flags = cpuinfo_flags()
    for flag in ("avx2", "avx512f", "fma"):
        if flag in flags:
            assert host.has_feature(flag), flag


@pytest.mark.parametrize(
    "features, lanes32, lanes64",
    [("+avx2,+fma,+f16c,+avx512f,+avx512bw,+avx512dq,+avx512vl,+sse2", 16, 8), ("+avx2,+fma,+f16c,-avx512f", 8, 4),
     ("-avx2,+sse2", 4, 2)],
)
def test_vector_lanes_follow_the_widest_vector_extension(features, lanes32, lanes64):
    host = jit.HostInfo("x86_64-unknown-linux-gnu", "test", features)
    assert (host.vector_lanes(), host.vector_lanes(64)) == (lanes32, lanes64)


@pytest.mark.parametrize("width", [4, 8, 16])
def test_vector_kernel_compiles_and_runs(width):
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    np.testing.assert_array_equal(run_axpy(jit.compile(fma_kernel(width)), x), x * x + 1)


REGISTERS = {512: "zmm", 256: "ymm", 128: "xmm"}


def test_vectors_of_the_level_use_its_registers(level):
    """At every ISA level: its own width in its registers (zmm, ymm, xmm), none wider."""
    asm = jit.compile(fma_kernel(level.f32_lanes)).asm()
    assert f"%{REGISTERS[level.vector_bits]}" in asm
    assert not [r for bits, r in REGISTERS.items() if bits > level.vector_bits and f"%{r}" in asm]


def test_optimised_ir_is_kept_for_debugging():
    text = "define i32 @seven() {\n  %a = add i32 3, 4\n  ret i32 %a\n}\n"
    compiled = jit.compile(text)
    assert "ret i32 7" in compiled.llvm_ir()
    assert compiled.cfunc("seven", ctypes.c_int32)() == 7


def test_ir_that_does_not_parse_is_reported():
    with pytest.raises(jit.JitError, match="does not parse"):
        jit.compile("define i32 @f() { ret float 1.0 }")


def test_ir_that_does_not_verify_is_reported():
    text = "define i32 @f(i32 %x) {\n  %a = add i32 %b, 1\n  %b = add i32 %a, 1\n  ret i32 %a\n}\n"
    with pytest.raises(jit.JitError, match="does not verify.*dominate"):
        jit.compile(text)


def test_unknown_function_is_reported_with_the_known_ones():
    compiled = jit.compile(fma_kernel(4))
    with pytest.raises(jit.JitError, match=r"no function 'axpy2'.*\['axpy'\]"):
        compiled.address("axpy2")


def test_a_ctypes_function_keeps_its_module_alive():
    fn = jit.compile("define i32 @nine() {\n  ret i32 9\n}\n").cfunc("nine", ctypes.c_int32)
    gc.collect()
    assert fn() == 9


def test_concurrent_compiles_give_independent_modules():
    def build(k: int) -> int:
        text = f"define i64 @value() {{\n  %r = mul i64 {k}, 3\n  ret i64 %r\n}}\n"
        return jit.compile(text).cfunc("value", ctypes.c_int64)()

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(build, range(16))) == [3 * k for k in range(16)]
