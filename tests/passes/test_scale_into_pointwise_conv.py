"""ScaleIntoPointwiseConv: a Mul of a channels-last map by a per-image channel scale, read by a 1×1 convolution
alone, becomes that convolution's fifth input; every other Mul stays (and each rewritten graph computes what
the original does)."""
import pytest
from random_constants import parse_random, rewritten_by

from snipjit.passes.channels_last import META, channels_last
from snipjit.passes.scale_into_pointwise_conv import scale_into_pointwise_conv


def rewritten(text: str):
    return rewritten_by(scale_into_pointwise_conv, text)


def ops(graph):
    return [f"{n.domain}::{n.op}" if n.domain else n.op for n in graph.nodes]


def gated(mul: str = "Mul(x, s)", conv: str = "snipjit.nhwc::Conv(m, w, b)", weights: str = "6,8,1,1",
          out: str = "2,4,5,6", extra: str = "", outputs: str = "") -> str:
    return f"""graph(x: f32[2,4,5,8], s: f32[2,1,1,8], r: f32[2,4,5,6]) -> [y: f32[{out}]{outputs}] {{
      const w: f32[{weights}] = <elided>
      const b: f32[6] = <elided>
      [m: f32[2,4,5,8]] = {mul}
      [y: f32[{out}]] = {conv}
      {extra}
    }}"""


@pytest.mark.parametrize("mul", ["Mul(x, s)", "Mul(s, x)"])
@pytest.mark.parametrize("conv, inputs", [
    ("snipjit.nhwc::Conv(m, w, b)", ["x", "w", "b", None, "s"]),
    ("snipjit.nhwc::Conv(m, w)", ["x", "w", None, None, "s"]),
    ("snipjit.nhwc::Conv(m, w, b, r) {activation = \"silu\"}", ["x", "w", "b", "r", "s"]),
])
def test_the_scale_becomes_the_convolutions_fifth_input(mul, conv, inputs):
    after = rewritten(gated(mul=mul, conv=conv))
    assert ops(after) == ["snipjit.nhwc::Conv"]
    assert [v and v.name for v in after.nodes[0].inputs] == inputs


@pytest.mark.parametrize("text", [
    gated(extra="[z: f32[2,4,5,8]] = Relu(m)", outputs=", z: f32[2,4,5,8]"),                    # m read twice
    gated(outputs=", m: f32[2,4,5,8]"),                                                          # a graph output
    gated(conv="snipjit.nhwc::Conv(m, w, b) {pads = [1, 1, 1, 1]}", weights="6,8,3,3"),        # a 3x3 window
    gated(conv="snipjit.nhwc::Conv(m, w, b) {strides = [2, 2]}", out="2,2,3,6"),               # stride 2
    gated(conv="snipjit.nhwc::Conv(m, w, b) {group = 2}", weights="6,4,1,1"),                  # two groups
    gated(conv="Conv(m, w, b)", out="2,6,5,8", weights="6,4,1,1"),                            # not channels-last
    gated(mul="Mul(x, r8)").replace("s: f32[2,1,1,8]", "r8: f32[2,4,5,8]"),                   # a full operand
    gated(mul="Mul(x, s1)").replace("s: f32[2,1,1,8]", "s1: f32[1,1,1,8]"),                   # one scale for all
    gated(mul="Add(x, s)"),
    # a map of fewer pixels (20) than output channels (24): copying the weights scaled costs more than the Mul
    gated(weights="24,8,1,1", out="2,4,5,24").replace("f32[6]", "f32[24]"),
])
def test_other_products_and_readers_stay(text):
    before = parse_random(text)
    after = rewritten(text)
    assert ops(after) == ops(before)


def test_squeeze_excitation_after_channels_last():
    """An inverted residual's squeeze-excitation on NCHW: the layout pass gives the gate [N, 1, 1, C] (a view of
    the pooled vector), this pass hands it to the projection, whose residual Add joined it already."""
    text = """graph(x: f32[2,8,6,6]) -> [y: f32[2,8,6,6]] {
      const we: f32[16,8,1,1] = <elided>
      const wd: f32[16,1,3,3] = <elided>
      const w1: f32[4,16,1,1] = <elided>
      const w2: f32[16,4,1,1] = <elided>
      const wp: f32[8,16,1,1] = <elided>
      [e: f32[2,16,6,6]] = Conv(x, we)
      [d: f32[2,16,6,6]] = Conv(e, wd) {group = 16, pads = [1, 1, 1, 1]}
      [p: f32[2,16,1,1]] = GlobalAveragePool(d)
      [s1: f32[2,4,1,1]] = Conv(p, w1)
      [s2: f32[2,4,1,1]] = Relu(s1)
      [s3: f32[2,16,1,1]] = Conv(s2, w2)
      [s: f32[2,16,1,1]] = Sigmoid(s3)
      [m: f32[2,16,6,6]] = Mul(d, s)
      [c: f32[2,8,6,6]] = Conv(m, wp)
      [y: f32[2,8,6,6]] = Add(c, x)
    }"""
    after = rewritten_by(lambda graph: scale_into_pointwise_conv(channels_last(graph)), text)
    assert "Mul" not in ops(after)
    projection = next(n for n in after.nodes if n.op == "Conv" and n.inputs[1].name == "wp")
    gate = projection.inputs[4]
    assert gate.shape == (2, 1, 1, 16) and gate.producer.op in ("Conv", "Reshape")
    assert projection.inputs[3] is not None   # (the residual)
    assert after.meta[META].converted["input scale"] == 1
