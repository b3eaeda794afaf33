"""MarkPitchedInputs: a Subgraph input that a Concat along the last axis also reads takes a row pitch."""
from snipjit import parse_graph
from snipjit.passes.mark_pitched_inputs import mark_pitched_inputs
from snipjit.ir.graph import Node
from snipjit.passes.tokenize import make_body, tokenize_snippets


def pitched(text: str) -> dict[str, tuple]:
    """The tokenized graph's Subgraphs (by the name of their first output) and the inputs the pass marks."""
    g = mark_pitched_inputs(tokenize_snippets(parse_graph(text, elided="zeros")))
    return {n.outputs[0].name: n.attrs["body"].meta.get("pitched", ()) for n in g.nodes if n.op == "Subgraph"}


DENSE_LAYER = """graph(x: f32[1,5,5,{c}], y: f32[1,5,5,3]) -> [z: f32[1,5,5,{c}], j: f32[{joined}]] {{
  const s: f32[{c}] = <elided>
  [m: f32[1,5,5,{c}]] = Mul(x, s)
  [z: f32[1,5,5,{c}]] = Relu(m)
  [j: f32[{joined}]] = Concat(x, y) {{axis={axis}}}
}}"""


def test_an_input_a_channel_concat_reads_too_is_pitched():
    assert pitched(DENSE_LAYER.format(c=8, joined="1,5,5,11", axis=3)) == {"z": (0,)}
    assert pitched(DENSE_LAYER.format(c=8, joined="1,5,5,11", axis=-1)) == {"z": (0,)}


def test_a_concat_along_another_axis_marks_nothing():
    assert pitched(DENSE_LAYER.format(c=3, joined="1,5,10,3", axis=2)) == {"z": ()}


def test_only_the_inputs_a_concat_reads():
    text = """graph(x: f32[2,4,6], y: f32[2,4,6], w: f32[2,4,2]) -> [z: f32[2,4,6], j: f32[2,4,8]] {
      [s: f32[2,4,6]] = Add(x, y)
      [z: f32[2,4,6]] = Relu(s)
      [j: f32[2,4,8]] = Concat(y, w) {axis=2}
    }"""
    assert pitched(text) == {"z": (1,)}


def test_rows_of_one_element_and_products_are_not_pitched():
    """A Concat of single-channel values (a pitch would be no stride) and a Subgraph holding a product (its
    Brgemm walks its operands itself) keep contiguous inputs."""
    assert pitched(DENSE_LAYER.format(c=1, joined="1,5,5,4", axis=3)) == {"z": ()}
    g = parse_graph("""graph(x: f32[2,4,6], y: f32[2,4,6]) -> [z: f32[2,4,4], j: f32[2,4,12]] {
      [t: f32[2,6,4]] = Transpose(y) {perm=[0, 2, 1]}
      [m: f32[2,4,4]] = MatMul(x, t)
      [z: f32[2,4,4]] = Relu(m)
      [j: f32[2,4,12]] = Concat(x, y) {axis=2}
    }""")
    product, relu = g.nodes[1:3]   # (as a tokenizer fusing products would make it)
    body = make_body(list(product.inputs), list(relu.outputs), [product, relu], "subgraph0")
    g.nodes[1:3] = [Node("Subgraph", list(product.inputs), list(relu.outputs), {"body": body}, "subgraph0")]
    mark_pitched_inputs(g)
    assert "pitched" not in body.meta
