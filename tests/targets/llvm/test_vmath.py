"""Vector math accuracy against float64 numpy, on JIT-compiled loops of W = 16, 8 and 1 lanes.

Every op runs in a kernel ``void f(float* x, [float* y,] float* out, i64 n)`` that walks the
array one vector at a time with masked loads/stores (so lengths need not divide W). A point
passes when it is within 4 ulp of the f32-rounded reference or within 1e-6 relative error; NaN
must give NaN and infinities must match exactly. The measured maximum ulp error of each op must
also stay within the table in vmath's docstring, so that table cannot go stale.
"""
import ctypes
import functools
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

from snipjit.targets.llvm import jit, vmath
import accuracy
from accuracy import Errors, errors

F32 = ir.FloatType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)


# ---------------------------------------------------------------- kernels


def _splat(b: ir.IRBuilder, scalar: ir.Value, width: int) -> ir.Value:
    vec = ir.VectorType(scalar.type, width)
    one = b.insert_element(ir.Constant(vec, None), scalar, I32(0))
    zeros = ir.Constant(ir.VectorType(I32, width), [0] * width)
    return b.shuffle_vector(one, ir.Constant(vec, None), zeros)


def _masked(b: ir.IRBuilder, kind: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
    vec = ret if kind == "load" else args[0].type
    name = f"llvm.masked.{kind}.v{vec.count}f32.p0"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(ret, [a.type for a in args]), name
    )
    return b.call(fn, args)


def build_kernel(module: ir.Module, name: str, op: vmath.MathOp, width: int, params: dict) -> None:
    vec = ir.VectorType(F32, width)
    fnty = ir.FunctionType(ir.VoidType(), [F32.as_pointer()] * (op.arity + 1) + [I64])
    fn = ir.Function(module, fnty, name=name)
    *inputs, out, n = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, I64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    lane_ids = ir.Constant(ir.VectorType(I64, width), list(range(width)))
    mask = b.icmp_signed("<", b.add(_splat(b, i, width), lane_ids), _splat(b, n, width))
    align, zeros = I32(4), ir.Constant(vec, [0.0] * width)
    operands = [_masked(b, "load", vec, b.gep(p, [i]), align, mask, zeros) for p in inputs]
    result = op(b, *operands, **params)
    _masked(b, "store", ir.VoidType(), result, b.gep(out, [i]), align, mask)
    following = b.add(i, I64(width))
    i.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed("<", following, n), loop, done)
    b.position_at_end(done)
    b.ret_void()


# ---------------------------------------------------------------- references


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def _gated(x, gate):
    with np.errstate(invalid="ignore"):
        return np.where(x == -np.inf, np.nan, x * gate)


def _f32(value: float) -> float:
    return float(np.float32(value))


_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


@dataclass(frozen=True, eq=False)  # hashed by identity: cached per case
class Case:
    op: str
    reference: Callable
    dense: tuple[float, float] = (-10.0, 10.0)  # where most samples go
    params: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.op + "".join(f"[{k}={v}]" for k, v in self.params.items())

    @property
    def kernel(self) -> str:
        return re.sub(r"\W", "_", self.id)


def _pow_static_case(e: float) -> Case:
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
    Case("gelu_erf", lambda x: _gated(x, 0.5 * _erfc(-x / math.sqrt(2))), (-15.0, 6.0)),
    Case(
        "gelu_tanh",
        lambda x: _gated(x, _sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        (-12.0, 6.0),
    ),
    *(_pow_static_case(e) for e in (0, 0.5, 1, 2, 3, -1, -2, 7, -8, 1.5, -0.75, 10)),
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
    Case("relu", lambda x: np.where(x < 0, 0.0, x)),
    Case("leaky_relu", lambda x: np.where(x < 0, _f32(0.1) * x, x), params={"alpha": 0.1}),
    Case("elu", lambda x: np.where(x > 0, x, _f32(0.7) * np.expm1(x)), params={"alpha": 0.7}),
    Case(
        "selu",
        lambda x: _f32(SELU_GAMMA) * np.where(x > 0, x, _f32(SELU_ALPHA) * np.expm1(x)),
    ),
    Case("clip", lambda x: np.clip(x, -1.5, 2.0), params={"lo": -1.5, "hi": 2.0}),
    Case("hard_sigmoid", lambda x: np.clip(_f32(0.2) * x + 0.5, 0.0, 1.0)),
    Case("hard_swish", lambda x: _gated(x, np.clip(_f32(1 / 6) * x + 0.5, 0.0, 1.0))),
    Case("round_half_even", np.round),
    Case("sign", np.sign),
]
POW_CASE = Case("pow", np.power)
ALL_CASES = [*CASES, POW_CASE]


def test_cases_cover_every_registered_op():
    assert {case.op for case in ALL_CASES} == set(vmath.OPS)


# ---------------------------------------------------------------- samples

FLT_MAX = float(np.finfo(np.float32).max)
EDGES = np.array(
    [0.0, 1e-45, 1.1754942e-38, 1.1754944e-38, 1e-30, 1e-8, 0.5, 1.0, 2.0, 3.0, 9.1, 20.0,
     88.72283, 88.72284, 89.4159, 89.416, 87.33654, 87.33655, 103.97207, 103.97208, 104.0,
     math.pi / 2, math.pi, 3.92, 10.5, 2.0**12, 2.0**20, 2.0**24, 16367173 * 2.0**72,
     1e30, FLT_MAX, math.inf,
     8.0, 9.0, 10.0, 15.0, 87.0],  # where fast paths hand over to full ones
    dtype=np.float32,
)
EDGES = np.concatenate([EDGES, -EDGES, np.nextafter(EDGES, np.float32(0)), [np.nan]])
EDGES = np.concatenate([EDGES, -EDGES[:-1], [1 - 2**-24, 1 + 2**-23, -1 + 2**-24, -1 - 2**-23]])
EDGES = EDGES.astype(np.float32)


def sample(case: Case, n: int, seed: int = 0) -> np.ndarray:
    return accuracy.sample(EDGES, case.dense, n, seed)


def sample_pow(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return accuracy.sample_pow(EDGES, n, seed)


@functools.cache
def compiled(width: int) -> jit.CompiledModule:
    module = ir.Module(name=f"vmath_w{width}")
    for case in ALL_CASES:
        build_kernel(module, case.kernel, vmath.OPS[case.op], width, case.params)
    return jit.compile(module)


def run(width: int, case: Case, *inputs: np.ndarray) -> np.ndarray:
    inputs = [np.ascontiguousarray(a, dtype=np.float32) for a in inputs]
    out = np.empty_like(inputs[0])
    pointers = [ctypes.c_void_p] * (len(inputs) + 1)
    kernel = compiled(width).cfunc(case.kernel, None, *pointers, ctypes.c_int64)
    kernel(*(a.ctypes.data for a in inputs), out.ctypes.data, out.size)
    return out


@functools.cache
def reference(case: Case, n: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    inputs = sample_pow(n) if case is POW_CASE else (sample(case, n),)
    with np.errstate(all="ignore"):
        return inputs, case.reference(*(a.astype(np.float64) for a in inputs))


def documented_max_ulp(op: str) -> float:
    rows = re.findall(r"^\s{4}(\w+)\s+([\d.]+)\s+[\d.e+-]+", vmath.__doc__, re.M)
    return {name: float(ulp) for name, ulp in rows}[op]


def check(case: Case, width: int, n: int) -> Errors:
    inputs, ref = reference(case, n)
    got = run(width, case, *inputs)
    with np.errstate(all="ignore"):
        err = errors(got, ref)
    bad = np.flatnonzero(err.failing)
    detail = [
        f"x={[float(a[j]) for a in inputs]} got={got[j]!r} want={ref[j]!r} ulp={err.ulp[j]:.3g}"
        for j in bad[:8]
    ]
    header = f"{case.id} W={width}: {bad.size} points out of bounds"
    assert not bad.size, "\n".join([header, *detail])
    return err


# ---------------------------------------------------------------- tests

SAMPLES = 100_000


@pytest.mark.parametrize("width", [16, 8])
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_accuracy(case: Case, width: int):
    err = check(case, width, SAMPLES)
    measured = float(np.max(err.ulp))
    assert measured <= documented_max_ulp(case.op), (
        f"{case.id}: max error {measured:.2f} ulp exceeds the {documented_max_ulp(case.op)} "
        "documented in vmath's docstring"
    )


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_single_lane_vectors(case: Case):
    check(case, 1, 5_000)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_typical_inputs(case: Case):
    """Activation-like inputs: whole vectors take the fast paths (the samples above mostly mix
    in lanes for the full ones), and now and then one lane does not."""
    x = np.random.default_rng(1).standard_normal(16 * 256).astype(np.float32)
    x[::1000] = [np.nan, -np.inf, 1e30, -100.0, 100.0]
    got = run(16, case, x)
    with np.errstate(all="ignore"):
        err = errors(got, case.reference(x.astype(np.float64)))
    assert not err.failing.any(), x[err.failing][:8]


@pytest.mark.parametrize("width", [16, 8, 1])
def test_no_calls_remain_in_assembly(width: int):
    asm = compiled(width).asm()
    calls = [line.strip() for line in asm.splitlines() if re.match(r"\s+call", line)]
    assert not calls, calls
    if width == 16 and jit.host().has_feature("avx512f"):
        assert "zmm" in asm


ODD = ["expm1", "log1p", "tanh", "erf", "sin", "tan", "atan", "asin", "sinh", "asinh", "atanh"]


@pytest.mark.parametrize("op", ODD)
def test_odd_functions_keep_the_sign_of_zero(op: str):
    case = next(c for c in CASES if c.op == op)
    got = run(8, case, np.array([0.0, -0.0], np.float32))
    assert list(np.signbit(got)) == [False, True]


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float32, st.integers(0, 40), elements=st.floats(width=32)),
    st.sampled_from(["exp", "log", "tanh", "sin", "gelu_erf", "atan"]),
)
def test_any_length_and_any_float(x: np.ndarray, op: str):
    case = next(c for c in CASES if c.op == op)
    got = run(16, case, x)
    with np.errstate(all="ignore"):
        assert not errors(got, case.reference(x.astype(np.float64))).failing.any()


def test_pow_special_cases_follow_numpy():
    inf, nan = np.inf, np.nan
    x = np.array([-8, -8, -0.0, -0.0, -0.0, -inf, -inf, -1, 1, nan, 0.5, 2, -2], np.float32)
    y = np.array([1 / 3, 3, -3, -2, 0.5, 3, 0.5, inf, nan, 0, -inf, inf, 2**25 + 2], np.float32)
    got = run(8, POW_CASE, x, y)
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    np.testing.assert_array_equal(got, want)
    numbers = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


def test_ops_reject_wrong_operands_and_unknown_names():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), name="f")
    b = ir.IRBuilder(fn.append_basic_block())
    v = ir.Constant(ir.VectorType(F32, 4), [1.0] * 4)
    with pytest.raises(TypeError, match="exp: operands must be <N x float>"):
        vmath.emit(b, "exp", ir.Constant(ir.VectorType(ir.DoubleType(), 4), [1.0] * 4))
    with pytest.raises(TypeError, match="pow takes 2 operand"):
        vmath.emit(b, "pow", v)
    with pytest.raises(KeyError, match="no vector math op 'expf'"):
        vmath.emit(b, "expf", v)
    assert vmath.OPS["elu"].params == ("alpha",)
    assert vmath.emit(b, "exp", v).type == v.type
