"""LinearIR: construction from a body, the edit helpers passes use (insert_node, replace_with_node,
replace_with_expr, remove), debug_print and serialize."""
import json

import pytest

from lir_helpers import find, lowered, one, ops, prepared
from snipjit import parse_graph
from snipjit.snippets.lowered.expression import Expression
from snipjit.snippets.lowered.linear_ir import LinearIR, LinearIRError

BODY = """graph(x: f32[2,?,37], y: f32[37]) -> [z, w] {
  const c: f32[] = 2.0
  [a] = Mul(x, c)
  [z] = Add(a, y)
  [w] = Relu(a)
}"""


def edges(lir: LinearIR) -> set[tuple]:
    """(producer index, output, consumer index, input) for every connection."""
    index = {id(e): i for i, e in enumerate(lir.expressions)}
    return {(index[id(c.source.expr)], c.source.index, index[id(e)], k)
            for e in lir.expressions for k, c in enumerate(e.inputs)}


def assert_consistent(lir: LinearIR) -> None:
    """Every input connector lists the reading port among its consumers and vice versa, and every
    expression reads only expressions placed before it."""
    position = {id(e): i for i, e in enumerate(lir.expressions)}
    for i, e in enumerate(lir.expressions):
        for k, conn in enumerate(e.inputs):
            assert e.input_port(k) in conn.consumers, f"{e.name}.in{k} missing from its connector"
            assert position[id(conn.source.expr)] < i, f"{e.name} reads {conn.source.expr.name} placed later"
        for conn in e.outputs:
            for port in conn.consumers:
                assert port.expr.inputs[port.index] is conn, f"{port} does not read {e.name}"


def test_from_body_makes_parameters_expressions_and_results():
    lir = lowered(BODY, until="")
    assert ops(lir) == ["Parameter", "Parameter", "Scalar", "Mul", "Add", "Relu", "Result", "Result"]
    assert lir.master_shape == (2, None, 37) and lir.parallel_rank == 2
    x, y = lir.parameters()
    assert x.attrs == {"index": 0, "name": "x"} and y.out_descs[0].shape == (1, 1, 37)
    mul, add, relu = find(lir, "Mul")[0], one(lir, "Add"), one(lir, "Relu")
    assert [c.expr for c in mul.consumers(0)] == [add, relu]
    assert add.input_source(1) is y and mul.input_source(1).op == "Scalar"
    assert [r.attrs["name"] for r in lir.results()] == ["z", "w"]
    assert edges(lir) == {(0, 0, 3, 0), (2, 0, 3, 1), (3, 0, 4, 0), (1, 0, 4, 1), (3, 0, 5, 0), (4, 0, 6, 0),
                          (5, 0, 7, 0)}
    assert_consistent(lir)


def test_from_body_refuses_plain_constants():
    body = parse_graph("graph(x: f32[4]) -> [z] { const c: f32[] = 1.5\n [z] = Add(x, c) }")
    with pytest.raises(LinearIRError, match="run ConvertConstantsToScalars first"):
        LinearIR.from_body(body)


def test_insert_node_connects_inputs_and_takes_over_consumers():
    lir = lowered(BODY, until="")
    mul, add, relu = one(lir, "Mul"), one(lir, "Add"), one(lir, "Relu")
    neg = lir.insert_node("Neg", [mul.output_port(0)], lir.index(relu), loop_ids=[7],
                          consumers=[relu.input_port(0)])
    assert lir.expressions[lir.index(relu) - 1] is neg
    assert neg.loop_ids == [7] and neg.dtype == "f32"
    assert neg.out_descs[0].shape == mul.out_descs[0].shape == neg.in_descs[0].shape
    assert relu.input_source(0) is neg
    assert [c.expr for c in mul.consumers(0)] == [add, neg]
    assert_consistent(lir)


def test_insert_node_with_explicit_shape_and_dtype():
    lir = lowered(BODY, until="")
    begin = lir.insert_node("LoopBegin", [], 3, {"loop_id": 0}, out_shape=(), dtype="i64")
    assert begin.inputs == [] and begin.out_descs[0].shape == () and begin.dtype == "i64"
    assert lir.expressions[3] is begin


def test_replace_with_node_a_single_expression():
    lir = lowered(BODY, until="")
    relu = one(lir, "Relu")
    position = lir.index(relu)
    abs_ = lir.replace_with_node([relu], "Abs")
    assert lir.expressions[position] is abs_ and relu not in lir.expressions
    assert abs_.input_source(0) is one(lir, "Mul")
    assert [c.expr.op for c in abs_.consumers(0)] == ["Result"]
    assert_consistent(lir)


def test_replace_with_node_a_chain():
    lir = lowered(BODY, until="")
    mul, add = one(lir, "Mul"), one(lir, "Add")
    relu = one(lir, "Relu")
    lir.reconnect(relu.input_port(0), add.output_port(0))   # Mul now feeds only Add
    fused = lir.replace_with_node([mul, add], "FusedMulAdd", {"k": 1})
    assert ops(lir) == ["Parameter", "Parameter", "Scalar", "FusedMulAdd", "Relu", "Result", "Result"]
    assert [fused.input_source(i).op for i in range(2)] == ["Parameter", "Scalar"]
    assert sorted(c.expr.op for c in fused.consumers(0)) == ["Relu", "Result"]
    assert fused.attrs == {"k": 1} and fused.out_descs[0].shape == (2, None, 37)
    assert_consistent(lir)


def test_replace_with_expr_takes_a_prepared_expression():
    lir = lowered(BODY, until="")
    relu = one(lir, "Relu")
    new = Expression("Sigmoid")   # wired by hand, as a pass building its own expression does
    LinearIR._connect(relu.inputs[0].source, new, 0, relu.in_descs[0].shape)
    LinearIR._add_output(new, relu.out_descs[0].shape)
    lir.replace_with_expr([relu], new)
    assert one(lir, "Sigmoid") is new and new.input_source(0) is one(lir, "Mul")
    assert lir.results()[1].input_source(0) is new
    assert_consistent(lir)


def test_remove_refuses_an_expression_still_read():
    lir = lowered(BODY, until="")
    mul = one(lir, "Mul")
    with pytest.raises(LinearIRError, match="cannot remove Mul#"):
        lir.remove(mul)
    assert mul in lir.expressions


def test_remove_disconnects_inputs():
    lir = lowered(BODY, until="")
    relu, w = one(lir, "Relu"), lir.results()[1]
    lir.remove(w)
    lir.remove(relu)
    assert [c.expr.op for c in one(lir, "Mul").consumers(0)] == ["Add"]
    with pytest.raises(LinearIRError, match="is not in the Linear IR"):
        lir.index(relu)


def test_debug_print_lists_expressions_ports_registers_and_loops():
    lir = prepared(BODY)
    text = lir.debug_print()
    lines = text.splitlines()
    assert lines[0] == "LinearIR master_shape=[2, None, 37] lanes=16"
    for e in lir.expressions:
        assert sum(line.lstrip().startswith(e.name + " ") for line in lines) == 1
    assert "loop 0: dim 2 work=37 inc=16" in text
    mul_line = next(line for line in lines if line.lstrip().startswith("Mul#"))
    assert "@vec" in mul_line and "loops=[0]" in mul_line
    assert str(lir) == text


def test_serialize_is_json_in_control_flow_order_with_the_edges():
    lir = lowered(BODY)
    data = json.loads(lir.serialize())
    assert [e["op"] for e in data["expressions"]] == ops(lir)
    assert [e["id"] for e in data["expressions"]] == list(range(len(lir.expressions)))
    assert data["master_shape"] == [2, None, 37]
    from_json = {(src, out, e["id"], k) for e in data["expressions"]
                 for k, (src, out) in enumerate(i["source"] for i in e["inputs"])}
    assert from_json == edges(lir)
    consumers = {(e["id"], k, c[0], c[1]) for e in data["expressions"]
                 for k, o in enumerate(e["outputs"]) for c in o["consumers"]}
    assert from_json == consumers
    mul = next(e for e in data["expressions"] if e["op"] == "Mul")
    assert mul["loop_ids"] == [0] and mul["outputs"][0]["shape"] == [2, None, 37]
    loop = data["loops"]["0"]
    assert loop["dim"] == 2 and loop["work_amount"] == "37" and loop["increment"] == 16
    assert {p["ptr_increment"] for p in loop["ports"]} == {"1"}
    assert {p["finalization_offset"] for p in loop["ports"]} == {"-37"}


def test_serialize_a_prepared_linear_ir_with_registers_and_a_tail_loop():
    data = json.loads(prepared(BODY).serialize())
    mul = next(e for e in data["expressions"] if e["op"] == "Mul")
    assert mul["outputs"][0]["reg"].startswith("vec")
    assert [(k, v["is_tail"], v["evaluate_once"]) for k, v in data["loops"].items()] == \
        [("0", False, False), ("1", True, True)]


def test_serialize_symbolic_offsets_and_attributes():
    lir = lowered("graph(x: f32[?,?]) -> [z] { const c: f32[] = 0.5\n [z] = Mul(x, c) }", loop_depth=2)
    data = json.loads(lir.serialize())
    assert data["master_shape"] == [None, None]
    outer = data["loops"]["0"]
    assert outer["work_amount"] == "D0" and outer["ports"][0]["ptr_increment"] == "D1"
    assert outer["ports"][0]["finalization_offset"] == "-D0*D1"
    assert data["expressions"][1]["attrs"] == {"value": 0.5, "dtype": "f32", "shape": [1, 1]}
