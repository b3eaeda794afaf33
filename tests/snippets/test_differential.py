"""Differential tests: random elementwise graphs through the public API, generated kernels against the
reference kernels.

Graphs have ranks 1-6, inputs that broadcast (size-1 dims anywhere, lower ranks), sizes with vector
tails, 1-20 ops drawn from every op the Snippets compiler supports, scalar constants, f32 and bool values,
and several outputs. `snipjit.compile(graph)` (every node fused into snippet steps) must agree with
`snipjit.compile(graph, implementations={"reference"})`:

  * values computed only by correctly rounded ops (+ - * /, sqrt, min/max, floor, comparisons, ...) —
    "exact" values — must be equal (NaN where NaN, ±0 alike);
  * other values are within a tolerance that grows with the computation's conditioning, measured as the
    difference between the f32 reference and the same graph evaluated in float64.

To keep both sides comparable, ops that are discontinuous, ill-conditioned or domain-limited (comparisons,
rounding, Sqrt/Log/Asin/..., Sin/Cos/Tan, Pow) only take exact operands, so both sides see the same
arguments. The second test runs one compiled model on five sizes of a dynamic axis: one kernel per
subgraph, compiled once, called for each run.

Known discrepancies steer the generator and the comparison (each has its own failing test): Add/Sub take
no zero constant (x + 0 is dropped even for x = -0: tests/snippets/dataflow/
test_eliminate_identity_arithmetic.py); the gated activations (HardSwish, Mish, Gelu) read only graph
inputs, which are finite (at -inf the kernels give 0, the reference NaN: tests/targets/llvm/
test_emitters.py); and opposite infinities are accepted, since kernels may keep the sign of a zero
where the reference does not (Relu(-0): test_signed_zeros_match_the_reference) and 1/x shows it.
Values close to the float64 evaluation are accepted too: some reference formulas lose digits in f32
(Gelu's 1 + tanh(u) for negative x) where the kernels do not.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import snipjit
from snipjit.snippets.supported_ops import ELEMENTWISE_OPS


pytestmark = pytest.mark.usefixtures("memory_only_kernel_cache")   # kernels compiled from this code


# ---- the ops ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpSpec:
    inputs: str                 # f (f32) / b (bool) per input
    out: str = "f"
    kind: str = "exact"         # exact: correctly rounded, exact out of exact in; approx: continuous, inexact;
    #                             gate: needs exact inputs, output exact; guarded: needs exact inputs, inexact
    attrs: str = ""
    finite_inputs: bool = False  # reads only graph inputs (finite)


SPECS: dict[str, OpSpec] = {
    **{op: OpSpec("ff") for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu")},
    "Neg": OpSpec("f"), "Abs": OpSpec("f"), "Relu": OpSpec("f"), "Reciprocal": OpSpec("f"),
    "LeakyRelu": OpSpec("f", attrs="{alpha=0.125}"), "Clip": OpSpec("fff"), "Sum": OpSpec("fff"),
    **{op: OpSpec("f", kind="approx") for op in ("Exp", "Erf", "Atan", "Sinh", "Cosh", "Asinh", "Sigmoid",
                                                  "Tanh", "Softplus", "Softsign")},
    "Elu": OpSpec("f", kind="approx", attrs="{alpha=0.75}"),
    "Selu": OpSpec("f", kind="approx", attrs="{alpha=1.5, gamma=1.25}"),
    "Celu": OpSpec("f", kind="approx", attrs="{alpha=1.5}"),
    "HardSigmoid": OpSpec("f", kind="approx", attrs="{alpha=0.25, beta=0.375}"),
    "HardSwish": OpSpec("f", kind="approx", finite_inputs=True),
    "Mish": OpSpec("f", kind="approx", finite_inputs=True),
    "Gelu": OpSpec("f", kind="approx", attrs='{approximate="tanh"}', finite_inputs=True),
    **{op: OpSpec("f", kind="gate") for op in ("Floor", "Ceil", "Round", "Sign", "Sqrt")},
    "ThresholdedRelu": OpSpec("f", kind="gate", attrs="{alpha=0.5}"),
    **{op: OpSpec("f", kind="guarded") for op in ("Log", "Sin", "Cos", "Tan", "Asin", "Acos", "Atanh",
                                                   "Acosh")},
    "Pow": OpSpec("ff", kind="guarded"),
    **{op: OpSpec("ff", "b", kind="gate") for op in ("Equal", "Less", "LessOrEqual", "Greater",
                                                      "GreaterOrEqual")},
    "IsNaN": OpSpec("f", "b", kind="gate"),
    "IsInf": OpSpec("f", "b", kind="gate", attrs="{detect_negative=1, detect_positive=1}"),
    "Not": OpSpec("b", "b", kind="gate"),
    **{op: OpSpec("bb", "b", kind="gate") for op in ("And", "Or", "Xor")},
    "Where": OpSpec("bff", kind="where"),
}
CONSTANTS = [2.0, -1.5, 0.5, 3.0, -0.25, 1.0, 0.0]


def test_every_supported_op_is_generated():
    assert set(SPECS) == ELEMENTWISE_OPS


# ---- random graphs ---------------------------------------------------------------------------------
@dataclass
class Val:
    name: str
    dtype: str          # "f32" | "bool"
    shape: tuple        # aligned to the master rank (1 where it broadcasts)
    exact: bool
    rank: int           # the value's own rank (graph inputs may drop leading size-1 dims)
    is_input: bool = False


@dataclass
class RandomGraph:
    text: str
    master: tuple
    inputs: list[Val]
    outputs: list[Val]
    dynamic_axis: int | None = None

    def feeds(self, seed: int, master: tuple | None = None) -> dict[str, np.ndarray]:
        master = master or self.master
        rng = np.random.default_rng(seed)
        out = {}
        for v in self.inputs:
            shape = [1 if n == 1 else m for n, m in zip(v.shape, master)][len(master) - v.rank:]
            out[v.name] = rng.random(shape) < 0.5 if v.dtype == "bool" else input_data(rng, shape)
        return out


def input_data(rng: np.random.Generator, shape) -> np.ndarray:
    """Normal values with some edge values: NaN, ±0, integers, halves (rounding ties), large finite."""
    x = np.asarray(rng.normal(0, 2, shape), np.float32)
    special = np.array([np.nan, 0.0, -0.0, 1.0, -2.0, 0.5, -1.5, 2.5, 1e30, -3e4], np.float32)
    pick = rng.random(x.shape) < 0.1
    x[pick] = rng.choice(special, int(pick.sum()))
    return x


def broadcast(*shapes: tuple) -> tuple:
    return tuple(max(dims) for dims in zip(*shapes))


@st.composite
def random_graphs(draw, dynamic: bool = False) -> RandomGraph:
    rank = draw(st.integers(1, 6))
    inner = draw(st.sampled_from([1, 7, 15, 16, 17, 33, 40]))
    master = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5]), min_size=rank - 1, max_size=rank - 1))) + (inner,)
    while int(np.prod(master)) > 3000:    # keep examples small: outer dims become 1 from the front
        d = next(d for d, n in enumerate(master) if n != 1)
        master = master[:d] + (1,) + master[d + 1:]
    axis = draw(st.integers(0, rank - 1)) if dynamic else None
    if axis is not None and master[axis] == 1:
        master = master[:axis] + (3,) + master[axis + 1:]

    def new_input(i: int, dtype: str) -> Val:
        shape = tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in master)
        leading_ones = next((d for d, n in enumerate(shape) if n != 1), rank - 1)
        return Val(f"in{i}", dtype, shape, True, rank - draw(st.integers(0, leading_ones)), is_input=True)

    inputs = [new_input(i, "bool" if draw(st.integers(0, 5)) == 0 else "f32") for i in range(draw(st.integers(1, 4)))]
    if all(v.dtype == "bool" for v in inputs):
        inputs.append(new_input(len(inputs), "f32"))
    values = list(inputs)
    used: set[str] = set()
    lines: list[str] = []
    for k in range(draw(st.integers(1, 20))):
        op = draw(st.sampled_from(sorted(SPECS)))
        spec = SPECS[op]
        args: list[Val] = []
        for j, letter in enumerate(spec.inputs):
            dtype = "bool" if letter == "b" else "f32"
            needs_exact = spec.kind in ("gate", "guarded") or (spec.kind == "where" and j == 0)
            pool = [v for v in values if v.dtype == dtype and (v.exact or not needs_exact)
                    and (v.is_input or not spec.finite_inputs)]
            if op == "PRelu" and j == 1:   # the slope broadcasts to X without changing it
                pool = [v for v in pool if v.rank <= args[0].rank
                        and all(n == 1 or m != 1 for n, m in zip(v.shape, args[0].shape))]
            constant = dtype == "f32" and j > 0 and (op == "Clip" or draw(st.integers(0, 3)) == 0)
            if constant or (not pool and dtype == "f32" and not spec.finite_inputs and j > 0):
                value = draw(st.sampled_from(CONSTANTS[:-1] if op in ("Add", "Sub") else CONSTANTS))
                lines.append(f"const c{k}_{j}: f32[] = {value!r}")
                args.append(Val(f"c{k}_{j}", "f32", (1,) * rank, True, 0))
            elif pool:
                unused = [v for v in pool if v.name not in used]   # prefer values nothing reads yet: chains
                args.append(draw(st.sampled_from(unused if unused and draw(st.integers(0, 3)) else pool)))
            else:
                break
        else:
            exact = {"exact": all(a.exact for a in args), "approx": False, "gate": True, "guarded": False,
                     "where": all(a.exact for a in args[1:])}[spec.kind]
            if op == "Div" and args[1].name.startswith("c"):
                exact = False   # ConvertDivToMul: a product with the reciprocal, within one rounding
            out = Val(f"t{k}", "bool" if spec.out == "b" else "f32", broadcast(*(a.shape for a in args)), exact,
                      max(a.rank for a in args))
            attrs = " " + spec.attrs if spec.attrs and draw(st.booleans()) else ""   # else the defaults
            lines.append(f"[{out.name}] = {op}({', '.join(a.name for a in args)}){attrs}")
            values.append(out)
            used.update(a.name for a in args)
    computed = values[len(inputs):]
    assume(computed)
    # the last value and up to two others; values nothing reads are dead nodes
    outputs = [computed[-1]] + [v for v in draw(st.lists(st.sampled_from(computed), max_size=2, unique_by=id))
                                if v is not computed[-1]]

    def declared(v: Val) -> str:
        dims = ["?" if d == axis and n != 1 else str(n) for d, n in enumerate(v.shape)]
        return "[" + ",".join(dims[rank - v.rank:]) + "]"

    params = ", ".join(f"{v.name}: {v.dtype}{declared(v)}" for v in inputs)
    text = f"graph({params}) -> [{', '.join(v.name for v in outputs)}] {{\n  " + "\n  ".join(lines) + "\n}"
    return RandomGraph(text, master, inputs, outputs, axis)


# ---- comparing ---------------------------------------------------------------------------------------
def wide_reference(graph: RandomGraph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph evaluated by the reference kernels in float64."""
    wide = snipjit.compile(snipjit.parse_graph(graph.text.replace("f32", "f64")), implementations={"reference"})
    return wide.run({k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()})


def close(g: np.ndarray, w: np.ndarray, wide: np.ndarray) -> np.ndarray:
    """Per element: NaN where `w` is NaN, infinities equal up to sign, finite values within 1e-4 relative
    plus a margin for the computation's conditioning (16 times the f32 reference's distance from the
    float64 one) and for cancellation (1e-6 of the output's typical magnitude)."""
    g, w = g.astype(np.float64), w.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.abs(w[np.isfinite(w)])
        scale = max(1.0, float(np.percentile(finite, 90))) if finite.size else 1.0
        tol = 1e-4 * np.abs(w) + 1e-6 * scale + 16 * np.abs(w - wide)
        return (g == w) | (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & np.isinf(w)) | \
            (np.isfinite(g) & np.isfinite(w) & (np.abs(g - w) <= tol))


def check_outputs(graph: RandomGraph, got: list[np.ndarray], want: list[np.ndarray], wide: list[np.ndarray]) -> None:
    for v, g, w, w64 in zip(graph.outputs, got, want, wide):
        assert g.shape == w.shape and g.dtype == w.dtype, (v.name, g.shape, g.dtype, w.shape, w.dtype)
        if g.dtype == np.bool_:
            ok = g == w
        elif v.exact:
            ok = (g == w) | (np.isnan(g) & np.isnan(w)) | (np.isinf(g) & np.isinf(w))
        else:
            with np.errstate(over="ignore"):
                ok = close(g, w, w64) | close(g, w64.astype(np.float32), w64)
        if not ok.all():
            bad = np.argwhere(~ok)[:5]
            rows = "\n".join(f"  {tuple(int(i) for i in b)}: got {g[tuple(b)]!r} want {w[tuple(b)]!r} "
                             f"(f64 {w64[tuple(b)]!r})" for b in bad)
            raise AssertionError(f"output {v.name} ({'exact' if v.exact else 'approx'}): {int((~ok).sum())} of "
                                 f"{ok.size} elements differ\n{rows}\n{graph.text}")


def snippet_steps(cm) -> list:
    steps = cm.plan
    assert steps and all(s.kind == "snippet" for s in steps), [(s.kind, s.ops) for s in steps]
    return steps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_graphs(), st.integers(0, 2**16))
def test_random_graphs_match_the_reference(graph, seed):
    g = snipjit.parse_graph(graph.text)
    compiled = snipjit.compile(g)
    snippet_steps(compiled)
    reference = snipjit.compile(g, implementations={"reference"})
    feeds = graph.feeds(seed)
    check_outputs(graph, compiled.run(feeds), reference.run(feeds), wide_reference(graph, feeds))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_graphs(dynamic=True), st.integers(0, 2**16))
def test_one_kernel_serves_five_sizes_of_a_dynamic_axis(graph, seed):
    g = snipjit.parse_graph(graph.text)
    compiled = snipjit.compile(g)
    reference = snipjit.compile(g, implementations={"reference"})
    kernels = [s.kernel for s in snippet_steps(compiled)]
    axis = graph.dynamic_axis
    for run, size in enumerate((1, 2, 16, 17, 33) if axis == len(graph.master) - 1 else (1, 2, 3, 4, 6)):
        master = graph.master[:axis] + (size,) + graph.master[axis + 1:]
        feeds = graph.feeds(seed + run, master)
        check_outputs(graph, compiled.run(feeds), reference.run(feeds), wide_reference(graph, feeds))
    assert [s.kernel for s in compiled.plan] == kernels
    assert [k.calls for k in kernels] == [5] * len(kernels)


# ---- regressions and known bugs through the public API ---------------------------------------------
def test_dead_nodes_compile():
    g = snipjit.parse_graph("graph(x: f32[4]) -> [b] { [a] = Abs(x)\n [b] = Neg(x) }")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(snipjit.compile(g).run({"x": x})[0], -x)


def test_ops_with_default_attributes_compile():
    g = snipjit.parse_graph("graph(x: f32[4,37]) -> [y] { [a] = LeakyRelu(x)\n [y] = Elu(a) }")
    compiled = snipjit.compile(g)
    assert [s.kind for s in compiled.plan] == ["snippet"]
    x = np.linspace(-3, 3, 148, dtype=np.float32).reshape(4, 37)
    np.testing.assert_allclose(compiled.run({"x": x})[0],
                               snipjit.compile(g, implementations={"reference"}).run({"x": x})[0], rtol=1e-6)


def run_guarded(kernel, inputs: list[np.ndarray], master: tuple, guard: int = 64) -> list[np.ndarray]:
    """Call a snippet step's kernel function directly, each output followed by `guard` sentinel elements,
    and check they are left alone."""
    compiled = kernel.compiled
    rank = len(master)
    buffers = [np.full(int(np.prod([1 if c == 1 else n for c, n in zip(shape, master)])) + guard, -7.0, np.float32)
               for shape in compiled.output_shapes]
    arrays = [np.ascontiguousarray(a) for a in inputs]
    ptrs = (ctypes.c_void_p * (len(arrays) + len(buffers)))(*[a.ctypes.data for a in arrays],
                                                             *[b.ctypes.data for b in buffers])
    scratch = np.zeros(max(1, compiled.scratch_rows * master[-1]), np.float32)
    compiled.kernel.fn(ptrs, (ctypes.c_int64 * rank)(*master), 0, int(np.prod(master[:compiled.parallel_rank])),
                       scratch.ctypes.data)
    for b in buffers:
        assert np.all(b[b.size - guard:] == -7.0), "the kernel wrote past the end of an output"
    return [b[:b.size - guard] for b in buffers]


def test_a_kernel_output_broadcasting_along_the_innermost_dim():
    # t feeds two subgraphs (one graph output each), so a kernel computing it stores it as an output
    g = snipjit.parse_graph("""graph(x: f32[4,37], s: f32[4,1]) -> [z1, z2] {
      [t] = Exp(s)
      [z1] = Add(x, t)
      [z2] = Mul(x, t)
    }""")
    compiled = snipjit.compile(g)
    step = next(s for s in snippet_steps(compiled) if "Exp" in s.ops)
    shapes = step.kernel.compiled.output_shapes
    assert sorted(shape[-1] for shape in shapes) == [1, 37]
    x, s = np.ones((4, 37), np.float32), np.arange(4, dtype=np.float32).reshape(4, 1)
    outs = run_guarded(step.kernel, [{"x": x, "s": s}[v.name] for v in step.node.inputs], (4, 37))
    t = outs[[shape[-1] for shape in shapes].index(1)]
    np.testing.assert_allclose(t, np.exp(s).ravel(), rtol=1e-6)
    z1, z2 = compiled.run({"x": x, "s": s})
    np.testing.assert_allclose(z1, x + np.exp(s), rtol=1e-6)
    np.testing.assert_allclose(z2, x * np.exp(s), rtol=1e-6)
