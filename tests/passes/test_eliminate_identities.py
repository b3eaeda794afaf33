"""EliminateIdentities: Identity and inference Dropout nodes go, their readers read the input; a
training Dropout, one whose mask is read, and one producing a graph output stay."""
import numpy as np

from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.eliminate_identities import eliminate_identities


def ops_after(text: str) -> list[str]:
    before = parse_graph(text)
    after = eliminate_identities(before.copy())
    after.validate()
    x = [np.random.default_rng(0).standard_normal(v.shape).astype(np.float32) for v in before.inputs]
    for want, got in zip(run_graph_reference(before, x), run_graph_reference(after, x)):
        np.testing.assert_array_equal(got, want)
    return [n.op for n in after.nodes]


def test_identities_and_inference_dropouts_go():
    assert ops_after("""graph(x: f32[4,5]) -> [y] {
      const r: f32[] = 0.3
      const t: bool[] = false
      [a] = Identity(x)
      [b] = Dropout(a)
      [c] = Dropout(b, r, t)
      [y] = Relu(c)
    }""") == ["Relu"]


def test_training_dropouts_read_masks_and_graph_outputs_stay():
    assert ops_after("""graph(x: f32[4,5]) -> [y, m, z] {
      const r: f32[] = 0.5
      const zero: f32[] = 0.0
      const t: bool[] = true
      [a] = Dropout(x, r, t) {seed = 1}
      [a2] = Dropout(a, zero, t)
      [b, m] = Dropout(a2)
      [y] = Relu(b)
      [z] = Identity(y)
    }""") == ["Dropout", "Dropout", "Relu", "Identity"]   # a ratio of 0 drops nothing, even in training
