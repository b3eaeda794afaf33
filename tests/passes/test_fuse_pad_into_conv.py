"""FusePadIntoConv: a zero Pad of the spatial dims read only by Convs becomes their padding; any other
Pad (a value, a mode, channel or batch pads, crops, another reader) stays; results are unchanged."""
import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.fuse_pad_into_conv import fuse_pad_into_conv


def rewritten(text: str):
    before = parse_graph(text, elided="zeros")
    rng = np.random.default_rng(0)
    for v in before.constants:
        if v.dtype.is_float and v.data.ndim == 4:
            v.data = rng.standard_normal(v.data.shape).astype(np.float32)
    after = fuse_pad_into_conv(before.copy())
    after.validate()
    inputs = [rng.standard_normal(v.shape).astype(np.float32) for v in before.inputs]
    for want, got in zip(run_graph_reference(before, inputs), run_graph_reference(after, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return after


def graph(pads: str, extra: str = "", conv_pads: str = "[1, 0, 0, 1]", mode: str = "constant",
          value: str = "0.0", outputs: str = "[y: f32[1,4,9,9]]") -> str:
    return f"""graph(x: f32[1,3,7,7]) -> {outputs} {{
      const w: f32[4,3,3,3] = <elided>
      const p: i64[8] = {pads}
      const v: f32[] = {value}
      [t: f32[1,3,10,10]] = Pad(x, p, v) {{mode = "{mode}"}}
      [y: f32[1,4,9,9]] = Conv(t, w) {{pads = {conv_pads}}}
      {extra}
    }}"""


def test_spatial_zero_padding_joins_the_conv_padding():
    after = rewritten(graph("[0, 0, 1, 2, 0, 0, 2, 1]"))
    assert [n.op for n in after.nodes] == ["Conv"]
    assert after.nodes[0].attrs["pads"] == [2, 2, 2, 2]
    assert after.nodes[0].inputs[0].name == "x"


def test_a_valid_conv_takes_the_padding_as_its_own():
    text = graph("[0, 0, 0, 0, 0, 0, 1, 1]").replace("{pads = [1, 0, 0, 1]}", '{auto_pad = "VALID"}')
    after = rewritten(text.replace("f32[1,4,9,9]", "f32[1,4,6,6]").replace("f32[1,3,10,10]", "f32[1,3,8,8]"))
    assert [n.op for n in after.nodes] == ["Conv"]
    assert after.nodes[0].attrs["pads"] == [0, 0, 1, 1] and after.nodes[0].attrs["auto_pad"] == "NOTSET"


@pytest.mark.parametrize("text", [
    graph("[0, 0, 1, 2, 0, 0, 2, 1]", value="1.0"),                        # not zeros
    graph("[0, 0, 1, 2, 0, 0, 2, 1]", mode="reflect"),                    # not constant
    graph("[0, 0, 1, 2, 0, 0, 2, 1]", extra="[z: f32[1,3,10,10]] = Relu(t)",  # another reader
          outputs="[y: f32[1,4,9,9], z: f32[1,3,10,10]]"),
])
def test_other_pads_stay(text):
    assert [n.op for n in rewritten(text).nodes].count("Pad") == 1


def test_channel_pads_stay():
    text = """graph(x: f32[1,3,7,7]) -> [y: f32[1,4,5,5]] {
      const w: f32[4,4,3,3] = <elided>
      const p: i64[8] = [0, 1, 0, 0, 0, 0, 0, 0]
      [t: f32[1,4,7,7]] = Pad(x, p)
      [y: f32[1,4,5,5]] = Conv(t, w)
    }"""
    assert [n.op for n in rewritten(text).nodes] == ["Pad", "Conv"]


def test_pads_of_other_ranks_are_not_looked_at():
    text = """graph(x: f32[5]) -> [y: f32[7]] {
      const p: i64[2] = [1, 1]
      [y: f32[7]] = Pad(x, p)
    }"""
    assert [n.op for n in rewritten(text).nodes] == ["Pad"]
