"""split_runtime_constants: the part of the graph that depends only on constants (and on inputs declared
constant) moves into a folding function; the entry function takes the folded tensors as inputs. Running
fold once and then entry computes what the graph computed."""
import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.ir.graph import Graph
from snipjit.passes.split_runtime_constants import (RUNTIME_FOLDING_META, RuntimeFolding, split_runtime_constants,
                                                    split_runtime_constants_pass)
from snipjit.ops.interpreter import run_graph_reference


def random_feeds(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.shape).astype(v.dtype.np) for v in g.inputs}


def run_split(fold: Graph | None, entry: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What the runtime does: fold once, then run entry with the folded tensors (matched by name)."""
    env = dict(feeds)
    if fold is not None:
        env |= dict(zip((v.name for v in fold.outputs), run_graph_reference(fold, [env[v.name] for v in fold.inputs])))
    return run_graph_reference(entry, [env[v.name] for v in entry.inputs])


def split_checked(text: str, constant_inputs: set[str]) -> tuple[Graph | None, Graph]:
    g = parse_graph(text, elided="zeros")
    feeds = random_feeds(g)
    want = run_graph_reference(g, [feeds[v.name] for v in g.inputs])
    fold, entry = split_runtime_constants(g.copy(), constant_inputs)
    entry.validate()
    if fold is not None:
        fold.validate()
    for w, got in zip(want, run_split(fold, entry, feeds)):
        np.testing.assert_array_equal(got, w)
    return fold, entry


def signature(g: Graph) -> tuple[list[str], list[str], list[str]]:
    return [v.name for v in g.inputs], [n.op for n in g.nodes], [v.name for v in g.outputs]


# The seed's example: three matmuls with a compile-time constant, a constant input and a plain input.
SEED = """graph(feature0: f32[2,8], weight1: f32[8,8], weight2: f32[8,8]) -> [feature3: f32[2,8]] {
  const weight0: f32[8,8] = <elided>
  const two: f32[] = 2.0
  [packed0] = Transpose(weight0) {perm=[1, 0]}
  [feature1] = MatMul(feature0, packed0)
  [packed1] = Transpose(weight1) {perm=[1, 0]}
  [feature2] = MatMul(feature1, packed1)
  [t2] = Transpose(weight2) {perm=[1, 0]}
  [packed2] = Mul(t2, two)
  [feature3] = MatMul(feature2, packed2)
}"""


def test_the_seed_example_splits_into_fold_and_entry():
    fold, entry = split_checked(SEED, {"weight1", "weight2"})
    # the simplified version: the compile-time constant's packing folds at run time too
    assert signature(fold) == (["weight1", "weight2"], ["Transpose", "Transpose", "Transpose", "Mul"],
                               ["packed0", "packed1", "packed2"])
    assert signature(entry) == (["feature0", "packed0", "packed1", "packed2"], ["MatMul"] * 3, ["feature3"])
    assert not any(v.producer for v in entry.inputs)


def test_a_constant_input_read_directly_stays_an_entry_input():
    fold, entry = split_checked("""graph(x: f32[4], w: f32[4]) -> [y: f32[4]] {
      [e] = Exp(w)
      [a] = Add(x, w)
      [y] = Mul(a, e)
    }""", {"w"})
    assert signature(fold) == (["w"], ["Exp"], ["e"])
    assert signature(entry) == (["x", "w", "e"], ["Add", "Mul"], ["y"])


def test_folded_graph_outputs_are_returned_from_entry_inputs():
    fold, entry = split_checked("""graph(x: f32[4], w: f32[4]) -> [y: f32[4], n: f32[4]] {
      [n] = Neg(w)
      [y] = Add(x, n)
    }""", {"w"})
    assert signature(entry) == (["x", "n"], ["Add"], ["y", "n"])
    assert entry.outputs[1] is entry.inputs[1]


def test_shape_of_a_constant_input_becomes_a_constant_not_a_fold_output():
    fold, entry = split_checked("""graph(x: f32[2,6], w: f32[3,4]) -> [y: f32[6,2]] {
      [s] = Shape(w)
      [r] = Reshape(x, s)
      [rt] = Transpose(r) {perm=[1, 0]}
      [y] = Reshape(rt, s)
    }""", {"w"})
    assert fold is None
    assert signature(entry)[1] == ["Reshape", "Transpose", "Reshape"]
    assert entry.nodes[0].inputs[1].is_constant and "w" not in signature(entry)[0]


def test_nothing_to_fold_gives_no_folding_function():
    fold, entry = split_checked("""graph(x: f32[4], w: f32[4]) -> [y: f32[4]] {
      [y] = Add(x, w)
    }""", {"w"})
    assert fold is None and signature(entry) == (["x", "w"], ["Add"], ["y"])


def test_large_broadcasts_stay_in_the_entry_function():
    fold, entry = split_checked("""graph(x: f32[256,128], b: f32[128]) -> [y: f32[256,128]] {
      const shape: i64[2] = [256, 128]
      [nb] = Neg(b)
      [big] = Expand(nb, shape)
      [y] = Add(x, big)
    }""", {"b"})
    assert signature(fold) == (["b"], ["Neg"], ["nb"])
    assert signature(entry)[1] == ["Expand", "Add"]


def test_the_pass_form_keeps_the_folding_function_in_meta():
    g = parse_graph(SEED, elided="zeros")
    entry = split_runtime_constants_pass(g, {"constant_inputs": ["weight2"]})
    info: RuntimeFolding = entry.meta[RUNTIME_FOLDING_META]
    assert info.constant_inputs == ("weight2",)
    assert info.folded == ["packed0", "packed2"]
    assert info.folded_bytes == 2 * 8 * 8 * 4
    assert [v.name for v in info.fold.inputs] == ["weight2"]


def test_the_pass_without_constant_inputs_changes_nothing():
    g = parse_graph(SEED, elided="zeros")
    text = str(g)
    assert str(split_runtime_constants_pass(g, {})) == text and RUNTIME_FOLDING_META not in g.meta


def test_unknown_constant_inputs_are_an_error():
    with pytest.raises(ValueError, match="not inputs of graph"):
        split_runtime_constants(parse_graph(SEED, elided="zeros"), {"weight9"})
