"""Program: one implementation per node by priority, a plan per input-shape signature (cached, no
kernel recompilation for new shapes), views for Reshape-like ops, and an arena smaller than the
activations it holds."""
import numpy as np
import pytest

import snipjit
from snipjit.ir.graph import TensorType
from snipjit.runtime.implementations.choice import IMPLEMENTATIONS
from snipjit.runtime.caches import kernel_cache
from snipjit.runtime.implementations.base import (Implementation, NotApplicable, ReferenceKernel, choose_implementation)
from snipjit.runtime.caches.kernel_cache import KernelCache
from snipjit.runtime.planning.program import Program

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A fresh process kernel cache in a temporary directory, to count compilations."""
    fresh = KernelCache(tmp_path)
    monkeypatch.setattr(kernel_cache, "_cache", fresh)
    return fresh


def slot_of(cm, name):
    value = next(v for v in cm.graph.values() if v.name == name)
    return cm.program.slots[id(value)]


DYNAMIC = """graph(x: f32[n,64], w: f32[64,64]) -> [y] {
  const c: f32[] = 2.0
  const s: i64[2] = [-1, 32]
  [m] = MatMul(x, w)
  [a] = Mul(m, c)
  [b] = Tanh(a)
  [r] = Reshape(b, s)
  [y] = Exp(r)
}"""


def dynamic_expected(x, w):
    return np.exp(np.tanh(x @ w * 2)).reshape(-1, 32)


# ---- implementation choice ----------------------------------------------------------------------
def test_priorities_snippet_then_blas_then_reference(cache):
    cm = snipjit.compile(snipjit.parse_graph(DYNAMIC))
    assert [(s.kind, s.ops) for s in cm.plan] == [
        ("blas", ["MatMul"]), ("snippet", ["Mul", "Tanh"]), ("reference", ["Reshape"]), ("snippet", ["Exp"])]
    restricted = snipjit.compile(snipjit.parse_graph(DYNAMIC), implementations={"reference"})
    assert {s.kind for s in restricted.plan} == {"reference"}
    x, w = randn(8, 64), randn(64, 64)
    np.testing.assert_allclose(cm.run({"x": x, "w": w})[0], dynamic_expected(x, w), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(restricted.run({"x": x, "w": w})[0], dynamic_expected(x, w), rtol=1e-5, atol=1e-6)


def test_blas_only_takes_f32():
    g = snipjit.parse_graph("graph(x: f64[4,8], w: f64[8,3]) -> [y] {\n [y] = MatMul(x, w)\n}")
    cm = snipjit.compile(g)
    assert [s.kind for s in cm.plan] == ["reference"]
    x, w = np.ones((4, 8)), np.ones((8, 3))
    assert cm.run({"x": x, "w": w})[0].dtype == np.float64


def test_not_applicable_falls_through_to_the_next_implementation(monkeypatch):
    tried = []

    def refuse(node, options):
        tried.append(node.op)
        raise NotApplicable("not this one")

    implementations = (Implementation("picky", lambda n, o: True, refuse), *IMPLEMENTATIONS)
    g = snipjit.parse_graph("graph(x: f32[4]) -> [y] {\n [y] = Relu(x)\n}")
    kind, kernel = choose_implementation(g.nodes[0], {}, implementations)
    assert tried == ["Relu"] and kind == "reference" and isinstance(kernel, ReferenceKernel)
    with pytest.raises(ValueError, match="no implementation accepts"):
        choose_implementation(g.nodes[0], {"implementations": {"picky"}}, implementations)


def test_implementations_are_asked_in_the_listed_order():
    assert [i.kind for i in IMPLEMENTATIONS] == ["snippet", "int8", "nhwc", "blas", "int8", "recurrent", "copy",
                                                "reference"]


# ---- plans per signature ------------------------------------------------------------------------
def test_plan_is_cached_per_signature_and_kernels_are_not_recompiled(cache, monkeypatch):
    planned = []
    real_plan = Program._plan
    monkeypatch.setattr(Program, "_plan", lambda self, types: planned.append(types) or real_plan(self, types))
    cm = snipjit.compile(snipjit.parse_graph(DYNAMIC))
    compiled = cache.misses
    assert compiled == 2 and planned == []   # two snippet kernels; a dynamic model is planned on first run
    kernels = [s.kernel for s in cm.plan]
    w = randn(64, 64)
    for n in (16, 16, 48, 16, 48):
        x = randn(n, 64)
        np.testing.assert_allclose(cm.run({"x": x, "w": w})[0], dynamic_expected(x, w), rtol=1e-5, atol=1e-6)
    assert [t[0].shape for t in planned] == [(16, 64), (48, 64)]
    plans = cm.program.plans()
    assert len(plans) == 2
    first = cm.program.plan_for([TensorType.of("f32", (16, 64)), TensorType.of("f32", (64, 64))])
    assert first is plans[(("f32", (16, 64)), ("f32", (64, 64)))]
    assert cache.misses == compiled and cache.hits == {"memory": 0, "disk": 0}   # no kernel lookups at all
    assert all(a is b for a, b in zip((s.kernel for s in cm.plan), kernels))


def test_static_model_is_planned_at_compile_time(monkeypatch):
    planned = []
    real_plan = Program._plan
    monkeypatch.setattr(Program, "_plan", lambda self, types: planned.append(types) or real_plan(self, types))
    g = snipjit.parse_graph("graph(x: f32[8,16]) -> [y] {\n [a] = Relu(x)\n [y] = Neg(a)\n}")
    cm = snipjit.compile(g, fuse=False)
    assert len(planned) == 1
    for _ in range(3):
        cm.run({"x": randn(8, 16)})
    cm.create_request().run({"x": randn(8, 16)})
    assert len(planned) == 1
    assert "inputs x[8, 16]: arena" in cm.explain(show_passes=False)


# ---- views --------------------------------------------------------------------------------------
VIEWS = {
    "Reshape": ("const s: i64[2] = [64, 128]\n [v] = Reshape(a, s)", (64, 128)),
    "Flatten": ("[v] = Flatten(a) {axis=2}", (4, 2048)),
    "Squeeze": ("const ax: i64[1] = [1]\n [v] = Squeeze(a, ax)", (4, 16, 128)),
    "Unsqueeze": ("const ax: i64[2] = [0, 3]\n [v] = Unsqueeze(a, ax)", (1, 4, 1, 1, 16, 128)),
}


@pytest.mark.parametrize("op", sorted(VIEWS))
def test_reshape_like_output_shares_memory_with_its_input(op):
    body, shape = VIEWS[op]
    cm = snipjit.compile(snipjit.parse_graph(f"graph(x: f32[4,1,16,128]) -> [a, v] {{\n [a] = Relu(x)\n {body}\n}}"))
    x = randn(4, 1, 16, 128)
    a, v = cm.run({"x": x})
    assert v.shape == shape and np.shares_memory(a, v)
    np.testing.assert_array_equal(v, np.maximum(x, 0).reshape(shape))
    plan = next(iter(cm.program.plans().values()))
    assert plan.modes[-1] == "view"


@pytest.mark.parametrize("op", sorted(VIEWS))
def test_view_inside_the_graph_takes_no_arena_space(op):
    body, shape = VIEWS[op]
    g = snipjit.parse_graph(f"graph(x: f32[4,1,16,128]) -> [y] {{\n [a] = Relu(x)\n {body}\n [y] = Neg(v)\n}}")
    cm = snipjit.compile(g, fuse=False)
    x = randn(4, 1, 16, 128)
    req = cm.create_request()
    np.testing.assert_array_equal(req.run({"x": x})[0], -np.maximum(x, 0).reshape(shape))
    plan = next(iter(cm.program.plans().values()))
    a, v = slot_of(cm, "a"), slot_of(cm, "v")
    assert plan.view_of == {v: a}
    assert list(plan.arena_slots) == [a]
    assert plan.memory.arena_size == 4 * 16 * 128 * 4
    bound = next(iter(req._bound.values()))
    assert np.shares_memory(bound.slots[v], bound.arena)


@pytest.mark.parametrize("shape, view", [((1, 1, 16, 8), True), ((1, 1, 1, 8), True), ((3, 1, 16, 8), False)])
def test_a_broadcast_that_repeats_nothing_at_a_signature_is_a_view(shape, view):
    """An Expand to a shape computed at run time (as exporters write masks): where it repeats nothing, it is a
    reshape of its input; where it does repeat, it runs."""
    g = snipjit.parse_graph("""graph(x: f32[1,n,8], z: f32[p,q,r,t]) -> [y] {
      [a] = Relu(x)
      [s] = Shape(z)
      [e] = Expand(a, s)
      [y] = Neg(e)
    }""")
    cm = snipjit.compile(g, fuse=False)
    x = randn(1, 16, 8)
    y, = cm.run({"x": x, "z": np.zeros(shape, np.float32)})
    np.testing.assert_array_equal(y, -np.broadcast_to(np.maximum(x, 0), np.broadcast_shapes(x.shape, shape)))
    plan = next(iter(cm.program.plans().values()))
    assert (plan.modes[[s.node.op for s in cm.program.steps].index("Expand")] == "view") == view
    assert (slot_of(cm, "e") in plan.view_of) == view


def test_views_of_views_resolve_to_one_root():
    g = snipjit.parse_graph("""graph(x: f32[4,16,128]) -> [y] {
      const ax: i64[1] = [0]
      [a] = Relu(x)
      [f] = Flatten(a) {axis=1}
      [u] = Unsqueeze(f, ax)
      [y] = Neg(u)
    }""")
    cm = snipjit.compile(g, fuse=False)
    x = randn(4, 16, 128)
    np.testing.assert_array_equal(cm.run({"x": x})[0], -np.maximum(x, 0).reshape(1, 4, 2048))
    plan = next(iter(cm.program.plans().values()))
    a, f, u = slot_of(cm, "a"), slot_of(cm, "f"), slot_of(cm, "u")
    assert plan.view_of == {f: a, u: f} and list(plan.arena_slots) == [a]


# ---- arena --------------------------------------------------------------------------------------
def test_chain_arena_holds_two_activations():
    ops = ["Relu", "Neg", "Exp", "Sigmoid", "Abs", "Neg"]
    lines, prev = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        lines.append(f"[{out}] = {op}({prev})")
        prev = out
    g = snipjit.parse_graph("graph(x: f32[64,256]) -> [y] {\n" + "\n".join(lines) + "\n}")
    cm = snipjit.compile(g, fuse=False)
    plan = next(iter(cm.program.plans().values()))
    size = 64 * 256 * 4
    assert plan.activation_bytes == len(ops) * size
    assert plan.memory.arena_size == 2 * size <= plan.activation_bytes
    assert len(plan.arena_slots) == len(ops) - 1   # the output escapes: it is not in the arena
    x = randn(64, 256)
    expected = -np.abs(1 / (1 + np.exp(-np.exp(-np.maximum(x, 0)))))
    np.testing.assert_allclose(cm.run({"x": x})[0], expected, rtol=1e-6)
