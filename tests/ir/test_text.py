"""The Graph IR text form: printing and parsing round-trip, errors point at the text."""
import math

import numpy as np
import pytest

from snipjit.ir import ParseError, print_graph
from snipjit import parse_graph

EXAMPLE = """graph main(x: f32[1,?,384], "gpu_0/w": f32[384], n: i64[batch,seq]) -> [y: f32[1,?,384], n: i64[batch,seq], v: f32[4], k: i64[3]] {
  const c: f32[] = 2.0
  const k: i64[3] = [1, -2, 3]
  const s: f32[4] = [inf, -inf, nan, 1e-30]
  [t: f32[1,?,384]] = Add(x, "gpu_0/w") @"add/0"
  [u: f32[1,?,384]] = Mul(t, c) {alpha=0.5, ints=[1, 2], name="hi \\"there\\"", tt=tensor<f32[2]>[1.0, inf]}
  [y: f32[1,?,384]] = Clip(u, _, c)
  [v: f32[4]] = Neg(s)
}"""


def test_round_trip_is_exact():
    g = parse_graph(EXAMPLE, infer=False)
    text = print_graph(g)
    assert print_graph(parse_graph(text, infer=False)) == text
    assert [v.name for v in g.inputs] == ["x", "gpu_0/w", "n"]
    assert g.inputs[0].type.shape == (1, None, 384)
    assert g.inputs[2].type.shape == ("batch", "seq")
    assert g.nodes[0].name == "add/0"
    assert g.nodes[2].inputs[1] is None
    assert g.nodes[1].attrs["name"] == 'hi "there"'
    np.testing.assert_array_equal(g.nodes[1].attrs["tt"], np.array([1.0, np.inf], np.float32))


def test_constants_keep_dtype_and_special_values():
    g = parse_graph(EXAMPLE, infer=False)
    consts = {c.name: c.data for c in g.constants}
    assert consts["c"].dtype == np.float32 and consts["c"].shape == ()
    s = consts["s"]
    assert s.dtype == np.float32 and s[0] == np.inf and s[1] == -np.inf and math.isnan(s[2])
    assert s[3] == np.float32(1e-30)


def test_float32_values_round_trip_bit_exactly():
    vals = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    text = "graph(x: f32[16]) -> [y] {\n  const c: f32[16] = [" + ", ".join(repr(float(v)) for v in vals) + \
        "]\n  [y: f32[16]] = Add(x, c)\n}"
    g = parse_graph(text, infer=False)
    g2 = parse_graph(print_graph(g), infer=False)
    np.testing.assert_array_equal(g2.constants[0].data, vals)


def test_nested_graph_attribute_round_trips():
    text = """graph outer(a: f32[4]) -> [b: f32[4]] {
  [b: f32[4]] = Subgraph(a) {body=graph inner(p: f32[4]) -> [q: f32[4]] {
    [q: f32[4]] = Relu(p)
  }}
}"""
    g = parse_graph(text, infer=False)
    body = g.nodes[0].attrs["body"]
    assert body.name == "inner" and body.nodes[0].op == "Relu"
    assert print_graph(parse_graph(print_graph(g), infer=False)) == print_graph(g)


def test_missing_types_are_inferred():
    g = parse_graph("graph(x: f32[2,seq], y: f32[seq]) -> [z] { [t] = Add(x, y)\n [z] = Relu(t) }")
    assert str(g.outputs[0].type) == "f32[2,seq]"


def test_large_constants_elide_and_need_opt_in_to_parse():
    g = parse_graph("graph(x: f32[32]) -> [y] { const c: f32[32] = [" + ", ".join(["1.0"] * 32) +
                    "]\n [y] = Add(x, c) }")
    text = print_graph(g)
    assert "<elided>" in text
    with pytest.raises(ParseError, match="elided"):
        parse_graph(text)
    assert parse_graph(text, elided="zeros").constants[0].data.sum() == 0
    assert "<elided>" not in print_graph(g, max_elems=None)


@pytest.mark.parametrize("text, message", [
    ("graph(x: f32[2]) -> [y] { [y] = Relu(z) }", "input 'z' is not defined"),
    ("graph(x: f33[2]) -> [y] { [y] = Relu(x) }", "unknown dtype 'f33'"),
    ("graph(x: f32[2]) -> [y] { [y] = Relu(x) ", "expected"),
    ("graph(x: f32[2]) -> [q] { [y] = Relu(x) }", "graph output 'q' is not defined"),
    ("graph(x: f32[2]) -> [y] { const c: f32[2] = [1.0]\n [y] = Add(x, c) }", "needs 2 values"),
    ("graph(x: f32[2], x: f32[2]) -> [x] { }", "declared twice"),
    ("graph(x: f32[2]) -> [y] { [x] = Relu(x) }", "defined twice"),
])
def test_parse_errors_say_what_and_where(text, message):
    with pytest.raises(ParseError, match=message) as info:
        parse_graph(text, infer=False)
    assert "line " in str(info.value)
