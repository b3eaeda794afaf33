"""MarkQuantizedConvolutions: a Conv reading DequantizeLinear(QuantizeLinear(x)) with one scale and zero
point, and DequantizeLinear of constant int8 weights without a zero point, gets `StaticQuantization`;
any other Conv is left unmarked; `int8=False` marks none (the steps the mark leads to:
tests/runtime/implementations/test_int8_conv.py)."""
import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.ops.int8 import META, StaticQuantization
from snipjit.passes.mark_quantized_convolutions import mark_quantized_convolutions


def conv(qtype="u8", zero="3", zero2="3", scale2="0.05", weight_zero="", scales="f32[4] = [0.1, 0.2, 0.3, 0.4]",
         axis=0, weight_type="i8") -> str:
    zero_input = ", wz" if weight_zero else ""
    return f"""graph(x: f32[1, 2, 5, 5]) -> [y: f32[1, 4, 5, 5]] {{
      const s: f32[] = 0.05
      const z: {qtype}[] = {zero}
      const s2: f32[] = {scale2}
      const z2: {qtype}[] = {zero2}
      const w: {weight_type}[4, 2, 3, 3] = <elided>
      const ws: {scales}
      {"const wz: i8[4] = [" + weight_zero + "]" if weight_zero else ""}
      [q: {qtype}[1, 2, 5, 5]] = QuantizeLinear(x, s, z)
      [xd: f32[1, 2, 5, 5]] = DequantizeLinear(q, s2, z2)
      [wd: f32[4, 2, 3, 3]] = DequantizeLinear(w, ws{zero_input}) {{axis = {axis}}}
      [y: f32[1, 4, 5, 5]] = Conv(xd, wd) {{pads = [1, 1, 1, 1]}}
    }}"""


def marked(text: str, **options):
    graph = mark_quantized_convolutions(parse_graph(text, elided="zeros"), options)
    (node,) = [n for n in graph.nodes if n.op == "Conv"]
    return node.meta.get(META)


def test_a_qdq_conv_is_marked_with_its_scales():
    scales = tuple(np.float32([0.1, 0.2, 0.3, 0.4]).tolist())
    assert marked(conv()) == StaticQuantization(float(np.float32(0.05)), 3, 0, 255, scales)
    assert marked(conv("i8", "-5", "-5")) == StaticQuantization(float(np.float32(0.05)), -5, -128, 127, scales)
    assert marked(conv(scales="f32[] = 0.5")).weight_scales == (0.5,)
    assert marked(conv(weight_zero="0, 0, 0, 0")) is not None


@pytest.mark.parametrize("change", [dict(zero2="4"), dict(scale2="0.1"), dict(qtype="u16", zero="3", zero2="3"),
                                    dict(weight_zero="0, 1, 0, 0"), dict(axis=1), dict(weight_type="u8")])
def test_other_convs_are_not_marked(change):
    assert marked(conv(**change)) is None


def test_int8_false_marks_nothing():
    assert marked(conv(), int8=False) is None
