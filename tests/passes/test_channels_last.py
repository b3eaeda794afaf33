"""ChannelsLast: 2-D convolution regions move onto [N, H, W, C]; the ops between convolutions follow,
reorders stand only at the regions' edges (once per value), the model's own layout transposes cancel,
and every rewritten graph computes what the original does (reference interpreter, bit for bit or to
rounding)."""
import numpy as np
import pytest
from random_constants import parse_random

from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.channels_last import META, channels_last


def rewritten(text: str, **options):
    """(graph after the pass, ops by domain), checked against the original on random inputs."""
    before = parse_random(text)
    after = channels_last(before.copy(), options)
    after.validate()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(v.shape).astype(np.float32) for v in before.inputs]
    for want, got in zip(run_graph_reference(before, inputs), run_graph_reference(after, inputs)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ops = [f"{n.domain}::{n.op}" if n.domain else n.op for n in after.nodes]
    return after, ops


def transposes(ops: list[str]) -> int:
    return ops.count("Transpose")


RESIDUAL = """graph(x: f32[1,8,6,6]) -> [y: f32[1,8,6,6]] {
  const w1: f32[8,8,3,3] = <elided>
  const b1: f32[8] = <elided>
  const w2: f32[8,8,1,1] = <elided>
  const s: f32[8,1,1] = <elided>
  [c1: f32[1,8,6,6]] = Conv(x, w1, b1) {pads = [1, 1, 1, 1]}
  [r1: f32[1,8,6,6]] = Relu(c1)
  [c2: f32[1,8,6,6]] = Conv(r1, w2)
  [m: f32[1,8,6,6]] = Mul(c2, s)
  [a: f32[1,8,6,6]] = Add(m, x)
  [y: f32[1,8,6,6]] = Relu(a)
}"""


def test_a_residual_block_is_one_region_with_one_reorder_in_and_out():
    after, ops = rewritten(RESIDUAL)
    assert ops == ["Transpose", "snipjit.nhwc::Conv", "Relu", "snipjit.nhwc::Conv", "Mul", "Add", "Relu",
                   "Transpose"]
    summary = after.meta[META]
    assert (summary.reorders_in, summary.reorders_out) == (1, 1)
    scale = next(n for n in after.nodes if n.op == "Mul").inputs[1]
    assert scale.shape == (1, 1, 1, 8)      # a per-channel constant, permuted once
    assert after.outputs[0].name == "y" and after.outputs[0].shape == (1, 8, 6, 6)


def test_values_read_outside_the_region_are_reordered_once():
    text = """graph(x: f32[2,5,5,5]) -> [y: f32[2,6,5,5], f: f32[2,150], g: f32[2,6,5,5]] {
      const w: f32[6,5,3,3] = <elided>
      [c: f32[2,6,5,5]] = Conv(x, w) {pads = [1, 1, 1, 1]}
      [y: f32[2,6,5,5]] = Relu(c)
      [f: f32[2,150]] = Flatten(y) {axis = 1}
      [g: f32[2,6,5,5]] = Sigmoid(y)
    }"""
    after, ops = rewritten(text)
    assert ops.count("Flatten") == 1 and "Sigmoid" in ops
    assert transposes(ops) == 3   # x in; y out (for Flatten and the output y); g out
    assert after.meta[META].reorders_out == 2


def test_pools_and_channel_concat_follow_the_layout():
    text = """graph(x: f32[1,3,8,8]) -> [y: f32[1,10,1,1]] {
      const w1: f32[4,3,3,3] = <elided>
      const w2: f32[6,3,1,1] = <elided>
      [a: f32[1,4,8,8]] = Conv(x, w1) {pads = [1, 1, 1, 1]}
      [b: f32[1,6,8,8]] = Conv(x, w2)
      [c: f32[1,10,8,8]] = Concat(a, b) {axis = 1}
      [p: f32[1,10,4,4]] = MaxPool(c) {kernel_shape = [2, 2], strides = [2, 2]}
      [q: f32[1,10,4,4]] = AveragePool(p) {kernel_shape = [3, 3], pads = [1, 1, 1, 1]}
      [y: f32[1,10,1,1]] = GlobalAveragePool(q)
    }"""
    after, ops = rewritten(text)
    assert ops == ["snipjit.nhwc::Conv", "snipjit.nhwc::Conv", "Concat", "snipjit.nhwc::MaxPool",
                   "snipjit.nhwc::AveragePool", "snipjit.nhwc::GlobalAveragePool", "Reshape"]   # (1×1 pixels out)
    assert [n.attrs["input_layout"] for n in after.nodes[:2]] == ["NCHW", "NCHW"]   # the image read in place
    assert next(n for n in after.nodes if n.op == "Concat").attrs["axis"] == 3


def test_squeeze_excitation_scale_joins_without_moving_data():
    text = """graph(x: f32[1,8,4,4]) -> [y: f32[1,8,4,4]] {
      const w: f32[8,8,1,1] = <elided>
      const w1: f32[2,8,1,1] = <elided>
      const w2: f32[8,2,1,1] = <elided>
      [c: f32[1,8,4,4]] = Conv(x, w)
      [g: f32[1,8,1,1]] = GlobalAveragePool(c)
      [s1: f32[1,2,1,1]] = Conv(g, w1)
      [s2: f32[1,2,1,1]] = Relu(s1)
      [s3: f32[1,8,1,1]] = Conv(s2, w2)
      [s: f32[1,8,1,1]] = Sigmoid(s3)
      [y: f32[1,8,4,4]] = Mul(c, s)
    }"""
    after, ops = rewritten(text)
    assert transposes(ops) == 2 and ops.count("snipjit.nhwc::Conv") == 3
    # (the gate's Sigmoid joins the expand Conv: computed once per channel, the Mul broadcasts it)
    assert [n.attrs.get("activation", "") for n in after.nodes if n.op == "Conv"] == ["", "", "sigmoid"]
    assert "Sigmoid" not in ops and "Mul" in ops


def test_the_models_own_layout_transposes_cancel():
    text = """graph(x: f32[1,4,5,5]) -> [y: f32[1,4,5,5]] {
      const w1: f32[4,1,7,7] = <elided>
      const w2: f32[4,4,1,1] = <elided>
      const g: f32[4] = <elided>
      [c: f32[1,4,5,5]] = Conv(x, w1) {pads = [3, 3, 3, 3], group = 4}
      [t: f32[1,5,5,4]] = Transpose(c) {perm = [0, 2, 3, 1]}
      [n: f32[1,5,5,4]] = Mul(t, g)
      [u: f32[1,4,5,5]] = Transpose(n) {perm = [0, 3, 1, 2]}
      [y: f32[1,4,5,5]] = Conv(u, w2)
    }"""
    after, ops = rewritten(text)
    assert ops == ["Transpose", "snipjit.nhwc::Conv", "Mul", "snipjit.nhwc::Conv", "Transpose"]
    assert after.meta[META].cancelled == 2


def test_a_model_transpose_back_to_nchw_is_kept_where_nothing_reads_it_channels_last():
    text = """graph(x: f32[1,8,5,5], z: f32[1,5,5,4]) -> [y: f32[1,4,5,5], u: f32[1,4,5,5]] {
      const w: f32[4,8,1,1] = <elided>
      [y: f32[1,4,5,5]] = Conv(x, w)
      [u: f32[1,4,5,5]] = Transpose(z) {perm = [0, 3, 1, 2]}
    }"""
    after, ops = rewritten(text)
    assert transposes(ops) == 3 and after.meta[META].cancelled == 0


@pytest.mark.parametrize("text", [
    # weights computed at run time: the NCHW path keeps them
    """graph(x: f32[1,3,5,5], w: f32[4,3,3,3]) -> [y: f32[1,4,3,3]] {
      [y: f32[1,4,3,3]] = Conv(x, w)
    }""",
    # a 1-D convolution
    """graph(x: f32[1,3,9]) -> [y: f32[1,4,7]] {
      const w: f32[4,3,3] = <elided>
      [y: f32[1,4,7]] = Conv(x, w)
    }""",
])
def test_graphs_without_a_2d_conv_of_constant_weights_are_left_alone(text):
    after, ops = rewritten(text)
    assert ops == ["Conv"] and META not in after.meta


def test_a_full_nchw_operand_stops_the_region():
    text = """graph(x: f32[1,4,5,5], r: f32[1,4,5,5]) -> [y: f32[1,4,5,5]] {
      const w: f32[4,4,1,1] = <elided>
      [c: f32[1,4,5,5]] = Conv(x, w)
      [y: f32[1,4,5,5]] = Add(c, r)
    }"""
    _, ops = rewritten(text)
    assert ops == ["snipjit.nhwc::Conv", "Transpose", "Add"]


def test_the_option_turns_it_off():
    _, ops = rewritten(RESIDUAL, channels_last=False)
    assert "Transpose" not in ops and "Conv" in ops


def test_a_channel_shuffle_becomes_one_transpose_on_the_last_axis():
    text = """graph(x: f32[2,6,4,5]) -> [y: f32[2,6,4,5]] {
      const w1: f32[6,2,1,1] = <elided>
      const w2: f32[6,1,3,3] = <elided>
      const split: i64[5] = [2, 3, 2, 4, 5]
      const merge: i64[4] = [2, 6, 4, 5]
      [c: f32[2,6,4,5]] = Conv(x, w1) {group = 3}
      [r: f32[2,3,2,4,5]] = Reshape(c, split)
      [t: f32[2,2,3,4,5]] = Transpose(r) {perm = [0, 2, 1, 3, 4]}
      [s: f32[2,6,4,5]] = Reshape(t, merge)
      [y: f32[2,6,4,5]] = Conv(s, w2) {group = 6, pads = [1, 1, 1, 1]}
    }"""
    after, ops = rewritten(text)
    assert ops == ["Transpose", "snipjit.nhwc::Conv", "Reshape", "Transpose", "Reshape", "snipjit.nhwc::Conv",
                   "Transpose"]
    assert after.meta[META].converted["channel shuffle"] == 1


PATCHES = """graph(x: f32[2,3,8,12]) -> [y: f32[{y}]{outputs}] {{
  const w: f32[5,3,4,4] = <elided>
  const b: f32[5] = <elided>
  const flat: i64[3] = [2, 5, 6]
  [c: f32[2,5,2,3]] = Conv(x, w, b) {{strides = [4, 4]}}
  [f: f32[2,5,6]] = Reshape(c, flat)
  [y: f32[{y}]] = Transpose(f) {{perm = {perm}}}
}}"""


def test_a_vision_transformers_patch_tokens_are_the_conv_output_reshaped():
    after, ops = rewritten(PATCHES.format(y="2,6,5", outputs="", perm="[0, 2, 1]"))
    assert ops == ["snipjit.nhwc::Conv", "Reshape"]   # no reorder, no copy: [N, H, W, C] is [N, H·W, C]
    assert after.outputs[0].name == "y" and after.meta[META].cancelled == 1


@pytest.mark.parametrize("y, outputs, perm", [("2,6,5", ", f: f32[2,5,6]", "[0, 2, 1]"), ("5,2,6", "", "[1, 0, 2]")])
def test_patch_tokens_read_elsewhere_or_otherwise_transposed_keep_the_reorder(y, outputs, perm):
    after, ops = rewritten(PATCHES.format(y=y, outputs=outputs, perm=perm))
    assert ops == ["snipjit.nhwc::Conv", "Transpose", "Reshape", "Transpose"]


def test_lrn_over_the_channels_is_its_channels_last_twin():
    text = """graph(x: f32[1,7,4,5]) -> [y: f32[1,7,4,5]] {
      const w: f32[7,7,1,1] = <elided>
      [c: f32[1,7,4,5]] = Conv(x, w)
      [y: f32[1,7,4,5]] = LRN(c) {size = 4, alpha = 0.5, beta = 0.75, bias = 2.0}
    }"""
    after, ops = rewritten(text)
    assert ops == ["Transpose", "snipjit.nhwc::Conv", "snipjit.nhwc::LRN", "Transpose"]
    lrn = next(n for n in after.nodes if n.op == "LRN")
    assert lrn.attrs == {"size": 4, "alpha": 0.5, "beta": 0.75, "bias": 2.0}


def test_an_image_of_few_channels_is_read_in_place_by_its_conv():
    text = """graph(x: f32[1,3,9,9], y: f32[1,5,9,9]) -> [a: f32[1,8,9,9], b: f32[1,8,9,9], c: f32[1,6,9,9]] {
      const w3: f32[8,3,3,3] = <elided>
      const w5: f32[8,5,3,3] = <elided>
      const wg: f32[6,1,3,3] = <elided>
      [a: f32[1,8,9,9]] = Conv(x, w3) {pads = [1, 1, 1, 1]}
      [b: f32[1,8,9,9]] = Conv(y, w5) {pads = [1, 1, 1, 1]}
      [c: f32[1,6,9,9]] = Conv(x, wg) {pads = [1, 1, 1, 1], group = 3}
    }"""
    after, ops = rewritten(text)
    layouts = [n.attrs.get("input_layout") for n in after.nodes if n.op == "Conv"]
    assert layouts == ["NCHW", None, None]   # 3 channels: in place; 5 channels, or groups: reordered first
    assert transposes(ops) == 2 + 3


def test_silu_and_hard_swish_join_the_conv_that_feeds_them_alone():
    text = """graph(x: f32[1,8,5,5]) -> [y: f32[1,8,5,5], z: f32[1,8,5,5], v: f32[1,8,5,5]] {
      const w1: f32[8,8,3,3] = <elided>
      const w2: f32[8,8,1,1] = <elided>
      const w3: f32[8,1,3,3] = <elided>
      [c: f32[1,8,5,5]] = Conv(x, w1) {pads = [1, 1, 1, 1]}
      [s: f32[1,8,5,5]] = Sigmoid(c)
      [y: f32[1,8,5,5]] = Mul(s, c)
      [d: f32[1,8,5,5]] = Conv(y, w2)
      [z: f32[1,8,5,5]] = HardSwish(d)
      [e: f32[1,8,5,5]] = Conv(z, w3) {pads = [1, 1, 1, 1], group = 8}
      [t: f32[1,8,5,5]] = Sigmoid(e)
      [v: f32[1,8,5,5]] = Mul(e, t)
    }"""
    after, ops = rewritten(text)
    convs = [n for n in after.nodes if n.op == "Conv"]
    assert [n.attrs.get("activation", "") for n in convs] == ["silu", "hard_swish", "silu"]
    assert "Sigmoid" not in ops and "HardSwish" not in ops


def test_a_sigmoid_read_beside_other_readers_of_the_conv_stays_an_op():
    text = """graph(x: f32[1,8,5,5]) -> [u: f32[1,8,5,5]] {
      const w1: f32[8,8,3,3] = <elided>
      [c: f32[1,8,5,5]] = Conv(x, w1) {pads = [1, 1, 1, 1]}
      [t: f32[1,8,5,5]] = Sigmoid(c)
      [u: f32[1,8,5,5]] = Add(t, c)
    }"""
    after, ops = rewritten(text)
    assert [n.attrs.get("activation", "") for n in after.nodes if n.op == "Conv"] == [""]
    assert ops.count("Sigmoid") == 1 and "sigmoid" not in after.meta[META].converted


@pytest.mark.parametrize("add", ["Add", "Sum"])
def test_a_residual_add_joins_the_conv_and_the_conv_moves_to_it(add):
    text = """graph(x: f32[1,8,5,5]) -> [y: f32[1,8,5,5]] {
      const w1: f32[8,8,3,3] = <elided>
      const w2: f32[8,8,1,1] = <elided>
      const wd: f32[8,8,1,1] = <elided>
      [c1: f32[1,8,5,5]] = Conv(x, w1) {pads = [1, 1, 1, 1]}
      [r1: f32[1,8,5,5]] = Relu(c1)
      [c2: f32[1,8,5,5]] = Conv(r1, w2)
      [d: f32[1,8,5,5]] = Conv(x, wd)
      [a: f32[1,8,5,5]] = {add}(c2, d)
      [y: f32[1,8,5,5]] = Relu(a)
    }}"""
    after, ops = rewritten(text.replace("{add}", add).replace("}}", "}"))
    assert ops == ["Transpose", "snipjit.nhwc::Conv", "Relu", "snipjit.nhwc::Conv", "snipjit.nhwc::Conv", "Relu",
                   "Transpose"]
    main = after.nodes[4]    # c2, after the shortcut d it now reads
    assert main.inputs[3] is after.nodes[3].outputs[0] and after.meta[META].converted["residual Add"] == 1
