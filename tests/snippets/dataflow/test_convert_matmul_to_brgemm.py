"""ConvertMatMulToBrgemm: MatMuls of a body become Brgemms (same results on the reference interpreter);
vector operands and non-f32 products are refused with the node named."""
import pytest

from lir_helpers import assert_same_results
from snipjit import parse_graph
from snipjit.snippets.dataflow.convert_matmul_to_brgemm import ConvertMatMulToBrgemm
from snipjit.snippets.ops import DOMAIN


def test_matmuls_become_brgemms_with_the_same_results():
    text = """graph(q: f32[2,5,16], kt: f32[2,16,7], v: f32[2,7,3]) -> [o] {
     [s] = MatMul(q, kt)
     [p] = Softmax(s)
     [o] = MatMul(p, v) }"""
    body = parse_graph(text)
    assert ConvertMatMulToBrgemm().run(body) is True
    assert [(n.op, n.domain) for n in body.nodes] == [("Brgemm", DOMAIN), ("Softmax", ""), ("Brgemm", DOMAIN)]
    assert_same_results(parse_graph(text), body)


def test_a_body_without_products_is_unchanged():
    body = parse_graph("graph(x: f32[4]) -> [y] { [y] = Exp(x) }")
    assert ConvertMatMulToBrgemm().run(body) is False


@pytest.mark.parametrize("text, message", [
    ("graph(a: f32[5,16], b: f32[16]) -> [c] { [c] = MatMul(a, b) }", "rank >= 2"),
    ("graph(a: f16[5,16], b: f16[16,3]) -> [c] { [c] = MatMul(a, b) }", "f32 operands"),
])
def test_products_a_brgemm_cannot_do_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        ConvertMatMulToBrgemm().run(parse_graph(text))
