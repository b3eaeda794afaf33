"""EliminateIdentityArithmetic: `x*1`, `1*x`, `x+0`, `0+x`, `x-0`, `x/1` with Scalar operands vanish when
the result is bit-identical and the shape does not change; everything else stays."""
import numpy as np
import pytest

from lir_helpers import assert_same_results
from snipjit import parse_graph
from snipjit.snippets.dataflow.canonicalization import Canonicalization
from snipjit.snippets.dataflow.convert_constants_to_scalars import ConvertConstantsToScalars
from snipjit.snippets.dataflow.eliminate_identity_arithmetic import EliminateIdentityArithmetic


def run(text: str, canonicalize: bool = True):
    original = parse_graph(text)
    body = original.copy()
    if canonicalize:
        Canonicalization().run(body)
    ConvertConstantsToScalars().run(body)
    changed = EliminateIdentityArithmetic().run(body)
    body.validate()
    return original, body, changed


def identity_body(expr: str, value: float) -> str:
    return f"""graph(x: f32[4,8]) -> [z] {{
      const k: f32[] = {value!r}
      [a] = {expr}
      [z] = Relu(a)
    }}"""


@pytest.mark.parametrize("expr, value", [("Mul(x, k)", 1.0), ("Mul(k, x)", 1.0), ("Add(x, k)", -0.0),
                                         ("Add(k, x)", -0.0), ("Sub(x, k)", 0.0), ("Div(x, k)", 1.0)])
def test_identities_vanish_with_their_scalar(expr, value):
    original, body, changed = run(identity_body(expr, value))
    assert changed is True
    assert [n.op for n in body.nodes] == ["Relu"]
    assert body.nodes[0].inputs[0] is body.inputs[0]
    assert_same_results(original, body)


@pytest.mark.parametrize("expr, value", [("Sub(k, x)", 0.0), ("Div(k, x)", 1.0), ("Mul(x, k)", 2.0),
                                         ("Add(x, k)", 1.0), ("Mul(x, k)", 0.0), ("Pow(x, k)", 1.0),
                                         ("Max(x, k)", 0.0)])
def test_non_identities_stay(expr, value):
    _, body, changed = run(identity_body(expr, value))
    assert changed is False
    assert len(body.nodes) == 3


def test_a_body_output_keeps_its_producer():
    _, body, changed = run("""graph(x: f32[8]) -> [z] {
      const one: f32[] = 1.0
      [z] = Mul(x, one)
    }""")
    assert changed is False
    assert [n.op for n in body.nodes] == ["Scalar", "Mul"]


def test_x_times_one_that_broadcasts_stays():
    # without canonicalization the scalar has the higher rank: x * 1 turns f32[8] into f32[1,8]
    _, body, changed = run("""graph(x: f32[8]) -> [z] {
      const one: f32[1,1] = [1.0]
      [a] = Mul(x, one)
      [z] = Relu(a)
    }""", canonicalize=False)
    assert changed is False
    assert [n.op for n in body.nodes] == ["Scalar", "Mul", "Relu"]


def test_chained_identities_all_vanish():
    original, body, _ = run("""graph(x: f32[8]) -> [z] {
      const one: f32[] = 1.0
      const zero: f32[] = 0.0
      [a] = Mul(x, one)
      [b] = Sub(a, zero)
      [c] = Div(b, one)
      [z] = Exp(c)
    }""")
    assert [n.op for n in body.nodes] == ["Exp"]
    assert_same_results(original, body)


@pytest.mark.parametrize("expr, value", [("Add(x, k)", 0.0), ("Sub(x, k)", -0.0)])
def test_signed_zero_is_kept_bit_identical(expr, value):
    """x + 0.0 is no identity for x = -0.0 (-0 + 0 = +0), nor is x - (-0.0): the pass keeps them."""
    original, body, changed = run(identity_body(expr, value).replace("Relu(a)", "Neg(a)"))
    assert changed is False
    x = np.full((4, 8), -0.0, np.float32)
    assert_same_results(original, body, [x], exact_zeros=True)
