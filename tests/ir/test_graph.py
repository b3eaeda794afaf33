"""Graph IR structure: validation errors name the node, toposort, copies, edits."""
import numpy as np
import pytest

from snipjit.ir import Graph, GraphError, Node, TensorType, Value
from snipjit import parse_graph
from snipjit.ir.shape import ShapeError, broadcast_shapes, merge_shapes
from snipjit.ops import OpError
from snipjit.ops.infer_shapes import infer_shapes


def f32(*shape):
    return TensorType.of("f32", shape)


def test_cycle_is_reported_with_its_nodes():
    x = Value("x", f32(2))
    a, b = Value("a", f32(2)), Value("b", f32(2))
    n1 = Node("Add", [x, b], [a], name="first")
    n2 = Node("Relu", [a], [b], name="second")
    g = Graph([x], [b], [n1, n2])
    with pytest.raises(GraphError, match="cycle.*first.*second|cycle.*second.*first"):
        g.validate()


def test_dangling_input_is_named():
    x = Value("x", f32(2))
    ghost = Value("ghost", f32(2))
    out = Value("y", f32(2))
    g = Graph([x], [out], [Node("Add", [x, ghost], [out], name="adder")])
    with pytest.raises(GraphError, match="Add node 'adder': input 1 'ghost' is not produced"):
        g.validate()


def test_misordered_nodes_are_sorted():
    g = parse_graph("graph(x: f32[2]) -> [z] { [y] = Relu(x)\n [z] = Neg(y) }")
    g.nodes.reverse()
    with pytest.raises(GraphError, match="produced by a later node"):
        g.validate()
    g.toposort()
    g.validate()
    assert [n.op for n in g.nodes] == ["Relu", "Neg"]


def test_shape_mismatch_names_the_node():
    with pytest.raises(OpError, match="Add node 'bad'.*3 and 4"):
        parse_graph("graph(x: f32[3], y: f32[4]) -> [z] { [z] = Add(x, y) @bad }")


def test_declared_type_conflict_names_the_node():
    g = parse_graph("graph(x: f32[3]) -> [z] { [z: f32[4]] = Relu(x) @r }", infer=False)
    with pytest.raises(GraphError, match="Relu node 'r'.*declared f32\\[4\\]"):
        infer_shapes(g)
    g = parse_graph("graph(x: f32[3]) -> [z] { [z: i64[3]] = Relu(x) @r }", infer=False)
    with pytest.raises(GraphError, match="declared i64"):
        infer_shapes(g)


def test_declared_names_survive_inference():
    g = parse_graph("graph(x: f32[?,3]) -> [z] { [z: f32[batch,3]] = Relu(x) }")
    assert g.outputs[0].type.shape == ("batch", 3)


def test_copy_is_independent_but_shares_constant_data():
    g = parse_graph("graph(x: f32[2]) -> [z] { const c: f32[2] = [1.0, 2.0]\n [z] = Add(x, c) }")
    h = g.copy()
    assert h.nodes[0] is not g.nodes[0] and h.inputs[0] is not g.inputs[0]
    assert h.constants[0].data is g.constants[0].data
    h.nodes[0].op = "Sub"
    assert g.nodes[0].op == "Add"
    assert h.nodes[0].outputs[0].producer is h.nodes[0]


def test_remove_dead_nodes_and_replace_uses():
    g = parse_graph("graph(x: f32[2]) -> [z] { [dead] = Neg(x)\n [y] = Relu(x)\n [z] = Abs(y) }")
    assert g.remove_dead_nodes() == 1
    y = g.nodes[0].outputs[0]
    g.replace_uses(y, g.inputs[0])
    assert g.nodes[1].inputs[0] is g.inputs[0]
    assert g.remove_dead_nodes() == 1


def test_broadcast_rules():
    assert broadcast_shapes((3, 1, 5), (4, 1)) == (3, 4, 5)
    assert broadcast_shapes(("b", 1), (1, 7)) == ("b", 7)
    assert broadcast_shapes(("b", None), (None, 7)) == ("b", 7)
    assert broadcast_shapes((2, 3), None) is None
    with pytest.raises(ShapeError):
        broadcast_shapes((2, 3), (4, 3))
    assert merge_shapes(("n", None), (None, 5)) == ("n", 5)
    with pytest.raises(ShapeError):
        merge_shapes((2,), (3,))


def test_value_constant_types():
    c = Value.constant("c", np.arange(6, dtype=np.int32).reshape(2, 3))
    assert str(c.type) == "i32[2,3]" and c.is_constant
