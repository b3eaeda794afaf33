"""Canonicalization: every body value padded to the master rank with leading 1s, constants reshaped,
layouts and the master shape recorded; results unchanged."""
import numpy as np
import pytest

from lir_helpers import assert_same_results
from snipjit import parse_graph
from snipjit.snippets.dataflow.canonicalization import Canonicalization

BODY = """graph(x: f32[2,?,37], y: f32[37], s: f32[?,1]) -> [z, w] {
  const c: f32[] = 2.0
  [a] = Mul(y, c)
  [b] = Add(x, a)
  [z] = Mul(b, s)
  [w] = Relu(s)
}"""


def shapes(values) -> dict[str, tuple]:
    return {v.name: v.type.shape for v in values}


def test_pads_ranks_of_inputs_constants_and_intermediates():
    original = parse_graph(BODY)
    body = original.copy()
    assert Canonicalization().run(body) is True
    assert shapes(body.inputs) == {"x": (2, None, 37), "y": (1, 1, 37), "s": (1, None, 1)}
    assert shapes(body.values()) == {"x": (2, None, 37), "y": (1, 1, 37), "s": (1, None, 1), "c": (1, 1, 1),
                                     "a": (1, 1, 37), "b": (2, None, 37), "z": (2, None, 37), "w": (1, None, 1)}
    c = next(v for v in body.values() if v.name == "c")
    assert c.data.shape == (1, 1, 1) and c.data.item() == 2.0
    assert body.meta["master_shape"] == (2, None, 37)
    assert body.meta["layouts"] == [(0, 1, 2)] * 3
    assert_same_results(original, body)


def test_an_aligned_body_is_left_as_it_is():
    body = parse_graph("graph(x: f32[4,8], y: f32[1,8]) -> [z] { [z] = Add(x, y) }")
    assert Canonicalization().run(body) is False
    assert shapes(body.inputs) == {"x": (4, 8), "y": (1, 8)}
    assert body.meta["master_shape"] == (4, 8)


def test_master_shape_is_the_broadcast_of_all_outputs():
    body = parse_graph("graph(x: f32[5,1], y: f32[7]) -> [a, b] { [a] = Relu(x)\n [b] = Neg(y) }")
    Canonicalization().run(body)
    assert body.meta["master_shape"] == (5, 7)
    assert shapes(body.outputs) == {"a": (5, 1), "b": (1, 7)}


def test_given_layouts_are_recorded_and_checked():
    body = parse_graph("graph(x: f32[4,8], y: f32[8]) -> [z] { [z] = Add(x, y) }")
    Canonicalization([(0, 1), (1, 0)]).run(body)
    assert body.meta["layouts"] == [(0, 1), (1, 0)]
    with pytest.raises(ValueError, match="not a permutation of rank 2"):
        Canonicalization([(0, 1), (0, 2)]).run(parse_graph("graph(x: f32[4,8], y: f32[8]) -> [z] { [z] = Add(x, y) }"))


def test_rank_zero_values():
    original = parse_graph("graph(x: f32[], y: f32[3]) -> [z] { [z] = Mul(x, y) }")
    body = original.copy()
    Canonicalization().run(body)
    assert shapes(body.inputs) == {"x": (1,), "y": (3,)}
    assert_same_results(original, body, [np.float32(2.5), np.arange(3, dtype=np.float32)])


def test_layouts_recorded_by_an_earlier_pass_are_padded_with_the_ranks():
    body = parse_graph("graph(x: f32[7,5], y: f32[2,3,7,5]) -> [z] { [z] = Add(x, y) }")
    body.meta["layouts"] = [(1, 0), None]
    body.meta["output_layouts"] = [(0, 2, 1, 3)]
    Canonicalization().run(body)
    assert body.meta["layouts"] == [(0, 1, 3, 2), (0, 1, 2, 3)]
    assert body.meta["output_layouts"] == [(0, 2, 1, 3)]
