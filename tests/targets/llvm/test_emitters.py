"""LLVM emitters and kernel emitter against the registry's reference kernels.

Every op the target emits runs as a one-op body compiled by the Snippets compiler, on data with edge
values (NaN, ±inf, ±0, denormals, huge and tiny magnitudes) plus values from the op's domain, and must
match the op's NumPy reference: within 4 ulp or 1e-6 relative per element of the reference evaluated in
float64 (rounded to f32) or in f32, NaN where the reference is NaN, infinities exactly. Then the
kernel's structure: tails, broadcasts on every axis (including the innermost, a one-element load),
dynamic dims, the parallel domain split into sub-ranges, two-deep loop nests, bool inputs and outputs,
and register spilling.

Every kernel runs with guard elements after each output buffer, which must be left untouched.
"""
from __future__ import annotations

import functools
import itertools
import math
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from snipjit.ops.common import evaluate
from snipjit.snippets.support import ELEMENTWISE_OPS
from snipjit.targets import get_target
from snipjit.targets.llvm.target import LLVMTarget
import kernels
from accuracy import assert_close
from kernels import SENTINEL, Kernel

TARGET = get_target("llvm")

EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 1e-30, -1e-30, 1e-40,
                  -1e-40, 3e38, -3e38, 1e10, -1e10, 88.75, -88.75, 104.0, -104.0, 1e5, 3.1415927],
                 dtype=np.float32)


# ---- compiling and running kernels ---------------------------------------------------------------------
def compile_body(text: str, loop_depth: int = 1, target=TARGET) -> Kernel:
    return kernels.compile_body(text, target, loop_depth)


def reference(op: str, inputs: list[np.ndarray], attrs: dict | None = None, wide: bool = True) -> np.ndarray:
    """The registry's reference for `op`; with `wide`, computed on float64 copies of f32 inputs and
    rounded to f32."""
    if wide:
        inputs = [a.astype(np.float64) if a.dtype == np.float32 else a for a in inputs]
    out = evaluate(op, inputs, attrs)[0]
    with np.errstate(over="ignore"):
        return out.astype(np.float32) if out.dtype == np.float64 else out


# ---- one op per kernel -----------------------------------------------------------------------------------
def _spread(rng: np.random.Generator, n: int = 200) -> np.ndarray:
    """Both signs, magnitudes log-uniform over 1e-6 .. 1e6, plus normal values around zero."""
    mags = 10.0 ** rng.uniform(-6, 6, n)
    return np.concatenate([mags * rng.choice([-1.0, 1.0], n), rng.normal(0, 4, n)]).astype(np.float32)


def _unit(rng):
    return np.concatenate([rng.uniform(-1, 1, 200), [-1.0, 1.0, 0.999999, -0.999999]]).astype(np.float32)


def _at_least_one(rng):
    return np.concatenate([1 + 10.0 ** rng.uniform(-6, 6, 200), [1.0]]).astype(np.float32)


def _positive(rng):
    return (10.0 ** rng.uniform(-30, 30, 200)).astype(np.float32)


_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu_accurate(x, approximate="none"):
    """Gelu without the cancellation of 1 + erf(x) (1 + tanh(u)) for negative x, where the registry's
    textbook formula loses all digits even in float64 (x < -6 gives -0.0 instead of ~-1e-20)."""
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if approximate == "tanh":
            u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
            return (x / (1 + np.exp(-2 * u))).astype(np.float32)
        return (0.5 * x * _erfc(-x / math.sqrt(2))).astype(np.float32)


@dataclass(frozen=True)
class OpCase:
    op: str
    inputs: str = "f"                       # one letter per input: f (f32) or b (bool)
    attrs: dict | None = None
    domain: Callable | None = None          # more values for a unary op's input
    edges: np.ndarray = field(default_factory=lambda: EDGES)
    oracle: Callable | None = None          # an accurate reference when the registry's formula is not
    ulp: float = 4.0

    @property
    def id(self) -> str:
        attrs = "".join(f"-{k}={v}" for k, v in (self.attrs or {}).items())
        return f"{self.op}{attrs}-{self.inputs}"


def _case(*args, xfail: str | None = None, **kw):
    case = OpCase(*args, **kw)
    marks = [pytest.mark.xfail(reason=xfail, strict=True, raises=AssertionError)] if xfail else []
    return pytest.param(case, id=case.id, marks=marks)


NO_NEG_INF = EDGES[EDGES != -np.inf]   # gated activations at -inf: see test_gated_activations_at_minus_inf

# Celu and Softsign compose vmath functions with one more rounding (x/alpha, 1+|x|, the final division),
# so they get 2 ulp more; everything else meets the 4 ulp / 1e-6 bar.
CASES = [
    *(_case(op, "ff") for op in ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "PRelu")),
    _case("Max", "fff"), _case("Min", "fff"), _case("Sum", "fff"), _case("Max", "f"),
    *(_case(op) for op in ("Neg", "Abs", "Reciprocal", "Sign", "Floor", "Ceil", "Round", "Exp", "Erf",
                           "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Relu", "Sigmoid",
                           "Tanh", "Softplus", "IsNaN")),
    _case("Sqrt", domain=_positive), _case("Log", domain=_positive),
    _case("Asin", domain=_unit), _case("Acos", domain=_unit), _case("Atanh", domain=_unit),
    _case("Acosh", domain=_at_least_one),
    _case("HardSwish", edges=NO_NEG_INF), _case("Mish", edges=NO_NEG_INF),
    _case("Gelu", edges=NO_NEG_INF, oracle=_gelu_accurate),
    _case("Gelu", attrs={"approximate": "tanh"}, edges=NO_NEG_INF,
          oracle=lambda x: _gelu_accurate(x, "tanh")),
    _case("LeakyRelu", attrs={"alpha": 0.3}), _case("Elu", attrs={"alpha": 0.5}),
    _case("Selu", attrs={"alpha": 2.0, "gamma": 0.5}), _case("Celu", attrs={"alpha": 2.5}, ulp=6),
    _case("HardSigmoid", attrs={"alpha": 0.3, "beta": 0.4}), _case("ThresholdedRelu", attrs={"alpha": -0.5}),
    _case("IsInf", attrs={"detect_negative": 0, "detect_positive": 1}),
    _case("IsInf", attrs={"detect_negative": 1, "detect_positive": 0}),
    _case("IsInf", attrs={"detect_negative": 1, "detect_positive": 1}),
    *(_case(op) for op in ("LeakyRelu", "Elu", "Selu", "HardSigmoid", "ThresholdedRelu", "IsInf")),
    _case("Celu", ulp=6),
    _case("Softsign", ulp=6), _case("Clip"),
    *(_case(op, "ff") for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")),
    _case("Not", "b"), _case("And", "bb"), _case("Or", "bb"), _case("Xor", "bb"), _case("Where", "bff"),
    _case("Where", "bbb"),
    _case("Equal", "bb"),
]

_TEXT = {"f": "f32", "b": "bool"}


def case_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs of one shape: one float input gets the edges, the op's domain and a spread; several float
    inputs get every pair of edge values plus a spread; bool inputs get random masks."""
    floats = case.inputs.count("f")
    if floats == 1:
        cols = [np.concatenate([case.edges, _spread(rng)] + ([case.domain(rng)] if case.domain else []))]
    elif floats:
        pool = np.concatenate([case.edges, _spread(rng, 8)])
        grid = np.array(list(itertools.product(pool, repeat=2)), np.float32)
        cols = [np.concatenate([grid[:, 0], _spread(rng)]), np.concatenate([grid[:, 1], _spread(rng)])]
        cols += [rng.permutation(cols[0]) for _ in range(floats - 2)]
    n = len(cols[0]) if floats else 300
    out, k = [], 0
    for letter in case.inputs:
        if letter == "f":
            out.append(cols[k])
            k += 1
        else:
            out.append(rng.random(n) < 0.5)
    return out


def one_op_text(op: str, in_types: list[str], attrs: dict | None = None) -> str:
    params = ", ".join(f"x{i}: {t}" for i, t in enumerate(in_types))
    args = ", ".join(f"x{i}" for i in range(len(in_types)))
    attr_text = ""
    if attrs:
        attr_text = " {" + ", ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v!r}"
                                     for k, v in attrs.items()) + "}"
    return f"graph({params}) -> [y] {{ [y] = {op}({args}){attr_text} }}"


def test_every_supported_op_has_an_emitter_and_a_case_here():
    assert all(LLVMTarget().supports(op) for op in ELEMENTWISE_OPS)
    assert {p.values[0].op for p in CASES} == ELEMENTWISE_OPS


@pytest.mark.parametrize("case", CASES)
def test_op_matches_reference(case: OpCase):
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    inputs = case_inputs(case, rng)
    n = len(inputs[0])
    kernel = compile_body(one_op_text(case.op, [f"{_TEXT[c]}[{n}]" for c in case.inputs], case.attrs))
    got, = kernel.run(inputs, (n,))
    if case.oracle is not None:
        wants = [case.oracle(*inputs)]
    else:
        wants = [reference(case.op, inputs, case.attrs), reference(case.op, inputs, case.attrs, wide=False)]
    assert_close(got, *wants, ulp=case.ulp, what=case.id)


@pytest.mark.parametrize("op", ["HardSwish", "Mish", "Gelu"])
def test_gated_activations_at_minus_inf(op):
    """x * gate(x) at -inf is its limit -0 (the textbook -inf * 0 would be NaN), as on the C target."""
    x = np.array([-np.inf] * 3, np.float32)
    got, = compile_body(one_op_text(op, ["f32[3]"])).run([x], (3,))
    assert (got == 0).all() and np.signbit(got).all(), got


@pytest.mark.parametrize("op", sorted({c.values[0].op for c in CASES if c.values[0].inputs == "f"}))
def test_signed_zeros_match_the_reference(op):
    x = np.array([-0.0, 0.0, -1e-45, 1e-45], np.float32)
    got, = compile_body(one_op_text(op, ["f32[4]"])).run([x], (4,))
    want = reference(op, [x], wide=False)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("power", [2.0, 3.0, 0.5, -1.0, -2.0, 0.0, 1.0, 1.5, 8.0, -0.5, 7.0])
def test_pow_by_a_constant_becomes_power_static(power):
    rng = np.random.default_rng(1)
    x = np.concatenate([EDGES, _spread(rng), _positive(rng)])
    n = len(x)
    kernel = compile_body(f"graph(x: f32[{n}]) -> [y] {{ const p: f32[] = {power!r}\n [y] = Pow(x, p) }}")
    assert "PowerStatic" in kernel.compiled.linear_ir and " Pow#" not in kernel.compiled.linear_ir
    got, = kernel.run([x], (n,))
    p = np.array(power, np.float32)
    assert_close(got, reference("Pow", [x, p]), reference("Pow", [x, p], wide=False), ulp=7, what=f"x**{power}")


def test_clip_with_constant_bounds():
    x = np.concatenate([EDGES, _spread(np.random.default_rng(2))])
    n = len(x)
    for lo, hi in ((-1.0, 2.0), (0.0, 0.0), (3.0, -3.0), (-np.inf, 1e10)):
        kernel = compile_body(f"graph(x: f32[{n}]) -> [y] {{ const lo: f32[] = {lo!r}\n const hi: f32[] = {hi!r}\n"
                              f" [y] = Clip(x, lo, hi) }}")
        got, = kernel.run([x], (n,))
        want = reference("Clip", [x, np.array(lo, np.float32), np.array(hi, np.float32)])
        assert_close(got, want, ulp=0, rel=0, what=f"Clip({lo}, {hi})")


def test_clip_with_runtime_scalar_bounds():
    # two one-element loads then two BroadcastMoves: not adjacent, so they stay unfused
    x = np.concatenate([EDGES, _spread(np.random.default_rng(3))])
    n = len(x)
    kernel = compile_body(f"graph(x: f32[{n}], lo: f32[], hi: f32[]) -> [y] {{ [y] = Clip(x, lo, hi) }}")
    lo, hi = np.array(-2.0, np.float32), np.array(0.5, np.float32)
    got, = kernel.run([x, lo, hi], (n,))
    assert_close(got, reference("Clip", [x, lo, hi]), ulp=0, rel=0)


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
    kernel = compile_body(kernels.WIDE, target=TinyTarget())
    assert "Spill" in kernel.compiled.linear_ir
    for n in (7, 50):
        x, y = data(n, 1), data(n, 2)
        got, = kernel.run([x, y], (n,))
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        want = ((np.exp(x64) + np.sin(y64)) - np.cos(x64) * np.tanh(y64)).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
