"""ConvertPowerToPowerStatic: `Pow(x, Scalar)` becomes `PowerStatic{power}`; any other exponent stays."""
from lir_helpers import assert_same_results
from snipjit import parse_graph
from snipjit.snippets.dataflow.canonicalization import Canonicalization
from snipjit.snippets.dataflow.convert_constants_to_scalars import ConvertConstantsToScalars
from snipjit.snippets.dataflow.convert_power_to_powerstatic import ConvertPowerToPowerStatic


def run(text: str, scalars: bool = True):
    original = parse_graph(text)
    body = original.copy()
    Canonicalization().run(body)
    if scalars:
        ConvertConstantsToScalars().run(body)
    changed = ConvertPowerToPowerStatic().run(body)
    body.validate()
    return original, body, changed


def ops(body) -> list[str]:
    return [n.op for n in body.nodes]


def test_scalar_exponent_becomes_power_static_and_the_scalar_goes():
    original, body, changed = run("""graph(x: f32[4,8]) -> [z] {
      const p: f32[] = 3.0
      [z] = Pow(x, p)
    }""")
    assert changed is True
    assert ops(body) == ["PowerStatic"]
    node = body.nodes[0]
    assert node.domain == "snippets" and node.attrs == {"power": 3.0}
    assert node.inputs == [body.inputs[0]]
    assert_same_results(original, body)


def test_a_scalar_still_used_elsewhere_stays():
    original, body, _ = run("""graph(x: f32[8]) -> [z] {
      const p: f32[] = 0.5
      [a] = Pow(x, p)
      [z] = Mul(a, p)
    }""")
    assert ops(body) == ["Scalar", "PowerStatic", "Mul"]
    assert body.nodes[1].attrs == {"power": 0.5}


def test_tensor_exponent_stays_pow():
    _, body, changed = run("graph(x: f32[8], y: f32[8]) -> [z] { [z] = Pow(x, y) }")
    assert changed is False
    assert ops(body) == ["Pow"]


def test_broadcast_scalar_input_exponent_stays_pow():
    _, body, changed = run("graph(x: f32[8], y: f32[]) -> [z] { [z] = Pow(x, y) }")
    assert changed is False
    assert ops(body) == ["Pow"]


def test_needs_the_exponent_as_a_scalar_op():
    # before ConvertConstantsToScalars the exponent is a plain constant: nothing to match yet
    _, body, changed = run("""graph(x: f32[8]) -> [z] {
      const p: f32[] = 2.0
      [z] = Pow(x, p)
    }""", scalars=False)
    assert changed is False
    assert ops(body) == ["Pow"]


def test_computed_exponent_stays_pow():
    _, body, changed = run("""graph(x: f32[8]) -> [z] {
      const p: f32[] = 2.0
      [q] = Neg(p)
      [z] = Pow(x, q)
    }""")
    assert changed is False
    assert ops(body) == ["Scalar", "Neg", "Pow"]
