"""The math library's accuracy on both targets, against float64 numpy, and the targets' agreement,
at every ISA level this CPU can execute (the ``level`` fixture: levels without FMA take other
formulations of the exact products, and their own bounds where the table gives them).

Every function runs on the LLVM target and on the C target (skipped without a C compiler) over
10**5 points: edge values (±0, denormals, overflow/underflow thresholds, the thresholds between fast
and full paths, ±inf, NaN), log-uniform magnitudes from the smallest denormal to FLT_MAX and a dense
interesting range. A point passes within 4 ulp of the f32-rounded reference or 1e-6 relative; NaN must
give NaN and infinities must match exactly. The measured maximum of each function must stay within
the library's one table (``snipjit.targets.vmath.ACCURACY``), so the table cannot go stale. Both
targets must give the same bits at every point (NaN as NaN, zeros with their signs).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from llvmlite import ir

import accuracy
from accuracy import Errors, errors
from snipjit.targets import isa
from snipjit.targets.llvm import vmath as llvm_vmath
from snipjit.targets.vmath import ACCURACY, ELEMENTWISE, OPS
from vmath_runners import TARGETS, assembly, c_compiler, run

COMPILER = c_compiler()
TARGET_PARAMS = [pytest.param("llvm"), pytest.param(
    "c", marks=pytest.mark.skipif(COMPILER is None, reason="the C target needs gcc or cc on PATH"))]


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def _gated(x, gate):
    """x * gate(x), and its limit -0 at x = -inf."""
    with np.errstate(invalid="ignore"):
        return np.where(x == -np.inf, -0.0, x * gate)


def _f32(value: float) -> float:
    return float(np.float32(value))


_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _gelu_erf(x):
    return _gated(x, 0.5 * _erfc(-x / math.sqrt(2)))


def _gelu_tanh(x):
    return _gated(x, _sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@dataclass(frozen=True, eq=False)
class Case:
    op: str
    reference: Callable
    dense: tuple[float, float] = (-10.0, 10.0)  # where most samples go
    params: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.op + "".join(f"[{k}={v}]" for k, v in self.params.items())

    @property
    def key(self) -> tuple[str, tuple]:
        return self.op, tuple(sorted(self.params.items()))

    @property
    def binary(self) -> bool:
        return OPS[self.op].arity == 2


def _pow_static(e: float) -> Case:
    return Case("pow_static", lambda x: np.power(x, e), (-4.0, 4.0), {"exponent": e})


CASES = [
    Case("exp", np.exp, (-105.0, 90.0)),
    Case("expm1", np.expm1, (-20.0, 90.0)),
    Case("log", np.log, (0.0, 4.0)),
    Case("log1p", np.log1p, (-1.0, 4.0)),
    Case("tanh", np.tanh),
    Case("sigmoid", _sigmoid, (-110.0, 30.0)),
    Case("silu", lambda x: _gated(x, _sigmoid(x)), (-110.0, 30.0)),
    Case("softplus", lambda x: np.logaddexp(0.0, x), (-110.0, 30.0)),
    Case("mish", lambda x: _gated(x, np.tanh(np.logaddexp(0.0, x))), (-110.0, 30.0)),
    Case("erf", _erf, (-5.0, 5.0)),
    Case("erfc", _erfc, (-5.0, 11.0)),
    Case("gelu_erf", _gelu_erf, (-15.0, 6.0)),
    Case("gelu_tanh", _gelu_tanh, (-12.0, 6.0)),
    Case("gelu", _gelu_erf, (-15.0, 6.0)),
    Case("gelu", _gelu_tanh, (-12.0, 6.0), {"approximate": "tanh"}),
    *(_pow_static(e) for e in (0, 0.5, 1, 2, 3, -1, -2, 7, -8, 1.5, -0.75, 10, 0.75, 0.25, -0.25, 3.75, -2.5, 4.5)),
    Case("sqrt", np.sqrt, (0.0, 100.0)),
    Case("reciprocal", lambda x: 1.0 / x),
    Case("rsqrt", lambda x: 1.0 / np.sqrt(x), (0.0, 100.0)),
    Case("sin", np.sin, (-100.0, 100.0)),
    Case("cos", np.cos, (-100.0, 100.0)),
    Case("tan", np.tan, (-100.0, 100.0)),
    Case("atan", np.arctan),
    Case("asin", np.arcsin, (-1.0, 1.0)),
    Case("acos", np.arccos, (-1.0, 1.0)),
    Case("sinh", np.sinh, (-95.0, 95.0)),
    Case("cosh", np.cosh, (-95.0, 95.0)),
    Case("asinh", np.arcsinh),
    Case("acosh", np.arccosh, (1.0, 10.0)),
    Case("atanh", np.arctanh, (-1.0, 1.0)),
    Case("abs", np.abs),
    Case("neg", np.negative),
    Case("relu", lambda x: np.where(x <= 0, 0.0, x)),
    Case("leaky_relu", lambda x: np.where(x < 0, _f32(0.1) * x, x), params={"alpha": 0.1}),
    Case("thresholded_relu", lambda x: np.where(x > _f32(0.7), x, 0.0), params={"alpha": 0.7}),
    Case("elu", lambda x: np.where(x > 0, x, _f32(0.7) * np.expm1(x)), params={"alpha": 0.7}),
    Case("selu", lambda x: _f32(SELU_GAMMA) * np.where(x > 0, x, _f32(SELU_ALPHA) * np.expm1(x))),
    Case("celu", lambda x: np.where(x > 0, x, 2.5 * np.expm1(x / 2.5)) + 0.0, params={"alpha": 2.5}),
    Case("clip", lambda x: np.clip(x, -1.5, 2.0), params={"lo": -1.5, "hi": 2.0}),
    Case("hard_sigmoid", lambda x: np.clip(_f32(0.2) * x + 0.5, 0.0, 1.0)),
    Case("hard_swish", lambda x: _gated(x, np.clip(x / 6 + 0.5, 0.0, 1.0))),
    Case("softsign", lambda x: x / (1 + np.abs(x))),
    Case("round_half_even", np.round),
    Case("sign", np.sign),
]
POW = Case("pow", np.power)
PRELU = Case("prelu", lambda x, slope: np.where(x < 0, x * slope, x))
ALL_CASES = [*CASES, POW, PRELU]
FUNCTIONS = tuple(dict.fromkeys(case.key for case in ALL_CASES))


def test_cases_cover_every_function_and_the_table_every_one():
    assert {case.op for case in ALL_CASES} == set(OPS) == set(ACCURACY)
    assert {call.op for call in ELEMENTWISE.values()} <= set(OPS)


# ---- samples -------------------------------------------------------------------------------------------
FLT_MAX = float(np.finfo(np.float32).max)
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38,
                    1.1754944e-38, FLT_MAX, -FLT_MAX], dtype=np.float32)
EDGES = np.array(
    [0.0, 1e-45, 3e-45, 1.1754942e-38, 1.1754944e-38, 1e-30, 1e-8, 2.0**-12, 0.25, 0.5, 0.75, 1.0, 1.5,
     2.0, 3.0, 9.1, 20.0, 88.72283, 88.72284, 89.4159, 89.416, 87.33654, 87.33655, 103.97207, 103.97208,
     104.0, math.pi / 4, math.pi / 2, math.pi, 3.92, 10.5, 2.0**12, 2.0**20, 2.0**24, 16367173 * 2.0**72,
     1e30, FLT_MAX, math.inf,
     8.0, 9.0, 10.0, 15.0, 87.0],  # where fast paths hand over to full ones
    dtype=np.float32,
)
EDGES = np.concatenate([EDGES, -EDGES, np.nextafter(EDGES, np.float32(0)), [np.nan]])
EDGES = np.concatenate([EDGES, -EDGES[:-1], [1 - 2**-24, 1 + 2**-23, -1 + 2**-24, -1 - 2**-23]])
EDGES = EDGES.astype(np.float32)
SAMPLES = 100_000

_references: dict[tuple[int, int], tuple[tuple[np.ndarray, ...], np.ndarray]] = {}


def reference(case: Case, n: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    key = (id(case), n)
    if key not in _references:
        if case is POW:
            inputs = accuracy.sample_pow(EDGES, n)
        elif case is PRELU:
            x = accuracy.sample(EDGES, case.dense, n)
            inputs = (x, np.random.default_rng(3).uniform(-2, 2, len(x)).astype(np.float32))
        else:
            inputs = (accuracy.sample(EDGES, case.dense, n),)
        with np.errstate(all="ignore"):
            _references[key] = inputs, case.reference(*(a.astype(np.float64) for a in inputs))
    return _references[key]


def compute(target: str, case: Case, width: int, *inputs: np.ndarray) -> np.ndarray:
    return run(target, FUNCTIONS, case.op, case.params, width, *inputs)


def check(target: str, case: Case, width: int, n: int) -> Errors:
    inputs, ref = reference(case, n)
    got = compute(target, case, width, *inputs)
    with np.errstate(all="ignore"):
        err = errors(got, ref)
    bad = np.flatnonzero(err.failing)
    detail = [f"x={[float(a[j]) for a in inputs]} got={got[j]!r} want={ref[j]!r} ulp={err.ulp[j]:.3g}"
              for j in bad[:8]]
    assert not bad.size, "\n".join([f"{case.id} on {target}, W={width}: {bad.size} points out of bounds",
                                    *detail])
    return err


def assert_same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    assert same.all(), f"{what}: {int((~same).sum())} points differ, e.g. {a[~same][:4]} vs {b[~same][:4]}"


# ---- tests ---------------------------------------------------------------------------------------------
# Widths: the level's own vector (``level.f32_lanes``: 16, 8 and 4 lanes over the levels) and 1 lane.
@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_accuracy_within_the_table(case: Case, target: str, level: isa.IsaLevel):
    err = check(target, case, level.f32_lanes, SAMPLES)
    max_ulp, max_rel = ACCURACY[case.op].at(level.fused_multiply_add)
    normal = np.abs(reference(case, SAMPLES)[1]) >= np.finfo(np.float32).tiny
    measured_ulp = float(np.max(err.ulp))
    measured_rel = float(np.max(err.rel[normal], initial=0.0))
    assert measured_ulp <= max_ulp, f"{case.id} at {level.name}: {measured_ulp:.2f} ulp, the table says {max_ulp}"
    assert measured_rel <= max_rel, f"{case.id} at {level.name}: {measured_rel:.3g} rel, the table says {max_rel}"


def test_bounds_without_fma_are_only_given_where_larger():
    for op, bound in ACCURACY.items():
        if bound.unfused is not None:
            (ulp, rel), (unfused_ulp, unfused_rel) = bound.at(True), bound.at(False)
            assert unfused_ulp >= ulp and unfused_rel >= rel and (unfused_ulp, unfused_rel) != (ulp, rel), op


@pytest.mark.skipif(COMPILER is None, reason="the C target needs gcc or cc on PATH")
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_targets_agree_bit_for_bit(case: Case, level: isa.IsaLevel):
    width = level.f32_lanes
    inputs, _ = reference(case, SAMPLES)
    llvm, c = (compute(target, case, width, *inputs) for target in TARGETS)
    assert_same_bits(llvm, c, f"{case.id}, W={width}")


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_special_values(case: Case, target: str, level: isa.IsaLevel):
    """±0, ±inf, NaN, denormals and ±FLT_MAX (every pair for binary functions): NaN where the
    reference is NaN, infinities and zeros exact with their signs, the rest within the bounds."""
    if case.binary:
        inputs = (np.repeat(SPECIAL, len(SPECIAL)), np.tile(SPECIAL, len(SPECIAL)))
    else:
        inputs = (SPECIAL,)
    got = compute(target, case, level.f32_lanes, *inputs)
    with np.errstate(all="ignore"):
        want = case.reference(*(a.astype(np.float64) for a in inputs))
        assert not errors(got, want).failing.any(), (inputs, got, want)
    zeros = want == 0
    assert (got[zeros] == 0).all() and (np.signbit(got[zeros]) == np.signbit(want[zeros])).all(), \
        (inputs[0][zeros], got[zeros], want[zeros])


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_one_lane(case: Case, target: str, level: isa.IsaLevel):
    check(target, case, 1, 5_000)


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_typical_inputs(case: Case, target: str, level: isa.IsaLevel):
    """Activation-like inputs: whole vectors take the fast paths, and now and then one lane does not."""
    x = np.random.default_rng(1).standard_normal(16 * 256).astype(np.float32)
    x[::1000] = [np.nan, -np.inf, 1e30, -100.0, 100.0]
    got = compute(target, case, level.f32_lanes, x)
    with np.errstate(all="ignore"):
        err = errors(got, case.reference(x.astype(np.float64)))
    assert not err.failing.any(), x[err.failing][:8]


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("one_lane", [False, True], ids=["level_width", "one_lane"])
def test_no_calls_remain_in_the_code(target: str, one_lane: bool, level: isa.IsaLevel):
    """No libm call (fmaf on a level without FMA, expf, ...): every step is inline, with FMA
    instructions exactly on the levels that have them."""
    asm = assembly(target, FUNCTIONS, 1 if one_lane else level.f32_lanes)
    calls = [line.strip() for line in asm.splitlines()
             if re.match(r"\s+(call|jmp)\s+[a-z_]", line) and "run_vmath" not in line]   # gcc merges twins
    assert not calls, calls[:10]
    assert ("vfmadd" in asm or "vfmsub" in asm or "vfnmadd" in asm) == level.fused_multiply_add


ODD = ["expm1", "log1p", "tanh", "erf", "sin", "tan", "atan", "asin", "sinh", "asinh", "atanh"]


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("op", ODD)
def test_odd_functions_keep_the_sign_of_zero(op: str, target: str, level: isa.IsaLevel):
    case = next(c for c in CASES if c.op == op)
    got = compute(target, case, level.f32_lanes, np.array([0.0, -0.0], np.float32))
    assert list(np.signbit(got)) == [False, True]


@pytest.mark.parametrize("target", TARGET_PARAMS)
@pytest.mark.parametrize("op", ["silu", "mish", "gelu_erf", "gelu_tanh", "hard_swish"])
def test_gated_activations_give_minus_zero_at_minus_inf(op: str, target: str, level: isa.IsaLevel):
    case = next(c for c in CASES if c.op == op)
    got = compute(target, case, level.f32_lanes, np.full(3, -np.inf, np.float32))
    assert (got == 0).all() and np.signbit(got).all(), got


@pytest.mark.parametrize("target", TARGET_PARAMS)
@settings(max_examples=40, deadline=None)
@given(arrays(np.float32, st.integers(0, 40), elements=st.floats(width=32)),
       st.sampled_from(["exp", "log", "tanh", "sin", "gelu_erf", "atan"]))
def test_any_length_and_any_float(target: str, x: np.ndarray, op: str):
    """(At the level SNIPJIT_ISA selects: hypothesis runs every example in one test.)"""
    case = next(c for c in CASES if c.op == op)
    got = compute(target, case, isa.current().level.f32_lanes, x)
    with np.errstate(all="ignore"):
        assert not errors(got, case.reference(x.astype(np.float64))).failing.any()


@pytest.mark.parametrize("target", TARGET_PARAMS)
def test_pow_special_cases_follow_numpy(target: str, level: isa.IsaLevel):
    inf, nan = np.inf, np.nan
    x = np.array([-8, -8, -0.0, -0.0, -0.0, -inf, -inf, -1, 1, nan, 0.5, 2, -2], np.float32)
    y = np.array([1 / 3, 3, -3, -2, 0.5, 3, 0.5, inf, nan, 0, -inf, inf, 2**25 + 2], np.float32)
    got = compute(target, POW, level.f32_lanes, x, y)
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    np.testing.assert_array_equal(got, want)
    numbers = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


def test_llvm_emit_rejects_wrong_operands_and_unknown_names():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), name="f")
    b = ir.IRBuilder(fn.append_basic_block())
    v = ir.Constant(ir.VectorType(ir.FloatType(), 4), [1.0] * 4)
    with pytest.raises(TypeError, match="exp: operands must be <N x float>"):
        llvm_vmath.emit(b, "exp", ir.Constant(ir.VectorType(ir.DoubleType(), 4), [1.0] * 4))
    with pytest.raises(TypeError, match="pow takes 2 operand"):
        llvm_vmath.emit(b, "pow", v)
    with pytest.raises(KeyError, match="no vector math op 'expf'"):
        llvm_vmath.emit(b, "expf", v)
    with pytest.raises(TypeError, match="elu has no parameter"):
        llvm_vmath.emit(b, "elu", v, beta=1.0)
    assert OPS["elu"].params == ("alpha",)
    assert llvm_vmath.emit(b, "exp", v).type == v.type
