"""ConvertDivToMul: division by a scalar constant becomes multiplication by its reciprocal."""
import numpy as np
import pytest

from snipjit import parse_graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.snippets.dataflow.convert_constants_to_scalars import ConvertConstantsToScalars
from snipjit.snippets.dataflow.convert_div_to_mul import ConvertDivToMul


def body(divisor: str) -> str:
    return f"""graph(x: f32[64]) -> [y] {{
      const c: f32[] = {divisor}
      [y] = Div(x, c)
    }}"""


def convert(text: str):
    g = parse_graph(text)
    ConvertConstantsToScalars().run(g)
    original = g.copy()
    changed = ConvertDivToMul().run(g)
    g.validate()
    return original, g, changed


@pytest.mark.parametrize("divisor, exact", [("2.0", True), ("0.25", True), ("1.4142135381698608", False),
                                            ("3.0", False), ("-7.5", False)])
def test_division_by_a_scalar_becomes_a_product(divisor, exact):
    original, g, changed = convert(body(divisor))
    assert changed and [n.op for n in g.nodes] == ["Scalar", "Mul"]
    assert g.nodes[0].attrs["value"] == float(np.float32(1 / np.float32(float(divisor))))
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32) * 1e3
    want, = run_graph_reference(original, [x])
    got, = run_graph_reference(g, [x])
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_array_max_ulp(got, want, maxulp=1)


@pytest.mark.parametrize("divisor", ["0.0", "inf", "nan", "1e-45"])
def test_divisions_whose_reciprocal_is_not_a_finite_nonzero_number_stay(divisor):
    _, g, changed = convert(body(divisor))
    assert not changed and [n.op for n in g.nodes] == ["Scalar", "Div"]


def test_division_of_a_scalar_by_a_tensor_stays():
    _, g, changed = convert("graph(x: f32[8]) -> [y] { const c: f32[] = 2.0\n [y] = Div(c, x) }")
    assert not changed and g.nodes[-1].op == "Div"
