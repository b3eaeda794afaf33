"""ConvertConstantsToScalars: single-value constants become `snippets::Scalar` nodes at the front of the
body; a constant with more values is refused."""
import numpy as np
import pytest

from lir_helpers import assert_same_results
from snipjit import parse_graph
from snipjit.snippets.dataflow.canonicalization import Canonicalization
from snipjit.snippets.dataflow.convert_constants_to_scalars import ConvertConstantsToScalars


def converted(text: str):
    original = parse_graph(text)
    body = original.copy()
    Canonicalization().run(body)
    changed = ConvertConstantsToScalars().run(body)
    body.validate()
    return original, body, changed


def test_single_value_constants_become_scalars_first_in_the_body():
    original, body, changed = converted("""graph(x: f32[4,8]) -> [z] {
      const c: f32[] = 2.5
      const d: f32[1,1] = [-1.0]
      [a] = Mul(x, c)
      [z] = Add(a, d)
    }""")
    assert changed is True
    assert body.constants == []
    assert [(n.domain, n.op) for n in body.nodes] == [("snippets", "Scalar"), ("snippets", "Scalar"),
                                                       ("", "Mul"), ("", "Add")]
    c, d = body.nodes[0], body.nodes[1]
    assert c.attrs == {"value": 2.5, "dtype": "f32", "shape": [1, 1]}
    assert d.attrs == {"value": -1.0, "dtype": "f32", "shape": [1, 1]}
    assert body.nodes[2].inputs[1] is c.outputs[0] and body.nodes[3].inputs[1] is d.outputs[0]
    assert_same_results(original, body)


def test_one_scalar_per_constant_even_with_several_uses():
    _, body, _ = converted("""graph(x: f32[8], y: f32[8]) -> [z] {
      const c: f32[] = 3.0
      [a] = Mul(x, c)
      [b] = Mul(y, c)
      [z] = Add(a, b)
    }""")
    scalars = [n for n in body.nodes if n.op == "Scalar"]
    assert len(scalars) == 1
    assert body.nodes[1].inputs[1] is body.nodes[2].inputs[1] is scalars[0].outputs[0]


def test_bool_constants_keep_their_dtype():
    original, body, _ = converted("""graph(a: bool[8]) -> [z] {
      const t: bool[] = true
      [z] = Xor(a, t)
    }""")
    assert body.nodes[0].attrs == {"value": True, "dtype": "bool", "shape": [1]}
    assert_same_results(original, body)


def test_a_constant_with_several_values_is_refused():
    body = parse_graph("""graph(x: f32[2]) -> [z] {
      const w: f32[2] = [1.0, 2.0]
      [z] = Mul(x, w)
    }""")
    with pytest.raises(ValueError, match="constant 'w' of f32\\[2\\] has more than one value"):
        ConvertConstantsToScalars().run(body)


def test_no_constants_no_change():
    body = parse_graph("graph(x: f32[2]) -> [z] { [z] = Relu(x) }")
    assert ConvertConstantsToScalars().run(body) is False
    assert [n.op for n in body.nodes] == ["Relu"]


def test_the_scalar_reference_broadcasts_its_value():
    original, body, _ = converted("""graph(x: f32[3,5]) -> [z] {
      const c: f32[] = -0.5
      [z] = Sub(c, x)
    }""")
    assert_same_results(original, body, [np.arange(15, dtype=np.float32).reshape(3, 5)])
