"""If, Loop and Scan from ONNX: bodies become graphs whose reads of the graphs around them are explicit
captures (through every level of nesting), and the compiled model runs them as ONNX defines."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import snipjit
from snipjit.frontend.onnx import FrontendError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_if_reads_the_outer_graph_and_its_branches_may_differ_in_shape():
    then = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["a"])], "then", [], [vi("a", F, None)])
    other = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["b"], axis=0)], "else", [], [vi("b", F, None)])
    m = model([helper.make_node("Neg", ["x0"], ["x"]),
               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [vi("c", B, []), vi("x0", F, [3]), vi("w", F, [3])], [vi("y", F, None)])
    cm = snipjit.compile(m)
    x0, w = np.array([1, 2, 3], np.float32), np.array([2, 0.5, -1], np.float32)
    np.testing.assert_array_equal(cm.run({"c": np.array(True), "x0": x0, "w": w})[0], -x0 * w)
    np.testing.assert_array_equal(cm.run({"c": np.array(False), "x0": x0, "w": w})[0], np.concatenate([-x0, -x0]))
    (node,) = [n for n in snipjit.frontend.onnx.load(m).nodes if n.op == "If"]
    assert [v.name for v in node.inputs] == ["c", "x", "w"] and node.attrs["captured"] == 2
    assert [v.name for v in node.attrs["else_branch"].inputs] == ["x", "w"]   # the same captures, in order


def loop_model(trip, with_cond=True):
    """sum += x * i over the iterations, stopping once sum > 100; the partial sums as a scan output."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", ["s", "xi"], ["s2"]),
         helper.make_node("ReduceSum", ["s2"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["go"]),
         helper.make_node("Identity", ["s2"], ["partial"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("s", F, [2])],
        [vi("go", B, []), vi("s2", F, [2]), vi("partial", F, [2])],
        [helper.make_tensor("limit", F, [], [100.0])])
    return model([helper.make_node("Loop", ["M", "cond" if with_cond else "", "s0"], ["s", "partials"], body=body)],
                 [vi("M", I64, []), vi("cond", B, []), vi("s0", F, [2]), vi("x", F, [2])],
                 [vi("s", F, [2]), vi("partials", F, None)])


def reference_loop(trip, x, s0):
    s, partials = s0.copy(), []
    for i in range(trip):
        s = s + x * i
        partials.append(s.copy())
        if s.sum() >= 100:
            break
    return s, np.array(partials, np.float32).reshape(-1, 2)


@pytest.mark.parametrize("trip", [0, 1, 4, 50])
def test_loop_carries_scans_and_stops_on_its_condition(trip):
    cm = snipjit.compile(loop_model(trip))
    x, s0 = np.array([1.5, 2.0], np.float32), np.array([0.0, 1.0], np.float32)
    s, partials = cm.run({"M": np.array(trip), "cond": np.array(True), "s0": s0, "x": x})
    want_s, want_partials = reference_loop(trip, x, s0)
    np.testing.assert_allclose(s, want_s)
    np.testing.assert_allclose(partials, want_partials)


def test_scan_backwards_along_axis_1():
    body = helper.make_graph([helper.make_node("Add", ["acc", "col"], ["acc2"]),
                              helper.make_node("Mul", ["acc2", "k"], ["out"])],
                             "body", [vi("acc", F, [2]), vi("col", F, [2])], [vi("acc2", F, [2]), vi("out", F, [2])])
    m = model([helper.make_node("Scan", ["a0", "xs"], ["a", "ys"], body=body, num_scan_inputs=1,
                                scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1])],
              [vi("a0", F, [2]), vi("xs", F, [2, 4]), vi("k", F, [])], [vi("a", F, [2]), vi("ys", F, [2, 4])])
    cm = snipjit.compile(m)
    xs, k = np.arange(8, dtype=np.float32).reshape(2, 4), np.array(0.5, np.float32)
    a, ys = cm.run({"a0": np.zeros(2, np.float32), "xs": xs, "k": k})
    acc, cols = np.zeros(2, np.float32), []
    for t in range(3, -1, -1):
        acc = acc + xs[:, t]
        cols.append(acc * k)
    np.testing.assert_allclose(a, acc)
    np.testing.assert_allclose(ys, np.stack(cols, axis=1))


def test_a_body_in_a_body_captures_through_both_levels():
    inner_then = helper.make_graph([helper.make_node("Add", ["s", "bias"], ["t"])], "t", [], [vi("t", F, [2])])
    inner_else = helper.make_graph([helper.make_node("Sub", ["s", "bias"], ["e"])], "e", [], [vi("e", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Greater", ["i", "two"], ["late"]),
         helper.make_node("If", ["late"], ["s2"], then_branch=inner_then, else_branch=inner_else)],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("s", F, [2])], [vi("cond", B, []), vi("s2", F, [2])],
        [helper.make_tensor("two", I64, [], [2])])
    m = model([helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body)],
              [vi("M", I64, []), vi("s0", F, [2]), vi("bias", F, [2])], [vi("s", F, [2])])
    cm = snipjit.compile(m)
    bias = np.array([1.0, 10.0], np.float32)
    s = cm.run({"M": np.array(5), "s0": np.zeros(2, np.float32), "bias": bias})[0]
    np.testing.assert_allclose(s, bias * (-3 + 2))   # iterations 0..2 subtract, 3..4 add
    loop = next(n for n in snipjit.frontend.onnx.load(m).nodes if n.op == "Loop")
    assert loop.attrs["captured"] == 1 and loop.inputs[-1].name == "bias"


def test_a_body_reading_an_unknown_name_is_named():
    then = helper.make_graph([helper.make_node("Neg", ["nowhere"], ["a"])], "then", [], [vi("a", F, [1])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "else", [], [vi("b", F, [1])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [vi("c", B, []), vi("x", F, [1])], [vi("y", F, [1])])
    with pytest.raises(FrontendError, match="a body reads 'nowhere', which no graph around it defines"):
        snipjit.compile(m)


def test_scan_of_opset_8_is_refused_clearly():
    body = helper.make_graph([helper.make_node("Add", ["a", "x"], ["a2"])], "body",
                             [vi("a", F, [1]), vi("x", F, [1])], [vi("a2", F, [1])])
    m = model([helper.make_node("Scan", ["", "a0", "xs"], ["a"], body=body, num_scan_inputs=1)],
              [vi("a0", F, [1, 1]), vi("xs", F, [1, 3, 1])], [vi("a", F, [1, 1])], opset=8)
    with pytest.raises(FrontendError, match="Scan of opset 8 is not supported"):
        snipjit.compile(m)


def test_bodies_run_as_compiled_programs_not_interpreted(monkeypatch):
    from snipjit.ops import control_flow
    cm = snipjit.compile(loop_model(6))
    (step,) = [s for s in cm.plan if s.node.op == "Loop"]
    assert step.kind == "control"
    body = step.kernel.bodies["body"].program
    assert "snippet" in [s.kind for s in body.steps]   # the body's elementwise chain is one generated kernel
    monkeypatch.setattr(control_flow, "run_graph_reference", lambda *a: pytest.fail("a body was interpreted"))
    x, s0 = np.array([1.5, 2.0], np.float32), np.array([0.0, 1.0], np.float32)
    s, partials = cm.run({"M": np.array(6), "cond": np.array(True), "s0": s0, "x": x})
    want_s, want_partials = reference_loop(6, x, s0)
    np.testing.assert_allclose(s, want_s)
    np.testing.assert_allclose(partials, want_partials)
    reference = snipjit.compile(loop_model(6), implementations={"reference"})
    assert [s.kind for s in reference.plan if s.node.op == "Loop"] == ["reference"]
