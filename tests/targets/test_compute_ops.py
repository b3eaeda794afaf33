"""Every compute op on both targets (LLVM, and C when a C compiler is on PATH) against the registry's
reference kernels, and the two targets against each other.

Every op the targets emit runs as a one-op body compiled by the Snippets compiler, on data with edge
values (NaN, ±inf, ±0, denormals, huge and tiny magnitudes) plus values from the op's domain, and must
match the op's NumPy reference: within 4 ulp or 1e-6 relative per element of the reference evaluated in
float64 (rounded to f32) or in f32, NaN where the reference is NaN, infinities exactly. Both targets
render the same math library and emit the same IEEE operations, so they must also give the same bits,
at every ISA level this CPU can execute.

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
from snipjit.snippets.supported_ops import ELEMENTWISE_OPS
from snipjit.snippets.target_machine import TargetMachine
from snipjit.targets import TargetError, get_target, isa
from snipjit.targets.c.target import CTarget
from snipjit.targets.llvm.target import LLVMTarget
import guarded_kernels
from accuracy import assert_close
from guarded_kernels import Kernel


def _target_or_none(name: str):
    try:
        return get_target(name)
    except TargetError:
        return None


TARGETS = {"llvm": get_target("llvm"), "c": _target_or_none("c")}
NEEDS_C = pytest.mark.skipif(TARGETS["c"] is None, reason="the C target needs gcc or cc on PATH")
TARGET_PARAMS = [pytest.param("llvm"), pytest.param("c", marks=NEEDS_C)]
pytestmark = pytest.mark.usefixtures("memory_only_kernel_cache")   # kernels compiled from this code

EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 1e-30, -1e-30, 1e-40,
                  -1e-40, 3e38, -3e38, 1e10, -1e10, 88.75, -88.75, 104.0, -104.0, 1e5, 3.1415927],
                 dtype=np.float32)


# ---- compiling and running kernels ---------------------------------------------------------------------
def compile_body(text: str, target: str | TargetMachine) -> Kernel:
    return guarded_kernels.compile_body(text, TARGETS[target] if isinstance(target, str) else target, 1)


@functools.cache
def targets_at(level: str) -> dict[str, TargetMachine]:
    """Both targets as made while SNIPJIT_ISA selects `level` (the C target fixes its flags then)."""
    return {"llvm": LLVMTarget(), "c": CTarget()}


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


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_every_supported_op_has_an_emitter_and_a_case_here(target: str):
    assert all(TARGETS[target].supports(op) for op in ELEMENTWISE_OPS)
    assert {p.values[0].op for p in CASES} == ELEMENTWISE_OPS


def run_case(case: OpCase, target: str | TargetMachine) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    inputs = case_inputs(case, rng)
    n = len(inputs[0])
    kernel = compile_body(one_op_text(case.op, [f"{_TEXT[c]}[{n}]" for c in case.inputs], case.attrs), target)
    got, = kernel.run(inputs, (n,))
    return inputs, got


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("case", CASES)
def test_op_matches_reference(case: OpCase, target: str):
    inputs, got = run_case(case, target)
    if case.oracle is not None:
        wants = [case.oracle(*inputs)]
    else:
        wants = [reference(case.op, inputs, case.attrs), reference(case.op, inputs, case.attrs, wide=False)]
    assert_close(got, *wants, ulp=case.ulp, what=case.id)


@NEEDS_C
@pytest.mark.parametrize("case", CASES)
def test_targets_agree_bit_for_bit(case: OpCase, level: isa.IsaLevel):
    """At every ISA level; signed zeros included; NaN compares equal to NaN whatever its payload."""
    (_, llvm), (_, c) = (run_case(case, target) for target in targets_at(level.name).values())
    np.testing.assert_array_equal(c, llvm)
    if c.dtype == np.float32:
        np.testing.assert_array_equal(np.signbit(c), np.signbit(llvm))


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("op", ["HardSwish", "Mish", "Gelu"])
def test_gated_activations_at_minus_inf(op: str, target: str):
    """x * gate(x) at -inf is its limit -0 (the textbook -inf * 0 of the reference would be NaN)."""
    x = np.array([-np.inf] * 3, np.float32)
    got, = compile_body(one_op_text(op, ["f32[3]"]), target).run([x], (3,))
    assert (got == 0).all() and np.signbit(got).all(), got


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("op", sorted({c.values[0].op for c in CASES if c.values[0].inputs == "f"}))
def test_signed_zeros_match_the_reference(op: str, target: str):
    x = np.array([-0.0, 0.0, -1e-45, 1e-45], np.float32)
    got, = compile_body(one_op_text(op, ["f32[4]"]), target).run([x], (4,))
    want = reference(op, [x], wide=False)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("power", [2.0, 3.0, 0.5, -1.0, -2.0, 0.0, 1.0, 1.5, 8.0, -0.5, 7.0])
def test_pow_by_a_constant_becomes_power_static(power: float, target: str):
    rng = np.random.default_rng(1)
    x = np.concatenate([EDGES, _spread(rng), _positive(rng)])
    n = len(x)
    kernel = compile_body(f"graph(x: f32[{n}]) -> [y] {{ const p: f32[] = {power!r}\n [y] = Pow(x, p) }}", target)
    assert "PowerStatic" in kernel.compiled.linear_ir and " Pow#" not in kernel.compiled.linear_ir
    got, = kernel.run([x], (n,))
    p = np.array(power, np.float32)
    assert_close(got, reference("Pow", [x, p]), reference("Pow", [x, p], wide=False), ulp=7, what=f"x**{power}")


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_clip_with_constant_bounds(target: str):
    x = np.concatenate([EDGES, _spread(np.random.default_rng(2))])
    n = len(x)
    for lo, hi in ((-1.0, 2.0), (0.0, 0.0), (3.0, -3.0), (-np.inf, 1e10)):
        kernel = compile_body(f"graph(x: f32[{n}]) -> [y] {{ const lo: f32[] = {lo!r}\n const hi: f32[] = {hi!r}\n"
                              f" [y] = Clip(x, lo, hi) }}", target)
        got, = kernel.run([x], (n,))
        want = reference("Clip", [x, np.array(lo, np.float32), np.array(hi, np.float32)])
        assert_close(got, want, ulp=0, rel=0, what=f"Clip({lo}, {hi})")


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_clip_with_runtime_scalar_bounds(target: str):
    # two one-element loads then two BroadcastMoves: not adjacent, so they stay unfused
    x = np.concatenate([EDGES, _spread(np.random.default_rng(3))])
    n = len(x)
    kernel = compile_body(f"graph(x: f32[{n}], lo: f32[], hi: f32[]) -> [y] {{ [y] = Clip(x, lo, hi) }}", target)
    lo, hi = np.array(-2.0, np.float32), np.array(0.5, np.float32)
    got, = kernel.run([x, lo, hi], (n,))
    assert_close(got, reference("Clip", [x, lo, hi]), ulp=0, rel=0)
