"""FloatIntegerProducts: a MatMulInteger read only by a Cast to float32 becomes a float32 MatMul of the
centered operands (constant weights centered at compile time) with the integer product's values; any
other MatMulInteger stays."""
import numpy as np
import pytest

import snipjit
from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.passes.float_integer_products import float_integer_products

rng = np.random.default_rng(0)


def model(weights_zero: str = "3", reader: str = "[y: f32[2,5,16]] = Cast(p) {to = 1}", out: str = "y: f32[2,5,16]"):
    w = ", ".join(str(v) for v in rng.integers(-128, 128, 24 * 16))
    return f"""graph(x: f32[2,5,24]) -> [{out}] {{
      const w: i8[24,16] = [{w}]
      const wz: i8[] = {weights_zero}
      [q: u8[2,5,24], s: f32[], z: u8[]] = DynamicQuantizeLinear(x)
      [p: i32[2,5,16]] = MatMulInteger(q, w, z, wz)
      {reader}
    }}"""


def test_the_product_becomes_a_float_matmul_with_the_same_values():
    before = parse_graph(model())
    after = float_integer_products(before.copy())
    after.validate()
    ops = [n.op for n in after.nodes]
    assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops and ops[-1] == "MatMul"
    for x in [(rng.standard_normal((2, 5, 24)) * 3).astype(np.float32), np.zeros((2, 5, 24), np.float32),
              np.abs(rng.standard_normal((2, 5, 24))).astype(np.float32)]:   # (an empty range; no negatives)
        want, got = run_graph_reference(before, [x])[0], run_graph_reference(after, [x])[0]
        np.testing.assert_array_equal(got, want)   # small sums: float32 holds them exactly
    cm = snipjit.compile(before)
    assert not {"MatMulInteger", "DynamicQuantizeLinear"} & {op for s in cm.plan for op in s.ops}
    np.testing.assert_array_equal(cm.run({"x": x})[0], want)


def test_quantized_values_read_elsewhere_keep_the_dynamic_quantizer():
    before = parse_graph(model(reader="[y: f32[2,5,16]] = Cast(p) {to = 1}\n      [c: f32[2,5,24]] = Cast(q) {to = 1}",
                               out="y: f32[2,5,16], c: f32[2,5,24]"))
    after = float_integer_products(before.copy())
    assert [n.op for n in after.nodes] == ["DynamicQuantizeLinear", "Cast", "Cast", "Sub", "MatMul", "Cast"]
    x = (rng.standard_normal((2, 5, 24)) * 3).astype(np.float32)
    for want, got in zip(run_graph_reference(before, [x]), run_graph_reference(after, [x])):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("graph", [
    model(reader="[y: i32[2,5,16]] = Add(p, p)", out="y: i32[2,5,16]"),     # the integers are used
    model(reader="[y: f64[2,5,16]] = Cast(p) {to = 11}", out="y: f64[2,5,16]"),   # not float32
])
def test_other_products_stay(graph):
    assert "MatMulInteger" in [n.op for n in float_integer_products(parse_graph(graph)).nodes]


def test_symmetric_int8_weights_become_one_int8_product(level):
    """quantize_dynamic's default (int8 weights, zero point 0): one DynamicQuantizedMatMul of the float
    activations, run as an int8 step at every ISA level with the integer product's exact values."""
    before = parse_graph(model(weights_zero="0"))
    after = float_integer_products(before.copy())
    after.validate()
    ops = [n.op for n in after.nodes]
    assert ops[-1] == "DynamicQuantizedMatMul" and "MatMulInteger" not in ops and "MatMul" not in ops
    cm = snipjit.compile(before)
    assert [s.kind for s in cm.plan if "DynamicQuantizedMatMul" in s.ops] == ["int8"]
    for x in [(rng.standard_normal((2, 5, 24)) * 3).astype(np.float32), np.zeros((2, 5, 24), np.float32),
              np.abs(rng.standard_normal((2, 5, 24))).astype(np.float32)]:
        want = run_graph_reference(before, [x])[0]
        np.testing.assert_array_equal(run_graph_reference(after, [x])[0], want)
        np.testing.assert_array_equal(cm.run({"x": x})[0], want)
    assert "MatMul" in [n.op for n in float_integer_products(before.copy(), {"int8": False}).nodes]


@pytest.mark.parametrize("weights_zero, options", [("0", {}), ("0", {"int8": False}), ("3", {})])
def test_a_vector_of_activations(weights_zero, options):
    """A rank-1 x: the zero point the range gives is a scalar, so the products keep x's rank."""
    w = ", ".join(str(v) for v in rng.integers(-128, 128, 24 * 16))
    text = f"""graph(x: f32[24]) -> [y: f32[16]] {{
      const w: i8[24,16] = [{w}]
      const wz: i8[] = {weights_zero}
      [q: u8[24], s: f32[], z: u8[]] = DynamicQuantizeLinear(x)
      [p: i32[16]] = MatMulInteger(q, w, z, wz)
      [y: f32[16]] = Cast(p) {{to = 1}}
    }}"""
    x = (rng.standard_normal(24) * 3).astype(np.float32)
    want = run_graph_reference(parse_graph(text), [x])[0]
    np.testing.assert_array_equal(snipjit.compile(parse_graph(text), **options).run({"x": x})[0], want)
