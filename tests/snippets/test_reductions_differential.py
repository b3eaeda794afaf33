"""Differential tests of fused reductions: random graphs mixing elementwise ops with Softmax, LogSoftmax,
LayerNormalization and ReduceSum/Mean/Max/Min over the last axis, through the public API.

`snipjit.compile(graph)` (every node fused into snippet steps, reductions included) must agree with
`snipjit.compile(graph, implementations={"reference"})`. Graphs have ranks 1-4, innermost sizes 1-300
(odd ones, with vector tails), inputs that broadcast along any axis (the innermost too) or have a lower
rank, dynamic dims, and several outputs, reduced ones among them. Kernels are compiled with
`checked=True`, so every load and store of an input, output or scratchpad row is bounds-checked.

Comparison: values computed only by correctly rounded ops and by ReduceMax/ReduceMin of such values
("exact" values) must be equal (NaN where NaN); every other value must be close to the float64
evaluation of the graph: within 1e-4 relative, plus 1e-5 of the output's typical magnitude (sums in
another order), plus 16 times the row's spread — how far from float64 the f32 reference lands, or a
float64 evaluation whose every intermediate value is perturbed by a few f32 ulps (an ill-conditioned
row, such as a LayerNormalization of nearly equal values, magnifies any rounding difference).

Each example compiles its graph once and runs it on several data sets (and, for dynamic graphs, several
sizes of the dynamic dims). Known bugs steer the generator (each has its own strict xfail below): a
reduction never reads a value that broadcasts along the innermost dim of a kernel whose innermost dim
is larger (test_reduction_of_a_value_broadcast_along_the_innermost_dim), and a kernel whose innermost
dim is 1 has no Reduce* result as an output (test_a_reduced_output_of_a_kernel_with_innermost_dim_1).
Values are f32 only: comparison masks and Where are covered by tests/snippets/test_differential.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import snipjit
import snipjit.runtime.errors
from snipjit.ops.registry import get_op
from snipjit.snippets.supported_ops import NORMALIZATION_OPS, REDUCE_OPS
from lir_helpers import checked_if_possible

REDUCTIONS = ("Softmax", "LogSoftmax", "LayerNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")
UNARY = ("Neg", "Abs", "Relu", "Tanh", "Sigmoid")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")
EXACT_OPS = {"Neg", "Abs", "Relu", "Add", "Sub", "Mul", "Max", "Min", "ReduceMax", "ReduceMin"}
INNER_SIZES = (1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 129, 255, 299, 300)


pytestmark = pytest.mark.usefixtures("memory_only_kernel_cache")   # kernels compiled from this code


# ---- random graphs ---------------------------------------------------------------------------------
@dataclass
class Val:
    name: str
    shape: tuple        # aligned to the master rank: 1 where it broadcasts
    rank: int           # its own rank (inputs may drop leading size-1 dims)
    exact: bool
    reductions: frozenset = frozenset()   # the reduction ops it is computed with
    reduced: bool = False                 # the direct result of a Reduce* op


@dataclass
class RandomGraph:
    text: str
    master: tuple
    inputs: list[Val]
    outputs: list[Val]
    reductions: frozenset   # the reductions the outputs are computed with
    dynamic: dict[int, str] = field(default_factory=dict)   # axis -> dim name

    def feeds(self, rng: np.random.Generator, master: tuple | None = None) -> dict[str, np.ndarray]:
        master = master or self.master
        out = {}
        for v in self.inputs:
            shape = [1 if n == 1 else m for n, m in zip(v.shape, master)][len(master) - v.rank:]
            out[v.name] = input_data(rng, shape)
        return out


def input_data(rng: np.random.Generator, shape) -> np.ndarray:
    """Normal values with a few edge values: ±0, integers, halves, large finite, rarely ±inf and NaN."""
    x = np.asarray(rng.normal(0, 2, shape), np.float32)
    special = np.array([0.0, -0.0, 1.0, -2.0, 0.5, -1.5, 3e3, -1e4, np.inf, -np.inf, np.nan], np.float32)
    pick = rng.random(x.shape) < 0.02
    x[pick] = rng.choice(special, int(pick.sum()))
    return x


@st.composite
def reduction_graphs(draw, dynamic: bool = False) -> RandomGraph:
    rank = draw(st.integers(1, 4))
    inner = draw(st.sampled_from(INNER_SIZES))
    master = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=rank - 1, max_size=rank - 1))) + (inner,)
    while int(np.prod(master[:-1])) > 12:
        d = next(d for d, n in enumerate(master) if n != 1)
        master = master[:d] + (1,) + master[d + 1:]
    dyn: dict[int, str] = {}
    if dynamic:
        for axis in draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=2, unique=True)):
            dyn[axis] = f"n{axis}"
            if master[axis] == 1:
                master = master[:axis] + (3,) + master[axis + 1:]

    def new_input(i: int) -> Val:
        shape = tuple(1 if draw(st.integers(0, 3)) == 0 and (i or d < rank - 1) else n   # in0: something to reduce
                      for d, n in enumerate(master))
        leading_ones = next((d for d, n in enumerate(shape) if n != 1), rank - 1)
        return Val(f"in{i}", shape, rank - draw(st.integers(0, leading_ones)), True)

    inputs = [new_input(i) for i in range(draw(st.integers(1, 3)))]
    values = list(inputs)
    lines: list[str] = []
    params: list[Val] = list(inputs)      # graph inputs: the data inputs and LayerNorm's scales and biases
    for k in range(draw(st.integers(1, 8))):
        kind = "reduce" if k == 0 else draw(st.sampled_from(["reduce", "reduce", "unary", "binary"]))
        name = f"t{k}"
        if kind == "reduce":
            # a reduction reads a value that is full along the innermost dim (or one of size 1 when the
            # kernel's innermost dim is 1): see test_reduction_of_a_value_broadcast_along_the_innermost_dim
            x = draw(st.sampled_from([v for v in values if v.shape[-1] == master[-1]]))
            op = draw(st.sampled_from(REDUCTIONS))
            args = [x]
            if op in ("Softmax", "LogSoftmax"):
                attrs = draw(st.sampled_from(["", " {axis=-1}", f" {{axis={x.rank - 1}}}"]))
            elif op == "LayerNormalization":
                for what in ("scale", "bias")[:draw(st.integers(1, 2))]:
                    p = Val(f"{what}{k}", (1,) * (rank - 1) + (master[-1],), 1, True)
                    if rank - 1 in dyn or draw(st.booleans()):   # a graph input (of the dynamic size)
                        params.append(p)
                    else:                                          # a constant
                        pattern = draw(st.lists(st.sampled_from([0.5, 1.0, -2.0, 0.25, 3.0]), min_size=1, max_size=5))
                        data = ", ".join(repr(float(c)) for c in np.resize(pattern, master[-1]))
                        lines.append(f"const {p.name}: f32[{master[-1]}] = [{data}]")
                    args.append(p)
                attrs = draw(st.sampled_from(["", " {epsilon=0.001}"]))
            else:
                lines.append(f"const ax{k}: i64[1] = [{draw(st.sampled_from([-1, x.rank - 1]))}]")
                args.append(Val(f"ax{k}", (), 1, True))
                attrs = draw(st.sampled_from(["", " {keepdims=1}"]))
            shape = x.shape[:-1] + (1,) if op.startswith("Reduce") else x.shape
            out = Val(name, shape, x.rank, x.exact and op in EXACT_OPS, x.reductions | {op}, op.startswith("Reduce"))
        else:
            args = [draw(st.sampled_from(values)) for _ in range(1 if kind == "unary" else 2)]
            op = draw(st.sampled_from(UNARY if kind == "unary" else BINARY))
            attrs = ""
            out = Val(name, tuple(map(max, *(a.shape for a in args))) if len(args) > 1 else args[0].shape,
                      max(a.rank for a in args), all(a.exact for a in args) and op in EXACT_OPS,
                      frozenset().union(*(a.reductions for a in args)))
        lines.append(f"[{name}] = {op}({', '.join(a.name for a in args)}){attrs}")
        values.append(out)
    computed = values[len(inputs):]
    # the last value and up to two others; values nothing reads are dead nodes
    others = draw(st.sets(st.integers(0, len(computed) - 2), max_size=2)) if len(computed) > 1 else set()
    outputs = [computed[-1]] + [computed[i] for i in sorted(others)]
    if master[-1] == 1:   # see test_a_reduced_output_of_a_kernel_with_innermost_dim_1
        outputs = [v for v in outputs if not v.reduced]
        if not outputs:
            last = computed[-1]
            lines.append(f"[out] = Neg({last.name})")
            outputs = [Val("out", last.shape, last.rank, last.exact, last.reductions)]
    reductions = frozenset().union(*(v.reductions for v in outputs))

    def declared(v: Val) -> str:
        dims = [dyn[d] if d in dyn and n != 1 else str(n) for d, n in enumerate(v.shape)]
        return "[" + ",".join(dims[rank - v.rank:]) + "]"

    header = ", ".join(f"{v.name}: f32{declared(v)}" for v in params)
    text = f"graph({header}) -> [{', '.join(v.name for v in outputs)}] {{\n  " + "\n  ".join(lines) + "\n}"
    return RandomGraph(text, master, params, outputs, reductions, dyn)


# ---- comparing ---------------------------------------------------------------------------------------
def evaluate(graph: snipjit.Graph, feeds: dict[str, np.ndarray], noise: float = 0.0,
             rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """The graph on the reference kernels, node by node; with `noise`, every float result is multiplied
    by 1 + noise * U(-1, 1): how much rounding each intermediate value a little differently (as
    kernels do, with other formulas and summation orders) can change the outputs."""
    env = {v: feeds[v.name] for v in graph.inputs}
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            opdef = get_op(node.op, node.domain)
            results = opdef.run(opdef.context(node), [v.data if v.is_constant else env[v] for v in node.inputs])
            for value, r in zip(node.outputs, results):
                r = np.asarray(r, value.type.dtype.np)
                env[value] = r * (1 + noise * rng.uniform(-1, 1, r.shape)) if noise and r.dtype.kind == "f" else r
    return [env[v] for v in graph.outputs]


@dataclass
class Models:
    """One graph compiled to generated kernels and to reference kernels, and its float64 twin."""
    kernels: snipjit.CompiledModel
    reference: snipjit.CompiledModel
    wide: snipjit.Graph


_compiled: dict[str, Models] = {}


def models(graph: RandomGraph) -> Models:
    """Compiled once per graph text; the last few are kept (hypothesis replays examples when shrinking)."""
    if graph.text not in _compiled:
        while len(_compiled) >= 4:
            _compiled.pop(next(iter(_compiled)))
        g = snipjit.parse_graph(graph.text)
        _compiled[graph.text] = Models(snipjit.compile(g, **checked_if_possible()),
                                       snipjit.compile(g, implementations={"reference"}),
                                       snipjit.parse_graph(graph.text.replace("f32", "f64")))
    return _compiled[graph.text]


ROUNDING = 2.0 ** -22   # a few f32 ulps


def check_outputs(graph: RandomGraph, m: Models, feeds: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    got, want = m.kernels.run(feeds), m.reference.run(feeds)
    wide_feeds = {k: v.astype(np.float64) for k, v in feeds.items()}
    wide = evaluate(m.wide, wide_feeds)
    noisy = evaluate(m.wide, wide_feeds, ROUNDING, rng)
    for v, g, w, w64, n64 in zip(graph.outputs, got, want, wide, noisy):
        assert g.shape == w.shape and g.dtype == w.dtype, (v.name, g.shape, g.dtype, w.shape, w.dtype)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        if v.exact:
            ok = same
        else:
            g64 = g.astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                finite = np.abs(w64[np.isfinite(w64)])
                scale = max(1.0, float(np.percentile(finite, 90))) if finite.size else 1.0
                spread = np.fmax(np.abs(w.astype(np.float64) - w64), np.abs(n64 - w64))
                spread = np.max(np.where(np.isfinite(spread), spread, 0), axis=-1, keepdims=True)   # per row
                tol = 1e-4 * np.abs(w64) + 1e-5 * scale + 16 * spread
                ok = same | (np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w))) | \
                    (np.isfinite(g64) & np.isfinite(w64) & (np.abs(g64 - w64) <= tol))
        if not ok.all():
            bad = np.argwhere(~ok)[:5]
            rows = "\n".join(f"  {tuple(int(i) for i in b)}: got {g[tuple(b)]!r} want {w[tuple(b)]!r} "
                             f"(f64 {w64[tuple(b)]!r})" for b in bad)
            raise AssertionError(f"output {v.name} ({'exact' if v.exact else 'approx'}): {int((~ok).sum())} of "
                                 f"{ok.size} elements differ\n{rows}\n{graph.text}")


def fused_ops(cm: snipjit.CompiledModel) -> list[str]:
    """The source ops of the plan's snippet steps; every step must be one."""
    steps = cm.plan
    assert steps and all(s.kind == "snippet" for s in steps), [(s.kind, s.ops) for s in steps]
    return [op for s in steps for op in s.ops]


def fast(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@fast(50)
@given(reduction_graphs(), st.integers(0, 2**16))
def test_random_graphs_with_reductions_match_the_reference(graph, seed):
    m = models(graph)
    assert graph.reductions <= set(fused_ops(m.kernels))
    rng = np.random.default_rng(seed)
    for _ in range(3):
        check_outputs(graph, m, graph.feeds(rng), rng)


@fast(30)
@given(reduction_graphs(dynamic=True), st.integers(0, 2**16))
def test_one_kernel_serves_many_sizes_of_the_dynamic_dims(graph, seed):
    m = models(graph)
    assert graph.reductions <= set(fused_ops(m.kernels))
    kernels = [s.kernel for s in m.kernels.plan]
    rng = np.random.default_rng(seed)
    rank = len(graph.master)
    for run in range(4):
        master = list(graph.master)
        for axis in graph.dynamic:
            sizes = (1, 5, 16, 17, 64, 129, 300) if axis == rank - 1 else (1, 2, 3, 5)
            master[axis] = int(rng.choice(sizes))
        check_outputs(graph, m, graph.feeds(rng, tuple(master)), rng)
    assert [s.kernel for s in m.kernels.plan] == kernels


# ---- every supported reduction -----------------------------------------------------------------------
def call_of(op: str) -> str:
    if op in REDUCE_OPS:
        return f"{op}(x, ax)"
    return {"LayerNormalization": "LayerNormalization(x, g, b)",
            "MeanVarianceNormalization": "MeanVarianceNormalization(x) {axes=[2]}"}.get(op, f"{op}(x)")


@pytest.mark.parametrize("op", sorted(REDUCE_OPS | NORMALIZATION_OPS))
def test_every_supported_reduction_is_fused_and_matches(op):
    g = snipjit.parse_graph(f"""graph(x: f32[2,3,n], g: f32[n], b: f32[1]) -> [z] {{
      const ax: i64[1] = [-1]
      [z] = {call_of(op)}
    }}""")
    compiled = snipjit.compile(g, **checked_if_possible())
    assert [(s.kind, s.ops) for s in compiled.plan] == [("snippet", [op])]
    reference = snipjit.compile(g, implementations={"reference"})
    rng = np.random.default_rng(0)
    for n in (1, 7, 16, 33, 300):
        feeds = {"x": rng.uniform(0.5, 2, (2, 3, n)).astype(np.float32),   # positive: logs and products are defined
                 "g": rng.normal(0, 1, n).astype(np.float32), "b": np.float32([0.5])}
        np.testing.assert_allclose(compiled.run(feeds)[0], reference.run(feeds)[0], rtol=1e-5, atol=1e-5,
                                   err_msg=f"{op} over {n}")


# ---- the scratchpad, and known bugs through the public API ------------------------------------------
def test_threads_each_use_their_own_scratchpad():
    # rows of a softmax of a sum go through scratch buffers; 2048 rows run in parallel chunks
    g = snipjit.parse_graph("""graph(x: f32[2048,67], y: f32[67]) -> [z] {
      [a] = Add(x, y)
      [s] = Softmax(a)
      [z] = Mul(s, a)
    }""")
    compiled = snipjit.compile(g)
    (step,) = compiled.plan
    assert step.kind == "snippet" and step.kernel.compiled.scratch_rows == 2
    reference = snipjit.compile(g, implementations={"reference"})
    rng = np.random.default_rng(3)
    for _ in range(3):
        feeds = {"x": rng.normal(0, 2, (2048, 67)).astype(np.float32), "y": rng.normal(0, 2, 67).astype(np.float32)}
        np.testing.assert_allclose(compiled.run(feeds)[0], reference.run(feeds)[0], rtol=1e-5, atol=1e-7)


def test_reduction_of_a_value_broadcast_along_the_innermost_dim():
    g = snipjit.parse_graph("""graph(x: f32[3,37], s: f32[3,1]) -> [z] {
      const ax: i64[1] = [-1]
      [r] = ReduceSum(s, ax)
      [z] = Add(x, r)
    }""")
    compiled = snipjit.compile(g)
    feeds = {"x": np.ones((3, 37), np.float32), "s": np.arange(3, dtype=np.float32).reshape(3, 1)}
    np.testing.assert_array_equal(compiled.run(feeds)[0], feeds["x"] + feeds["s"])


def test_a_reduced_output_of_a_kernel_with_innermost_dim_1():
    g = snipjit.parse_graph("""graph(x: f32[3,1]) -> [r] {
      const ax: i64[1] = [-1]
      [r] = ReduceSum(x, ax)
    }""")
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    np.testing.assert_array_equal(snipjit.compile(g, **checked_if_possible()).run({"x": x})[0], x)


def test_reductions_over_an_empty_axis_give_their_identity():
    g = snipjit.parse_graph("""graph(x: f32[3,n]) -> [mx, mn] {
      const ax: i64[1] = [-1]
      [mx] = ReduceMax(x, ax)
      [mn] = ReduceMin(x, ax)
    }""")
    compiled = snipjit.compile(g)
    assert [s.kind for s in compiled.plan] == ["snippet", "snippet"]
    compiled.run({"x": np.full((3, 2), 5.0, np.float32)})
    empty = {"x": np.zeros((3, 0), np.float32)}
    want = snipjit.compile(g, implementations={"reference"}).run(empty)
    np.testing.assert_array_equal(want[0].ravel(), [-np.inf] * 3)
    for got, w in zip(compiled.run(empty), want):
        np.testing.assert_array_equal(got, w)
