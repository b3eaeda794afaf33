"""PoolBeforePointwiseConv: an average pool of a 1×1 convolution's output pools its input instead (the
convolution then runs on the pooled map); any pool or convolution where the two do not commute stays."""
import pytest

from snipjit.passes.pool_before_pointwise_conv import pool_before_pointwise_conv

from random_constants import parse_random, rewritten_by


def rewritten(text: str):
    return rewritten_by(pool_before_pointwise_conv, text)


def transition(conv: str = "{kernel_shape = [1, 1]}", pool: str = "AveragePool(c) {kernel_shape = [2, 2], strides = [2, 2]}",
               pooled: str = "1,4,3,3", weights: str = "4,8,1,1", conv_out: str = "1,4,6,6", extra: str = "",
               outputs: str = "") -> str:
    return f"""graph(x: f32[1,8,6,6]) -> [y: f32[{pooled}]{outputs}] {{
      const w: f32[{weights}] = <elided>
      const b: f32[4] = <elided>
      [c: f32[{conv_out}]] = Conv(x, w, b) {conv}
      [y: f32[{pooled}]] = {pool}
      {extra}
    }}"""


def ops(graph):
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("pool, pooled", [
    ("AveragePool(c) {kernel_shape = [2, 2], strides = [2, 2]}", "1,4,3,3"),   # DenseNet's transition
    ("AveragePool(c) {kernel_shape = [3, 3], strides = [1, 1]}", "1,4,4,4"),
    ("AveragePool(c) {kernel_shape = [2, 2], strides = [2, 2], ceil_mode = 1}", "1,4,3,3"),   # (no partial window)
    ("AveragePool(c) {kernel_shape = [2, 2], pads = [0, 0, 0, 0], count_include_pad = 1}", "1,4,5,5"),
    ("GlobalAveragePool(c)", "1,4,1,1"),
])
def test_the_pool_moves_before_the_convolution(pool, pooled):
    after = rewritten(transition(pool=pool, pooled=pooled))
    assert ops(after) == [pool.split("(")[0], "Conv"]
    pool_node, conv = after.nodes
    assert pool_node.inputs[0].name == "x" and conv.inputs[0] is pool_node.outputs[0]
    assert pool_node.outputs[0].shape == (1, 8, *map(int, pooled.split(",")[2:]))
    assert conv.outputs[0].name == "y"


@pytest.mark.parametrize("text", [
    # padding the pool counts as zeros: the bias would be scaled down at the edges
    transition(pool="AveragePool(c) {kernel_shape = [2, 2], pads = [1, 1, 1, 1], count_include_pad = 1}",
               pooled="1,4,7,7"),
    transition(pool="AveragePool(c) {kernel_shape = [2, 2], pads = [1, 1, 1, 1]}", pooled="1,4,7,7"),
    # ceil_mode with a last window running past the image
    transition(pool="AveragePool(c) {kernel_shape = [3, 3], strides = [2, 2], ceil_mode = 1}", pooled="1,4,3,3"),
    transition(pool="MaxPool(c) {kernel_shape = [2, 2], strides = [2, 2]}"),   # not linear
    transition(conv="{kernel_shape = [3, 3], pads = [1, 1, 1, 1]}", weights="4,8,3,3"),   # not 1×1
    transition(conv="{kernel_shape = [1, 1], strides = [2, 2]}", conv_out="1,4,3,3", pooled="1,4,1,1"),
    # the convolution's output has another reader
    transition(extra="[z: f32[1,4,6,6]] = Relu(c)", outputs=", z: f32[1,4,6,6]"),
    # an activation between them
    transition(pool="Relu(c)", pooled="1,4,6,6",
               extra="[p: f32[1,4,3,3]] = AveragePool(y) {kernel_shape = [2, 2], strides = [2, 2]}",
               outputs=", p: f32[1,4,3,3]"),
])
def test_other_pools_and_convolutions_stay(text):
    before = parse_random(text)
    assert ops(rewritten(text)) == ops(before)
