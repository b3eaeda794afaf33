"""The C target against the LLVM target and the reference kernels.

Every compute op is tested on both targets, against the reference and against each other, in
tests/targets/test_compute_ops.py. Here: Equal on booleans, then the kernel's structure on both targets:
tails, broadcasts on every axis (including the innermost), dynamic dims, the parallel domain split into
sub-ranges, two-deep loop nests, bool masks, register spilling; reductions and normalisations through
`snipjit.compile`; the disk cache; and the error when no C compiler exists.

Every kernel run by `run` has guard elements after each output buffer, which must stay untouched.
"""
from __future__ import annotations

import numpy as np
import pytest

import snipjit
from snipjit import parse_graph
from snipjit.runtime.caches import kernel_cache
from snipjit.snippets.subgraph_compiler import compile_subgraph
from snipjit.targets import TargetError, get_target
from snipjit.targets.c import gcc
from snipjit.targets.c.target import CTarget
import guarded_kernels
from accuracy import assert_close
from guarded_kernels import Kernel

try:
    C = get_target("c")
except TargetError as exc:   # pragma: no cover - only on machines without a C compiler
    pytest.skip(str(exc), allow_module_level=True)
LLVM = get_target("llvm")
TARGETS = {"c": C, "llvm": LLVM}


pytestmark = pytest.mark.usefixtures("memory_only_kernel_cache")   # kernels compiled from this code


# ---- compiling and running kernels ------------------------------------------------------------------------
def compile_body(text: str, target="c", loop_depth: int = 1) -> Kernel:
    return guarded_kernels.compile_body(text, TARGETS[target] if isinstance(target, str) else target, loop_depth)


def data(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, shape).astype(np.float32)


# ---- ops the C emitters handle themselves (every compute op on both targets: tests/targets/test_compute_ops.py)
def test_equal_on_booleans_compares_masks():
    """(The LLVM target compares the all-ones patterns as floats, NaN == NaN, and gets false for true == true.)"""
    rng = np.random.default_rng(7)
    m, n = rng.random(589) < 0.5, rng.random(589) < 0.5
    got, = compile_body("graph(m: bool[589], n: bool[589]) -> [e] { [e] = Equal(m, n) }").run([m, n], (589,))
    np.testing.assert_array_equal(got, m == n)


# ---- kernel structure -----------------------------------------------------------------------------------------
CHAIN = "[a] = Mul(x, y)\n [b] = Relu(a)\n [c] = Sub(b, x)\n [m] = Greater(c, y)\n [z] = Where(m, c, y)"


def chain_reference(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The outputs (z, m) of CHAIN: exact f32 arithmetic, so kernels must match bit for bit."""
    c = np.maximum(x * y, 0) - x
    m = c > y
    return np.where(m, c, y), m


def chain_kernels(x_shape: str, y_shape: str, loop_depth: int = 1) -> list[Kernel]:
    text = f"graph(x: f32{x_shape}, y: f32{y_shape}) -> [z, m] {{ {CHAIN} }}"
    return [compile_body(text, t, loop_depth) for t in ("c", "llvm")]


def check_chain(kernels: list[Kernel], x: np.ndarray, y: np.ndarray, ranges=None) -> None:
    master = np.broadcast_shapes(x.shape, y.shape)
    want_z, want_m = chain_reference(x, y)
    for kernel in kernels:
        z, m = kernel.run([x, y], master, ranges)
        np.testing.assert_array_equal(m, want_m)
        np.testing.assert_array_equal(z, want_z)


def test_tails_dynamic_one_kernel_for_all_sizes():
    kernels = chain_kernels("[?]", "[?]")
    for n in (1, 15, 16, 17, 33, 100):
        check_chain(kernels, data(n, n), data(n, n + 1))


@pytest.mark.parametrize("y_shape", [(1, 5, 37), (4, 1, 37), (37,), (4, 5, 1), (1, 5, 1), ()], ids=str)
def test_broadcast_on_each_axis(y_shape):
    text = "[" + ",".join(map(str, y_shape)) + "]"
    check_chain(chain_kernels("[4,5,37]", text), data((4, 5, 37), 1), data(y_shape, 2))


def test_innermost_broadcast_of_a_computed_value():
    # the size-1 value is computed (Relu of a one-element load), so no Load+BroadcastMove pair forms
    text = "graph(x: f32[3,37], s: f32[3,1]) -> [z] {\n [t] = Relu(s)\n [z] = Add(x, t)\n}"
    x, s = data((3, 37), 1), data((3, 1), 2)
    for target in ("c", "llvm"):
        z, = compile_body(text, target).run([x, s], (3, 37))
        np.testing.assert_array_equal(z, x + np.maximum(s, 0))


def test_dynamic_dims_with_broadcast_inputs_and_sub_ranges():
    kernels = chain_kernels("[?,?,?]", "[1,?,?]")
    for n0, n1, n2 in [(2, 3, 17), (4, 1, 33), (1, 1, 1), (3, 2, 5)]:
        check_chain(kernels, data((n0, n1, n2), 1), data((1, n1, n2), 2))
    x, y = data((4, 6, 37), 3), data((1, 6, 37), 4)
    check_chain(kernels, x, y, ranges=[(0, 5), (5, 6), (6, 6), (6, 19), (19, 24)])


@pytest.mark.parametrize("y_shape", [(4, 1, 37), (6, 37)], ids=str)
def test_loop_depth_two(y_shape):
    text = "[" + ",".join(map(str, y_shape)) + "]"
    kernels = chain_kernels("[4,6,37]", text, loop_depth=2)
    assert all(k.compiled.parallel_rank == 1 for k in kernels)
    check_chain(kernels, data((4, 6, 37), 1), data(y_shape, 2), ranges=[(0, 1), (1, 4)])


def test_bool_inputs_and_outputs_with_tails():
    text = """graph(a: bool[?], b: bool[?], x: f32[?]) -> [n, w, c] {
      [n] = Not(a)
      [o] = Xor(n, b)
      [w] = Where(o, x, x)
      [c] = Less(w, x)
    }"""
    rng = np.random.default_rng(5)
    kernels = [compile_body(text, t) for t in ("c", "llvm")]
    for size in (1, 17, 33, 64):
        a, b, x = rng.random(size) < 0.5, rng.random(size) < 0.5, data(size, size)
        for kernel in kernels:
            n, w, c = kernel.run([a, b, x], (size,))
            np.testing.assert_array_equal(n, ~a)
            np.testing.assert_array_equal(w, x)
            np.testing.assert_array_equal(c, np.zeros(size, bool))


class TinyC(type(C)):
    """The C target with only three vector registers, to make the allocator spill loop values."""

    @property
    def registers(self) -> dict[str, int]:
        return {"vec": 3, "gpr": 64}


def test_register_spilling_of_loop_values():
    kernel = compile_body(guarded_kernels.WIDE, TinyC(compiler=C.compiler))
    assert "Spill" in kernel.compiled.linear_ir
    for n in (7, 50):
        x, y = data(n, 1), data(n, 2)
        got, = kernel.run([x, y], (n,))
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        want = ((np.exp(x64) + np.sin(y64)) - np.cos(x64) * np.tanh(y64)).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_register_spilling_of_scalars():
    """More Scalars than registers: they are rematerialised where they are used, not spilled."""
    kernel = compile_body("""graph(x: f32[?]) -> [z] {
      const c0: f32[] = 1.5
      const c1: f32[] = 2.5
      [a] = Mul(x, c0)
      [b] = Mul(x, c1)
      [z] = Add(a, b)
    }""", TinyC(compiler=C.compiler))
    x = data(21, 5)
    got, = kernel.run([x], (21,))
    np.testing.assert_array_equal(got, x * np.float32(1.5) + x * np.float32(2.5))


# ---- reductions and normalisations through the public API ---------------------------------------------------------
def _compiled_pair(text: str):
    graph = parse_graph(text)
    compiled = {t: snipjit.compile(graph, target=t) for t in ("c", "llvm")}
    for t, cm in compiled.items():
        assert {s.kind for s in cm.plan} == {"snippet"}, (t, [s.kind for s in cm.plan])
    return compiled, snipjit.compile(graph, implementations={"reference"})


def _check_against_both(compiled, ref, feeds, what: str, rtol: float, atol: float):
    """C against the reference and against LLVM; reductions and cancellations (x - mean, e^y + x) make the
    error relative to the inputs' scale, hence an absolute part."""
    want = ref.run(feeds)
    got = {t: cm.run(feeds) for t, cm in compiled.items()}
    for k, w in enumerate(want):
        c, llvm = np.asarray(got["c"][k]), np.asarray(got["llvm"][k])
        assert c.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(c, w, rtol=rtol, atol=atol, err_msg=f"{what} output {k}: C vs reference")
        np.testing.assert_allclose(c, llvm, rtol=rtol, atol=atol, err_msg=f"{what} output {k}: C vs LLVM")


def test_softmax_layernorm_and_reductions_over_the_last_axis():
    compiled, ref = _compiled_pair("""graph(x: f32[2,?,?], g: f32[?], b: f32[?]) -> [s, l, r0, r1, r2, t] {
      const axes: i64[1] = [-1]
      [s] = Softmax(x) {axis=-1}
      [l] = LayerNormalization(x, g, b) {axis=-1, epsilon=1e-5}
      [r0] = ReduceSum(x, axes)
      [r1] = ReduceMax(x, axes)
      [r2] = ReduceMean(x, axes)
      [t] = LogSoftmax(x) {axis=-1}
    }""")
    rng = np.random.default_rng(11)
    for rows, n in [(3, 1), (5, 16), (4, 37), (2, 128)]:
        feeds = {"x": rng.normal(0, 3, (2, rows, n)).astype(np.float32),
                 "g": rng.normal(1, 0.5, n).astype(np.float32), "b": rng.normal(0, 1, n).astype(np.float32)}
        _check_against_both(compiled, ref, feeds, f"[2,{rows},{n}]", rtol=1e-5, atol=1e-5)


def test_fused_elementwise_chain_with_several_outputs():
    compiled, ref = _compiled_pair("""graph(x: f32[?,?], y: f32[?]) -> [z, w, k] {
      [a] = Mul(x, y)
      [e] = Exp(a)
      [z] = Add(e, x)
      [m] = Greater(z, y)
      [w] = Where(m, z, y)
      [k] = Not(m)
    }""")
    rng = np.random.default_rng(12)
    for shape in [(1, 1), (3, 17), (8, 64), (5, 100)]:
        feeds = {"x": rng.normal(0, 1, shape).astype(np.float32), "y": rng.normal(0, 1, shape[-1]).astype(np.float32)}
        _check_against_both(compiled, ref, feeds, str(shape), rtol=2e-6, atol=1e-6)


def test_a_mask_crossing_loop_nests():
    compiled, ref = _compiled_pair("""graph(x: f32[3,?]) -> [z] {
      const zero: f32[] = 0.0
      [m] = Greater(x, zero)
      [s] = Softmax(x) {axis=-1}
      [z] = Where(m, s, x)
    }""")
    feeds = {"x": data((3, 40), 13)}
    _check_against_both(compiled, ref, feeds, "mask through a Buffer", rtol=1e-6, atol=1e-7)


# ---- the target itself ------------------------------------------------------------------------------------------
def test_generated_source_is_readable_c_without_calls(level):
    """At every ISA level: no library calls, but for tails on the 128-bit level, which has no masked
    moves (vmath.h copies the first n lanes through the stack, a memcpy)."""
    kernel = compile_body("graph(x: f32[?], y: f32[?]) -> [z] {\n [a] = Add(x, y)\n [z] = Erf(a)\n}", CTarget())
    source = kernel.compiled.kernel.source
    assert f"#define VM_LANES {level.f32_lanes}" in source and "vf v0" in source and "char *p0" in source
    assert "/* Add#" in source and "/* Erf#" in source and "/* LoopBegin#" in source
    asm = kernel.compiled.kernel.asm()
    calls = {line.split()[1] for line in asm.splitlines() if line.strip().startswith("call")}
    assert calls <= (set() if level.vector_bits >= 256 else {"memcpy@PLT"}), calls


def test_selected_by_option_and_environment(monkeypatch):
    graph = parse_graph("graph(x: f32[?]) -> [y] { [y] = Sigmoid(x) }")
    x = data(21, 3)
    cm = snipjit.compile(graph, target="c")
    assert cm.plan[0].kernel.compiled.kernel.source.startswith("/* snipjit kernel")
    assert_close(np.asarray(cm.run({"x": x})[0]), 1 / (1 + np.exp(-x.astype(np.float64))).astype(np.float32))
    monkeypatch.setenv("SNIPJIT_JIT", "c")
    assert get_target().name == "c"


def test_kernels_round_trip_through_the_disk_cache(tmp_path):
    body = parse_graph("graph(x: f32[?]) -> [y] {\n [a] = Tanh(x)\n [y] = Mul(a, x)\n}")
    key = kernel_cache.cache_key(body, C, {"loop_depth": 1})
    compile_count = []

    def compile_fn():
        compile_count.append(1)
        return compile_subgraph(body, C, name="kernel_" + key[:16])

    first = kernel_cache.KernelCache(tmp_path).get_or_compile(key, C, compile_fn)
    second_cache = kernel_cache.KernelCache(tmp_path)
    second = second_cache.get_or_compile(key, C, compile_fn)
    assert len(compile_count) == 1 and second_cache.hits["disk"] == 1
    x = data(37, 4)
    want, = Kernel(first, [np.dtype(np.float32)]).run([x], (37,))
    got, = Kernel(second, [np.dtype(np.float32)]).run([x], (37,))
    np.testing.assert_array_equal(got, want)


def test_missing_compiler_is_a_clear_error(monkeypatch):
    import snipjit.targets as targets
    monkeypatch.setattr(gcc.shutil, "which", lambda name: None)
    with pytest.raises(TargetError, match=r"needs a C compiler.*gcc, cc.*PATH"):
        type(C)()
    monkeypatch.setattr(targets, "_make", targets._make.__wrapped__)   # no cached instance
    with pytest.raises(TargetError, match="gcc"):
        snipjit.compile(parse_graph("graph(x: f32[4]) -> [y] { [y] = Exp(x) }"), target="c")


def test_compiler_errors_are_reported_with_the_compiler_output():
    with pytest.raises(gcc.CompileError, match="error"):
        C.compiler.compile("this is not C")
