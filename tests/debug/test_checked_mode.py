"""Checked mode: a broken pointer increment is caught, naming the kernel, expression and offset."""
import numpy as np
import pytest

import snipjit
from snipjit.runtime.errors import KernelBoundsError
from snipjit.snippets.pass_manager import LinearIRPass, PassPosition, PositionedPass

GRAPH = "graph(x: f32[8,100], y: f32[100]) -> [z] { [t] = Add(x, y)\n [z] = Relu(t) }"


class BreakPointerIncrement(LinearIRPass):
    """Test only: triples the pointer increment of the first loop entry (a Load of x)."""
    name = "BreakPointerIncrement"

    def run(self, lir) -> bool:
        for info in lir.loop_manager.loops.values():
            for lp in info.entry_points:
                lp.ptr_increment = lp.ptr_increment * 3
                return True
        return False


def feeds():
    return {"x": np.ones((8, 100), np.float32), "y": np.ones(100, np.float32)}


def test_broken_increment_is_caught_with_the_expression_named(monkeypatch):
    launched = []
    import snipjit.runtime.implementations.snippet as impl
    real = impl.SnippetKernel._launch_checked
    monkeypatch.setattr(impl.SnippetKernel, "_launch_checked", lambda self, *a: launched.append(1) or real(self, *a))
    bad = [PositionedPass(PassPosition.after("InitLoops"), BreakPointerIncrement)]
    cm = snipjit.compile(snipjit.parse_graph(GRAPH), checked=True, control_flow_passes=bad, target="llvm")
    with pytest.raises(KernelBoundsError, match=r"Load#\d+ \('param', 0\) accessed input 0 at byte offset \d+, "
                                                r"outside its 3200 bytes"):
        cm.run(feeds())
    assert launched   # only the checked kernel ran: nothing unchecked touched memory out of bounds


def test_correct_kernels_pass_the_checks_with_tails_broadcasts_and_reductions():
    texts = [GRAPH,
             "graph(x: f32[3,37], g: f32[37], b: f32[37]) -> [y] { [y] = LayerNormalization(x, g, b) {axis=-1} }",
             "graph(x: f32[2,3,5,40], m: f32[2,1,1,40]) -> [y] { [t] = Add(x, m)\n [y] = Softmax(t) {axis=-1} }"]
    rng = np.random.default_rng(0)
    for text in texts:
        g = snipjit.parse_graph(text)
        ins = {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}
        got = snipjit.compile(g, checked=True, target="llvm").run(ins)[0]
        want = snipjit.compile(g, implementations={"reference"}).run(ins)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_checked_mode_on_a_target_that_cannot_check_is_an_error():
    from snipjit.targets import TargetError, get_target
    if "c" not in __import__("snipjit.targets", fromlist=["TARGETS"]).TARGETS:
        pytest.skip("no C target")
    try:
        get_target("c")
    except TargetError:
        pytest.skip("no C compiler here")
    with pytest.raises(TargetError, match="checked mode needs the llvm target"):
        snipjit.compile(snipjit.parse_graph(GRAPH), checked=True, target="c")
