"""DecomposeFakeQuantize: a per-tensor QuantizeLinear -> DequantizeLinear pair becomes Div, Round, Clip and
Mul (Add/Sub when the zero points differ) with the same values, ties and saturation included; the
arithmetic moves above a zero Pad so the Pad still meets its Conv; anything else stays as it was."""
import numpy as np
import pytest

import snipjit
from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.decompose_fake_quantize import decompose_fake_quantize

rng = np.random.default_rng(0)


def parsed(text: str):
    graph = parse_graph(text, elided="zeros")
    for v in graph.constants:
        if v.data.ndim == 4:
            v.data = np.random.default_rng(1).standard_normal(v.data.shape).astype(np.float32)
    return graph


def rewritten(text: str, x: np.ndarray):
    before = parsed(text)
    after = decompose_fake_quantize(before.copy())
    after.validate()
    want, got = run_graph_reference(before, [x]), run_graph_reference(after, [x])
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    return after


def pair(qtype: str, zero_point: int, zero_point2: int | None = None, scale2: str = "0.25") -> str:
    zero_point2 = zero_point if zero_point2 is None else zero_point2
    return f"""graph(x: f32[64]) -> [y: f32[64]] {{
      const s: f32[] = 0.25
      const z: {qtype}[] = {zero_point}
      const s2: f32[] = {scale2}
      const z2: {qtype}[] = {zero_point2}
      [q: {qtype}[64]] = QuantizeLinear(x, s, z)
      [y: f32[64]] = DequantizeLinear(q, s2, z2)
    }}"""


def samples() -> np.ndarray:
    """Ties (x / 0.25 = k + 0.5), values far beyond both ends of the range, and ordinary ones."""
    ties = (np.arange(-8, 8) + 0.5) * 0.25
    far = np.array([-1e6, -100, 100, 1e6, np.inf, -np.inf, 0, -0.0], np.float32)
    return np.concatenate([ties, far, rng.standard_normal(40) * 40]).astype(np.float32)


@pytest.mark.parametrize("qtype, zero_point", [("u8", 128), ("u8", 0), ("i8", 0), ("i8", -5), ("u16", 30000)])
def test_a_pair_becomes_arithmetic_with_the_same_values(qtype, zero_point):
    after = rewritten(pair(qtype, zero_point), samples())
    assert [n.op for n in after.nodes] == ["Div", "Round", "Clip", "Mul"]


def test_different_zero_points_and_scales():
    after = rewritten(pair("u8", 128, 120, scale2="0.5"), samples())
    assert [n.op for n in after.nodes] == ["Div", "Round", "Add", "Clip", "Sub", "Mul"]


def test_per_axis_and_lone_quantizers_stay():
    per_axis = """graph(x: f32[2,4]) -> [y: f32[2,4]] {
      const s: f32[4] = [0.5, 0.25, 1.0, 2.0]
      const z: u8[4] = [1, 2, 3, 4]
      [q: u8[2,4]] = QuantizeLinear(x, s, z)
      [y: f32[2,4]] = DequantizeLinear(q, s, z)
    }"""
    assert [n.op for n in decompose_fake_quantize(parse_graph(per_axis)).nodes] == ["QuantizeLinear", "DequantizeLinear"]
    read_as_integers = """graph(x: f32[4]) -> [y: f32[4], q: u8[4]] {
      const s: f32[] = 0.5
      const z: u8[] = 3
      [q: u8[4]] = QuantizeLinear(x, s, z)
      [y: f32[4]] = DequantizeLinear(q, s, z)
    }"""
    assert [n.op for n in decompose_fake_quantize(parse_graph(read_as_integers)).nodes] == \
        ["QuantizeLinear", "DequantizeLinear"]


def conv_after_pad(value: str = "0.0") -> str:
    return f"""graph(x: f32[1,3,6,6]) -> [y: f32[1,4,6,6]] {{
      const p: i64[8] = [0, 0, 1, 1, 0, 0, 1, 1]
      const v: f32[] = {value}
      const s: f32[] = 0.05
      const z: u8[] = 128
      const w: f32[4,3,3,3] = <elided>
      [t: f32[1,3,8,8]] = Pad(x, p, v)
      [q: u8[1,3,8,8]] = QuantizeLinear(t, s, z)
      [d: f32[1,3,8,8]] = DequantizeLinear(q, s, z)
      [y: f32[1,4,6,6]] = Conv(d, w)
    }}"""


def test_the_arithmetic_moves_above_a_zero_pad_which_then_joins_the_conv():
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32) * 5
    after = rewritten(conv_after_pad(), x)
    assert [n.op for n in after.nodes] == ["Div", "Round", "Clip", "Mul", "Pad", "Conv"]
    cm = snipjit.compile(parsed(conv_after_pad()))
    assert "Pad" not in [op for s in cm.plan for op in s.ops]   # FusePadIntoConv took it
    want = snipjit.compile(parsed(conv_after_pad()), implementations={"reference"}, fuse=False).run({"x": x})
    np.testing.assert_allclose(cm.run({"x": x})[0], want[0], rtol=1e-5, atol=1e-5)


def test_a_pad_with_another_value_stays_first():
    after = rewritten(conv_after_pad("1.0"), rng.standard_normal((1, 3, 6, 6)).astype(np.float32))
    assert [n.op for n in after.nodes] == ["Pad", "Div", "Round", "Clip", "Mul", "Conv"]
