"""The Subgraph op: inference through the body, the reference kernel, and the reference interpreter."""
import numpy as np
import pytest

import snipjit
import snipjit.ops.subgraph  # noqa: F401  (registers Subgraph)
from snipjit.ir import Graph, Node, TensorType, Value, print_graph
from snipjit import parse_graph
from snipjit.ops import OpError, get_op, infer_node
from snipjit.ops.interpreter import run_graph_reference

# y = relu(x * 2 + b), and t = x * 2 as a second output
TWO_OUTPUTS = """graph main(x: f32[batch,3], b: f32[3]) -> [y, t] {
  [y, t] = Subgraph(x, b) {body=graph body(bx: f32[?,3], bb: f32[3]) -> [r, m] {
    const two: f32[] = 2.0
    [m] = Mul(bx, two)
    [s] = Add(m, bb)
    [r] = Relu(s)
  }} @subgraph0
}"""


def body_of(g: Graph) -> Graph:
    return g.nodes[0].attrs["body"]


def test_inference_gives_body_output_types_and_refines_the_body():
    g = parse_graph(TWO_OUTPUTS)
    assert [str(v.type) for v in g.outputs] == ["f32[batch,3]", "f32[batch,3]"]
    body = body_of(g)
    assert str(body.inputs[0].type) == "f32[batch,3]"  # the node's named dim reached the body
    assert {v.name: str(v.type) for v in body.values()}["s"] == "f32[batch,3]"


def test_inference_follows_new_input_types():
    g = parse_graph(TWO_OUTPUTS)
    x = g.inputs[0]
    x.type = TensorType.of("f32", (7, 3))
    assert [str(t) for t in infer_node(g.nodes[0])] == ["f32[7,3]", "f32[7,3]"]


def test_text_form_round_trips():
    g = parse_graph(TWO_OUTPUTS)
    text = print_graph(g)
    assert print_graph(parse_graph(text)) == text


def test_reference_runs_the_body():
    g = parse_graph(TWO_OUTPUTS)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    node = g.nodes[0]
    y, t = get_op("Subgraph").run(get_op("Subgraph").context(node), [x, b])
    np.testing.assert_array_equal(t, x * np.float32(2))
    np.testing.assert_array_equal(y, np.maximum(x * np.float32(2) + b, 0))
    assert y.dtype == np.float32 and y.shape == (4, 3)


def test_runtime_runs_a_subgraph_with_its_reference_kernel():
    cm = snipjit.compile(parse_graph(TWO_OUTPUTS), passes=[])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    b = np.array([1, -1, 0.5], np.float32)
    y, t = cm.run({"x": x, "b": b})
    np.testing.assert_array_equal(y, np.maximum(2 * x + b, 0))
    assert cm.plan[0].ops == ["Mul", "Add", "Relu"]


@pytest.mark.parametrize("text, message", [
    ("graph(x: f32[3]) -> [y] { [y] = Subgraph(x) {body=graph b(a: f32[3], c: f32[3]) -> [d] "
     "{ [d] = Add(a, c) }} @s }", "Subgraph node 's': has 1 inputs but its body takes 2"),
    ("graph(x: f32[3]) -> [y, z] { [y, z] = Subgraph(x) {body=graph b(a: f32[3]) -> [d] "
     "{ [d] = Neg(a) }} @s }", "has 2 outputs but its body gives 1"),
    ("graph(x: f64[3]) -> [y] { [y] = Subgraph(x) {body=graph b(a: f32[3]) -> [d] "
     "{ [d] = Neg(a) }} @s }", "input 0 is f64 but body input 'a' is f32"),
    ("graph(x: f32[4]) -> [y] { [y] = Subgraph(x) {body=graph b(a: f32[4]) -> [d] "
     "{ const k: f32[3] = [1.0, 2.0, 3.0]\n [d] = Add(a, k) @inner }} @s }",
     "Subgraph node 's': in its body: Add node 'inner'.*4 and 3"),
    ("graph(x: f32[3]) -> [y] { [y] = Subgraph(x) @s }", "required attribute 'body' is missing"),
    ("graph(x: f32[3]) -> [y] { [y] = Subgraph(x) {body=3} @s }", "'body' must be a graph, got int"),
])
def test_inference_errors_name_the_node(text, message):
    with pytest.raises(OpError, match=message):
        parse_graph(text)


def test_reference_checks_the_input_count():
    g = parse_graph(TWO_OUTPUTS)
    op = get_op("Subgraph")
    with pytest.raises(OpError, match="got 1 inputs but its body takes 2"):
        op.run(op.context(g.nodes[0]), [np.zeros((2, 3), np.float32)])


def test_interpreter_passes_inputs_and_constants_through():
    x = Value("x", TensorType.of("f32", (2,)))
    c = Value.constant("c", np.array([5.0, 6.0], np.float32))
    y = Value("y", TensorType.of("f32", (2,)))
    g = Graph([x], [x, c, y], [Node("Add", [x, c], [y])])
    a = np.array([1.0, 2.0], np.float32)
    outs = run_graph_reference(g, [a])
    np.testing.assert_array_equal(outs[0], a)
    np.testing.assert_array_equal(outs[1], [5.0, 6.0])
    np.testing.assert_array_equal(outs[2], [6.0, 8.0])
    with pytest.raises(ValueError, match="takes 1 inputs, got 2"):
        run_graph_reference(g, [a, a])


def test_interpreter_runs_nested_subgraphs():
    inner = "graph i(p: f32[2]) -> [q] { [q] = Neg(p) }"
    g = parse_graph(f"""graph(x: f32[2]) -> [y] {{
      [y] = Subgraph(x) {{body=graph o(a: f32[2]) -> [c] {{
        [b] = Subgraph(a) {{body={inner}}}
        [c] = Abs(b)
      }}}}
    }}""")
    a = np.array([-1.5, 2.0], np.float32)
    np.testing.assert_array_equal(run_graph_reference(g, [a])[0], np.abs(-a))
