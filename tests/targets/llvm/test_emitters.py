"""The LLVM kernel emitter: the kernel's structure (every compute op, on both targets, is in
tests/targets/test_compute_ops.py): bool constants, tails, broadcasts on every axis (including the
innermost, a one-element load), dynamic dims, the parallel domain split into sub-ranges, two-deep loop
nests, bool inputs and outputs, and register spilling.

Every kernel runs with guard elements after each output buffer, which must be left untouched.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from snipjit.targets import get_target
from snipjit.targets.llvm.target import LLVMTarget
import guarded_kernels
from guarded_kernels import SENTINEL, Kernel

TARGET = get_target("llvm")


def compile_body(text: str, loop_depth: int = 1, target=TARGET) -> Kernel:
    return guarded_kernels.compile_body(text, target, loop_depth)


def test_bool_constants_become_mask_scalars():
    kernel = compile_body("""graph(a: bool[37], x: f32[37]) -> [y, z] {
      const t: bool[] = true
      const f: bool[] = false
      [y] = And(a, t)
      [o] = Or(a, f)
      [n] = Neg(x)
      [z] = Where(o, x, n)
    }""")
    a = np.random.default_rng(4).random(37) < 0.5
    x = np.arange(1, 38, dtype=np.float32)
    y, z = kernel.run([a, x], (37,))
    np.testing.assert_array_equal(y, a)
    np.testing.assert_array_equal(z, np.where(a, x, -x))


# ---- kernel structure ------------------------------------------------------------------------------------
CHAIN = "[a] = Mul(x, y)\n [b] = Relu(a)\n [c] = Sub(b, x)\n [m] = Greater(c, y)\n [z] = Where(m, c, y)"


def chain_reference(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The outputs (z, m) of CHAIN: exact f32 arithmetic, so kernels must match bit for bit."""
    c = np.maximum(x * y, 0) - x
    m = c > y
    return np.where(m, c, y), m


def chain_kernel(x_shape: str, y_shape: str, loop_depth: int = 1) -> Kernel:
    return compile_body(f"graph(x: f32{x_shape}, y: f32{y_shape}) -> [z, m] {{ {CHAIN} }}", loop_depth)


def check_chain(kernel: Kernel, x: np.ndarray, y: np.ndarray, ranges=None) -> None:
    master = np.broadcast_shapes(x.shape, y.shape)
    z, m = kernel.run([x, y], master, ranges)
    want_z, want_m = chain_reference(x, y)
    np.testing.assert_array_equal(m, want_m)
    np.testing.assert_array_equal(z, want_z)


def data(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, shape).astype(np.float32)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 33])
def test_tails_static(n):
    check_chain(chain_kernel(f"[{n}]", f"[{n}]"), data(n, 1), data(n, 2))


def test_tails_dynamic_one_kernel_for_all_sizes():
    kernel = chain_kernel("[?]", "[?]")
    for n in (1, 15, 16, 17, 33, 100):
        check_chain(kernel, data(n, n), data(n, n + 1))


@pytest.mark.parametrize("y_shape", [
    (1, 5, 37), (4, 1, 37), (1, 1, 37), (37,), (4, 5, 37), (4, 5, 1), (1, 5, 1), (1, 1, 1), (),
], ids=str)
def test_broadcast_on_each_axis(y_shape):
    text = "[" + ",".join(map(str, y_shape)) + "]"
    check_chain(chain_kernel("[4,5,37]", text), data((4, 5, 37), 1), data(y_shape, 2))


def test_broadcast_on_both_sides():
    check_chain(chain_kernel("[4,1,37]", "[1,5,37]"), data((4, 1, 37), 1), data((1, 5, 37), 2))


def test_innermost_broadcast_of_a_computed_value():
    # the size-1 value is computed (Relu of a one-element load), so no Load+BroadcastMove pair forms
    kernel = compile_body("""graph(x: f32[3,37], s: f32[3,1]) -> [z] {
      [t] = Relu(s)
      [z] = Add(x, t)
    }""")
    x, s = data((3, 37), 1), data((3, 1), 2)
    z, = kernel.run([x, s], (3, 37))
    np.testing.assert_array_equal(z, x + np.maximum(s, 0))


def test_output_broadcasting_along_the_innermost_dim():
    kernel = compile_body("""graph(x: f32[3,37], s: f32[3,1]) -> [z, t] {
      [t] = Relu(s)
      [z] = Add(x, t)
    }""")
    x, s = data((3, 37), 1), data((3, 1), 2)
    z, t = kernel.run([x, s], (3, 37))
    np.testing.assert_array_equal(t, np.maximum(s, 0))
    np.testing.assert_array_equal(z, x + np.maximum(s, 0))


def test_innermost_master_dim_of_one():
    kernel = chain_kernel("[6,1]", "[6,1]")
    check_chain(kernel, data((6, 1), 1), data((6, 1), 2))


def test_dynamic_dims_everywhere():
    kernel = chain_kernel("[?,?,?]", "[?,?,?]")
    for shape in [(2, 3, 17), (1, 1, 1), (5, 2, 16), (3, 4, 40)]:
        check_chain(kernel, data(shape, 1), data(shape, 2))


def test_dynamic_dims_with_broadcast_inputs():
    kernel = chain_kernel("[?,?,?]", "[1,?,?]")
    for n0, n1, n2 in [(2, 3, 17), (4, 1, 33), (3, 2, 5)]:
        check_chain(kernel, data((n0, n1, n2), 1), data((1, n1, n2), 2))


def test_parallel_domain_split_into_sub_ranges():
    kernel = chain_kernel("[4,6,37]", "[1,6,37]")
    x, y = data((4, 6, 37), 1), data((1, 6, 37), 2)
    assert kernel.domain((4, 6, 37)) == 24
    check_chain(kernel, x, y, ranges=[(0, 5), (5, 6), (6, 6), (6, 19), (19, 24)])
    # one sub-range writes exactly its rows
    z, m = kernel.run([x, y], (4, 6, 37), ranges=[(7, 13)])
    rows = z.reshape(24, 37)
    want = chain_reference(x, y)[0].reshape(24, 37)
    np.testing.assert_array_equal(rows[7:13], want[7:13])
    assert np.all(rows[:7] == SENTINEL[rows.dtype]) and np.all(rows[13:] == SENTINEL[rows.dtype])


@pytest.mark.parametrize("y_shape", [(4, 1, 37), (1, 6, 37), (6, 37), (4, 6, 37), (4, 6, 1), (4, 1, 1)], ids=str)
def test_loop_depth_two(y_shape):
    text = "[" + ",".join(map(str, y_shape)) + "]"
    kernel = chain_kernel("[4,6,37]", text, loop_depth=2)
    assert kernel.compiled.parallel_rank == 1
    x, y = data((4, 6, 37), 1), data(y_shape, 2)
    check_chain(kernel, x, y)
    check_chain(kernel, x, y, ranges=[(0, 1), (1, 4)])


def test_loop_depth_two_dynamic():
    kernel = chain_kernel("[?,?,?]", "[?,?,?]", loop_depth=2)
    for shape in [(2, 3, 17), (1, 1, 1), (3, 5, 32)]:
        check_chain(kernel, data(shape, 1), data(shape, 2))


def test_loop_depth_of_the_whole_rank():
    kernel = chain_kernel("[3,5,19]", "[3,1,19]", loop_depth=3)
    assert kernel.compiled.parallel_rank == 0
    check_chain(kernel, data((3, 5, 19), 1), data((3, 1, 19), 2), ranges=[(0, 1)])


def test_bool_inputs_and_outputs_with_tails():
    kernel = compile_body("""graph(a: bool[?], b: bool[?], x: f32[?]) -> [n, w, c] {
      [n] = Not(a)
      [o] = Xor(n, b)
      [w] = Where(o, x, x)
      [c] = Less(w, x)
    }""")
    rng = np.random.default_rng(5)
    for size in (1, 17, 33, 64):
        a, b, x = rng.random(size) < 0.5, rng.random(size) < 0.5, data(size, size)
        n, w, c = kernel.run([a, b, x], (size,))
        np.testing.assert_array_equal(n, ~a)
        np.testing.assert_array_equal(w, x)
        np.testing.assert_array_equal(c, np.zeros(size, bool))


class TinyTarget(LLVMTarget):
    """The host target with only three vector registers, to make the allocator spill loop values."""

    @property
    def registers(self) -> dict[str, int]:
        return {"vec": 3, "gpr": 64}


def wide_body(width: int) -> str:
    """`width` products of x with distinct constants, all live until a sum at the end."""
    lines = [f"const c{i}: f32[] = {1.0 + i / 8!r}" for i in range(width)]
    lines += [f"[p{i}] = Mul(x, c{i})" for i in range(width)]
    lines += ["[s1] = Add(p0, p1)"] + [f"[s{i}] = Add(s{i - 1}, p{i})" for i in range(2, width)]
    return f"graph(x: f32[?]) -> [s{width - 1}] {{\n " + "\n ".join(lines) + "\n}"


def test_register_spilling_of_scalars():
    """More constants than registers: Scalars are rematerialised where they are used."""
    width = 6   # five Scalars (x * 1 is dropped) for three registers
    kernel = compile_body(wide_body(width), target=TinyTarget())
    assert "rematerialized" in kernel.compiled.linear_ir
    for n in (5, 40):
        x = data(n, n)
        got, = kernel.run([x], (n,))
        products = [x * np.float32(1.0 + i / 8) for i in range(width)]
        np.testing.assert_array_equal(got, functools.reduce(np.add, products))


def test_register_spilling_of_loop_values_with_three_registers():
    kernel = compile_body(guarded_kernels.WIDE, target=TinyTarget())
    assert "Spill" in kernel.compiled.linear_ir
    for n in (7, 50):
        x, y = data(n, 1), data(n, 2)
        got, = kernel.run([x, y], (n,))
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        want = ((np.exp(x64) + np.sin(y64)) - np.cos(x64) * np.tanh(y64)).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
