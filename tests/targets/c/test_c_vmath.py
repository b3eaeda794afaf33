"""vmath.h accuracy against float64 NumPy, through a C harness compiled for 16, 8, 4 and 1 lanes.

Each function runs in `void f(const float *x, [const float *y,] float *out, int64_t n)`, which walks the
array one vector at a time with the tail helpers (so lengths need not divide the lanes). A point passes
when it is within 4 ulp of the f32-rounded reference or within 1e-6 relative error; NaN must give NaN
and infinities must match exactly. The measured maximum ulp error of each function must also stay
within the table in vmath.h's header comment, so that table cannot go stale (and a change that costs
accuracy shows up).
"""
from __future__ import annotations

import ctypes
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from snipjit.targets.c.gcc import INCLUDE_DIR as COMPILER_INCLUDE, CCompiler, load_shared_object
from snipjit.snippets.target_machine import TargetError
import accuracy
from accuracy import Errors, errors

try:
    COMPILER = CCompiler.find()
except TargetError as exc:   # pragma: no cover - only on machines without a C compiler
    pytest.skip(str(exc), allow_module_level=True)

_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def _gated(x, gate):
    return np.where(x == -np.inf, -0.0, x * gate)


def _f32(v: float) -> float:
    return float(np.float32(v))


@dataclass(frozen=True, eq=False)
class Case:
    call: str                                  # C expression of the vector `x` (and `y`)
    reference: Callable
    dense: tuple[float, float] = (-10.0, 10.0)  # where most samples go
    binary: bool = False
    id: str = field(default="")

    @property
    def name(self) -> str:
        return self.id or re.match(r"vm_(\w+)", self.call).group(1)

    @property
    def function(self) -> str:
        return self.name.split("[")[0]

    @property
    def symbol(self) -> str:
        return "t_" + re.sub(r"\W", "_", self.name)


SELU_A, SELU_G = 1.67326319217681884765625, 1.05070102214813232421875
CASES = [
    Case("vm_exp(x)", np.exp, (-105.0, 90.0)),
    Case("vm_expm1(x)", np.expm1, (-20.0, 90.0)),
    Case("vm_log(x)", np.log, (0.0, 4.0)),
    Case("vm_log1p(x)", np.log1p, (-1.0, 4.0)),
    Case("vm_tanh(x)", np.tanh),
    Case("vm_sigmoid(x)", _sigmoid, (-110.0, 30.0)),
    Case("vm_softplus(x)", lambda x: np.logaddexp(0.0, x), (-110.0, 30.0)),
    Case("vm_mish(x)", lambda x: _gated(x, np.tanh(np.logaddexp(0.0, x))), (-110.0, 30.0)),
    Case("vm_erf(x)", _erf, (-5.0, 5.0)),
    Case("vm_gelu_erf(x)", lambda x: _gated(x, 0.5 * _erfc(-x / math.sqrt(2))), (-15.0, 6.0)),
    Case("vm_gelu_tanh(x)",
         lambda x: _gated(x, _sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), (-12.0, 6.0)),
    Case("vm_pow(x, y)", np.power, binary=True),
    *(Case(f"vm_pow_static(x, {e!r}f)", lambda x, e=e: np.power(x, e), (-4.0, 4.0), id=f"pow_static[{e}]")
      for e in (0.0, 0.5, 1.0, 2.0, 3.0, -1.0, -2.0, 7.0, -8.0, 64.0, 1.5, -0.75, 100.0)),
    Case("vm_sqrt(x)", np.sqrt, (0.0, 100.0)),
    Case("vm_reciprocal(x)", lambda x: 1.0 / x),
    Case("vm_sin(x)", np.sin, (-100.0, 100.0)),
    Case("vm_cos(x)", np.cos, (-100.0, 100.0)),
    Case("vm_tan(x)", np.tan, (-100.0, 100.0)),
    Case("vm_atan(x)", np.arctan),
    Case("vm_asin(x)", np.arcsin, (-1.0, 1.0)),
    Case("vm_acos(x)", np.arccos, (-1.0, 1.0)),
    Case("vm_sinh(x)", np.sinh, (-95.0, 95.0)),
    Case("vm_cosh(x)", np.cosh, (-95.0, 95.0)),
    Case("vm_asinh(x)", np.arcsinh),
    Case("vm_acosh(x)", np.arccosh, (1.0, 10.0)),
    Case("vm_atanh(x)", np.arctanh, (-1.0, 1.0)),
    Case("vm_abs(x)", np.abs),
    Case("vm_neg(x)", np.negative),
    Case("vm_relu(x)", lambda x: np.where(x < 0, 0.0, x)),
    Case("vm_leaky_relu(x, 0.1f)", lambda x: np.where(x < 0, _f32(0.1) * x, x)),
    Case("vm_elu(x, 0.7f)", lambda x: np.where(x > 0, x, _f32(0.7) * np.expm1(x))),
    Case(f"vm_selu(x, {SELU_A!r}f, {SELU_G!r}f)",
         lambda x: _f32(SELU_G) * np.where(x > 0, x, _f32(SELU_A) * np.expm1(x))),
    Case("vm_celu(x, 2.5f)", lambda x: np.where(x > 0, x, 2.5 * np.expm1(x / 2.5))),
    Case("vm_hard_sigmoid(x, 0.2f, 0.5f)", lambda x: np.clip(_f32(0.2) * x + 0.5, 0.0, 1.0)),
    Case("vm_hard_swish(x)", lambda x: _gated(x, np.clip(x / 6 + 0.5, 0.0, 1.0))),
    Case("vm_softsign(x)", lambda x: x / (1 + np.abs(x))),
    Case("vm_round(x)", np.round),
    Case("vm_floor(x)", np.floor),
    Case("vm_ceil(x)", np.ceil),
    Case("vm_sign(x)", np.sign),
]
POW = next(c for c in CASES if c.binary)


def documented_max_ulp() -> dict[str, float]:
    """The accuracy table of vmath.h's header comment: function -> max ulp."""
    text = (Path(COMPILER_INCLUDE) / "vmath.h").read_text()
    table = text[text.index("function       max ulp"):text.index("*/", text.index("function       max ulp"))]
    rows = {name: float(ulp) for name, ulp in re.findall(r"^\s+(\w+)\s+([\d.]+)", table, re.M)}
    exact = re.search(r"^\s+([\w, ]+): 0\.0$", table, re.M).group(1)
    return rows | {name.strip(): 0.0 for name in exact.split(",")}


# ---- the harness ---------------------------------------------------------------------------------------
def harness_source(lanes: int) -> str:
    lines = [f"#define VM_LANES {lanes}", '#include "vmath.h"']
    for case in CASES:
        params = "const float *xs, const float *ys, float *out, int64_t n" if case.binary else \
            "const float *xs, float *out, int64_t n"
        lines += [
            f"void {case.symbol}({params}) {{",
            "    for (int64_t i = 0; i < n; i += VM_LANES) {",
            "        int64_t m = n - i < VM_LANES ? n - i : VM_LANES;",
            "        vf x = vm_load_n((const char *)(xs + i), m);",
            "        vf y = vm_load_n((const char *)(ys + i), m);" if case.binary else "",
            f"        vm_store_n((char *)(out + i), {case.call}, m);",
            "    }",
            "}",
        ]
    return "\n".join(lines) + "\n"


@functools.cache
def harness(lanes: int):
    return load_shared_object(COMPILER.compile(harness_source(lanes)))


def run(lanes: int, case: Case, *inputs: np.ndarray) -> np.ndarray:
    inputs = [np.ascontiguousarray(a, dtype=np.float32) for a in inputs]
    out = np.empty_like(inputs[0])
    fn = harness(lanes).function(case.symbol, None, *[ctypes.c_void_p] * (len(inputs) + 1), ctypes.c_int64)
    fn(*(a.ctypes.data for a in inputs), out.ctypes.data, out.size)
    return out


# ---- samples ------------------------------------------------------------------------------------------------
FLT_MAX = float(np.finfo(np.float32).max)
_EDGES = np.array([
    0.0, 1e-45, 3e-45, 1.1754942e-38, 1.1754944e-38, 1e-30, 1e-10, 1e-8, 2.0 ** -12, 0.25, 0.5, 0.75, 1.0, 1.5,
    2.0, 3.0, 3.92, 9.1, 10.5, 15.0, 20.0, 88.72283, 88.72284, 89.4159, 89.416, 87.33654, 87.33655,
    103.97207, 103.97208, 104.0, math.pi / 4, math.pi / 2, math.pi, 2.0 ** 12, 2.0 ** 20, 2.0 ** 24,
    16367173 * 2.0 ** 72, 1e30, FLT_MAX, math.inf], dtype=np.float32)
_EDGES = np.concatenate([_EDGES, np.nextafter(_EDGES, np.float32(0))])
EDGES = np.concatenate([_EDGES, -_EDGES, [np.nan, 1 - 2 ** -24, 1 + 2 ** -23, -1 + 2 ** -24, -1 - 2 ** -23]])
EDGES = EDGES.astype(np.float32)


def sample(case: Case, n: int, seed: int = 0) -> np.ndarray:
    return accuracy.sample(EDGES, case.dense, n, seed)


def sample_pow(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return accuracy.sample_pow(EDGES, n, seed)


@functools.cache
def reference(case: Case, n: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    inputs = sample_pow(n) if case.binary else (sample(case, n),)
    with np.errstate(all="ignore"):
        return inputs, case.reference(*(a.astype(np.float64) for a in inputs))


def check(case: Case, lanes: int, n: int) -> Errors:
    inputs, ref = reference(case, n)
    got = run(lanes, case, *inputs)
    with np.errstate(all="ignore"):
        err = errors(got, ref)
    bad = np.flatnonzero(err.failing)
    detail = [f"x={[float(a[j]) for a in inputs]} got={got[j]!r} want={ref[j]!r} ulp={err.ulp[j]:.3g}"
              for j in bad[:8]]
    assert not bad.size, "\n".join([f"{case.name} lanes={lanes}: {bad.size} points out of bounds", *detail])
    return err


# ---- tests ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_accuracy_at_16_lanes(case: Case):
    err = check(case, 16, 100_000)
    measured, documented = float(np.max(err.ulp)), documented_max_ulp()[case.function]
    assert measured <= documented, f"{case.name}: max error {measured:.2f} ulp exceeds the {documented} in vmath.h"


def test_every_case_is_documented_and_every_documented_function_tested():
    assert {c.function for c in CASES} == set(documented_max_ulp())


@pytest.mark.parametrize("lanes", [8, 4, 1])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_other_widths(case: Case, lanes: int):
    check(case, lanes, 3_000)


def test_no_calls_remain_in_the_code():
    asm = COMPILER.assembly(harness_source(16))
    calls = [line.strip() for line in asm.splitlines() if re.match(r"\s+(call|jmp)\s+[a-z_]", line)]
    assert not calls, calls[:10]
    if "__AVX512F__" in COMPILER.native_macros:
        assert "zmm" in asm


ODD = ["expm1", "log1p", "tanh", "erf", "sin", "tan", "atan", "asin", "sinh", "asinh", "atanh"]


@pytest.mark.parametrize("name", ODD)
def test_odd_functions_keep_the_sign_of_zero(name: str):
    case = next(c for c in CASES if c.name == name)
    got = run(8, case, np.array([0.0, -0.0], np.float32))
    assert list(np.signbit(got)) == [False, True]


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.integers(0, 40), elements=st.floats(width=32)),
       st.sampled_from(["exp", "log", "tanh", "sin", "gelu_erf", "atan", "pow_static[3.0]"]))
def test_any_length_and_any_float(x: np.ndarray, name: str):
    case = next(c for c in CASES if c.name == name)
    got = run(16, case, x)
    with np.errstate(all="ignore"):
        err = errors(got, case.reference(x.astype(np.float64)))
    assert not err.failing.any(), (x[err.failing], got[err.failing])
