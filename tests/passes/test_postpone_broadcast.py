"""PostponeBroadcast: broadcasts move after elementwise consumers whose other inputs are constant, so
those fold on the small tensor; where that is not provably the same computation, nothing moves."""
import numpy as np
import pytest
from random_constants import parse_random

from snipjit.ir.graph import Graph
from snipjit.passes.fold_constants import FOLDING_META, fold_constants
from snipjit.passes.postpone_broadcast import broadcast_source, postpone_broadcast
from snipjit.ops.interpreter import run_graph_reference

SMALL_LIMIT = {"max_folded_broadcast_bytes": 1024}  # keeps the test tensors "large"


def transformed(text: str, passes, sizes: dict[str, int] | None = None) -> tuple[Graph, Graph]:
    """(before, after running `passes`), checked to compute the same on random inputs."""
    before = parse_random(text)
    after = before.copy()
    for p in passes:
        after = p(after, SMALL_LIMIT)
    after.validate()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal([(sizes or {}).get(d, d) for d in v.shape]).astype(v.dtype.np)
              for v in before.inputs]
    for want, got in zip(run_graph_reference(before, inputs), run_graph_reference(after, inputs)):
        assert want.dtype == got.dtype and want.shape == got.shape
        np.testing.assert_array_equal(got, want)
    return before, after


FOLD_AROUND = [fold_constants, postpone_broadcast, fold_constants]


def lines(g: Graph) -> list[str]:
    """The nodes as `op(input shapes) -> output shape`."""
    return [f"{n.op}({', '.join(str(v.shape) for v in n.inputs if v is not None)}) -> {n.outputs[0].shape}"
            for n in g.nodes]


def test_expand_cast_mul_folds_on_the_small_tensor_and_the_expand_runs_last():
    before, after = transformed("""graph(x: f32[1]) -> [y: f32[64,256]] {
      const row: f16[1,256] = <elided>
      const shape: i64[2] = [64, 256]
      const two: f32[] = 2.0
      [big] = Expand(row, shape)
      [wide] = Cast(big) {to=1}
      [y] = Mul(wide, two)
    }""", FOLD_AROUND)
    assert lines(after) == ["Expand((1, 256), (2,)) -> (64, 256)"]
    small = after.nodes[0].inputs[0].data
    np.testing.assert_array_equal(small, before.constants[0].data.astype(np.float32) * 2)
    stats = after.meta[FOLDING_META]
    assert stats.bytes_created == 256 * 4 and stats.bytes_freed == 256 * 2 + 4


def test_an_expand_into_a_consumer_that_broadcasts_anyway_disappears():
    _, after = transformed("""graph(x: f32[64,256]) -> [y: f32[64,256]] {
      const row: f32[256] = <elided>
      const shape: i64[2] = [64, 256]
      [big] = Expand(row, shape)
      [neg] = Neg(big)
      [y] = Add(x, neg)
    }""", FOLD_AROUND)
    assert lines(after) == ["Add((64, 256), (256,)) -> (64, 256)"]


def test_a_chain_moves_with_a_variable_small_tensor():
    # x is not constant: the chain still runs on the small tensor, then one Expand
    _, after = transformed("""graph(x: f32[1,256]) -> [y: f32[64,256]] {
      const shape: i64[2] = [64, 256]
      const c: f32[256] = <elided>
      [big] = Expand(x, shape)
      [e] = Exp(big)
      [y] = Mul(c, e)
    }""", [postpone_broadcast])
    assert lines(after) == ["Exp((1, 256)) -> (1, 256)", "Mul((256,), (1, 256)) -> (1, 256)",
                            "Expand((1, 256), (2,)) -> (64, 256)"]


def test_a_tile_of_size_one_axes_moves_like_an_expand():
    _, after = transformed("""graph(x: f32[1,256]) -> [y: f32[64,256]] {
      const reps: i64[2] = [64, 1]
      [big] = Tile(x, reps)
      [y] = Relu(big)
    }""", [postpone_broadcast])
    assert lines(after) == ["Relu((1, 256)) -> (1, 256)", "Tile((1, 256), (2,)) -> (64, 256)"]


UNMOVED = {
    "the other input is not constant": """graph(x: f32[1,256], y: f32[1,256]) -> [z: f32[64,256]] {
      const shape: i64[2] = [64, 256]
      [big] = Expand(x, shape)
      [z] = Mul(big, y)
    }""",
    "the consumer is not elementwise": """graph(x: f32[1,256]) -> [z: f32[64,256]] {
      const shape: i64[2] = [64, 256]
      [big] = Expand(x, shape)
      [z] = Softmax(big) {axis=0}
    }""",
    "the other operand is larger than the small tensor": """graph(x: f32[1,256]) -> [z: f32[64,256]] {
      const shape: i64[2] = [64, 256]
      const full: f32[64,256] = <elided>
      [big] = Expand(x, shape)
      [e] = Exp(full)
      [z] = Mul(big, e)
    }""",
    "the expand has two readers": """graph(x: f32[1,256]) -> [z: f32[64,256], w: f32[64,256]] {
      const shape: i64[2] = [64, 256]
      [big] = Expand(x, shape)
      [z] = Neg(big)
      [w] = Exp(big)
    }""",
    "the expand is a graph output": """graph(x: f32[1,256]) -> [big: f32[64,256], z: f32[64,256]] {
      const shape: i64[2] = [64, 256]
      [big] = Expand(x, shape)
      [z] = Neg(big)
    }""",
    "the tile repeats a dim larger than one": """graph(x: f32[2,256]) -> [z: f32[64,256]] {
      const reps: i64[2] = [32, 1]
      [big] = Tile(x, reps)
      [z] = Neg(big)
    }""",
    "the shapes are dynamic": """graph(x: f32[1,256], s: f32[n,256]) -> [z: f32[n,256]] {
      [shape] = Shape(s)
      [big] = Expand(x, shape)
      [z] = Neg(big)
    }""",
}


@pytest.mark.parametrize("case", UNMOVED)
def test_the_broadcast_does_not_move_when(case):
    before, after = transformed(UNMOVED[case], [postpone_broadcast], sizes={"n": 64})
    # the consumers still compute the outputs, on the broadcast shape
    assert [(v.producer.op, v.shape) for v in after.outputs] == [(v.producer.op, v.shape) for v in before.outputs]
    if case != "the other operand is larger than the small tensor":
        assert lines(after) == lines(before)
    else:  # Mul broadcasts by itself: it reads the small tensor, the Expand is gone
        assert lines(after) == ["Exp((64, 256)) -> (64, 256)", "Mul((1, 256), (64, 256)) -> (64, 256)"]


def test_cast_like_moves_the_broadcast_only_when_it_is_the_data():
    _, after = transformed("""graph(x: f16[1,256]) -> [z: f32[64,256]] {
      const shape: i64[2] = [64, 256]
      const like: f32[1,256] = <elided>
      [big] = Expand(x, shape)
      [z] = CastLike(big, like)
    }""", [postpone_broadcast])
    assert lines(after) == ["CastLike((1, 256), (1, 256)) -> (1, 256)", "Expand((1, 256), (2,)) -> (64, 256)"]
    # As the target type, the broadcast only lends its dtype: moving the Expand after CastLike would give
    # the result the broadcast shape. CastLike may read the small tensor instead (same output type).
    _, after = transformed("""graph(x: f16[1,256]) -> [z: f16[1,256]] {
      const shape: i64[2] = [64, 256]
      const c: f32[1,256] = <elided>
      [big] = Expand(x, shape)
      [z] = CastLike(c, big)
    }""", [postpone_broadcast])
    assert lines(after) == ["CastLike((1, 256), (1, 256)) -> (1, 256)"]


ROWS = ", ".join(str(float(v)) for v in np.tile(np.arange(8), 4))  # a 4 x 8 constant of identical rows


def test_constants_that_are_broadcasts_are_stored_small_for_broadcasting_readers():
    _, after = transformed(f"""graph(x: f32[4,8]) -> [y: f32[4,8], z: f32[4,8]] {{
      const rows: f32[4,8] = [{ROWS}]
      [y] = Add(x, rows)
      [z] = Mul(rows, x)
    }}""", [postpone_broadcast])
    assert lines(after) == ["Add((4, 8), (1, 8)) -> (4, 8)", "Mul((1, 8), (4, 8)) -> (4, 8)"]
    assert after.meta[FOLDING_META].bytes_freed == 4 * 8 * 4


def test_a_broadcast_constant_keeps_its_shape_when_a_reader_needs_it():
    # Gather reads the rows as a table
    before, after = transformed(f"""graph(x: f32[4,8]) -> [y: f32[4,8], z: f32[8]] {{
      const rows: f32[4,8] = [{ROWS}]
      const zero: i64[] = 0
      [y] = Add(x, rows)
      [z] = Gather(rows, zero) {{axis=0}}
    }}""", [postpone_broadcast])
    assert lines(after) == lines(before)


def test_broadcast_source_compares_bits():
    a = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(broadcast_source(a), np.zeros((1, 1), np.float32))
    a[1, :] = -0.0  # equal to 0.0 as a number, but 1 / x differs
    assert broadcast_source(a).shape == (3, 1)
    a[:, 2] = np.nan
    assert broadcast_source(a) is None
    assert broadcast_source(np.arange(6).reshape(2, 3)) is None
