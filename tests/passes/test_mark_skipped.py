"""MarkSkippedByPlugin: a heavy op's bias and activation epilogue is left to its BLAS implementation.

The graphs carry every type, so they parse without inference (the heavy ops' inference lives elsewhere).
"""
import pytest

from snipjit import parse_graph
from snipjit.passes.mark_skipped import SKIPPED_BY_PLUGIN, mark_skipped_by_plugin
from snipjit.passes.tokenize import tokenize_snippets


def marked(text: str, **options) -> list[str]:
    """The names of the output values of the nodes the pass marks."""
    g = mark_skipped_by_plugin(parse_graph(text, elided="zeros", infer=False), options)
    return [n.outputs[0].name for n in g.nodes if n.meta.get(SKIPPED_BY_PLUGIN)]


MATMUL = """graph(x: f32[4,8], w: f32[8,16]) -> [z: f32[4,16]] {{
  const b: f32[{bias_shape}] = <elided>
  [m: f32[4,16]] = MatMul(x, w)
  [a: f32[4,16]] = Add({operands})
  [z: f32[4,16]] = Relu(a)
}}"""


@pytest.mark.parametrize("bias_shape, operands, expected", [
    ("16", "m, b", ["a", "z"]),
    ("1,16", "b, m", ["a", "z"]),       # the bias may come first
    ("1", "m, b", ["a", "z"]),          # a single value varies along no axis at all
    ("4,1", "m, b", []),                # per-row: not a per-column bias, and Relu no longer follows MatMul
    ("4,16", "m, b", []),               # a full tensor
])
def test_matmul_bias_must_be_per_column(bias_shape, operands, expected):
    text = MATMUL.format(bias_shape=bias_shape, operands=operands)
    assert marked(text) == expected


def test_conv_bias_is_per_channel_then_activation():
    text = """graph(x: f32[1,3,5,5], w: f32[8,3,1,1]) -> [z: f32[1,8,5,5], q: f32[1,8,5,8]] {
      const b: f32[8,1,1] = <elided>
      const lo_c: f32[] = 0.0
      const wrong: f32[8] = <elided>
      [c: f32[1,8,5,5]] = Conv(x, w)
      [a: f32[1,8,5,5]] = Add(c, b)
      [z: f32[1,8,5,5]] = Clip(a, lo_c, _)
      [c2: f32[1,8,5,8]] = Conv(x, w)
      [q: f32[1,8,5,8]] = Add(c2, wrong)
    }"""
    assert marked(text) == ["a", "z"]


def test_activation_needs_constant_parameters():
    text = """graph(x: f32[4,8], w: f32[8,16], hi: f32[]) -> [z: f32[4,16]] {
      [m: f32[4,16]] = Gemm(x, w)
      [z: f32[4,16]] = Clip(m, _, hi)
    }"""
    assert marked(text) == []


@pytest.mark.parametrize("body, expected", [
    ("[r: f32[4,16]] = Sigmoid(m)\n [z: f32[4,16]] = Add(r, b)", ["r"]),       # a bias after the activation
    ("[r: f32[4,16]] = Tanh(m)\n [z: f32[4,16]] = LeakyRelu(r)", ["r"]),       # a second activation
    ("[r: f32[4,16]] = Add(m, b)\n [z: f32[4,16]] = Add(r, b)", ["r"]),        # a second bias
    ("[r: f32[4,16]] = Add(m, y)\n [z: f32[4,16]] = Relu(r)", []),             # a residual, not a bias
    ("[r: f32[4,16]] = Relu(m)\n [z: f32[4,16]] = Add(m, r)", []),             # m has two users
    ("[r: f32[4,16]] = Add(m, b)\n [z: f32[4,16]] = Mul(r, r)", ["r"]),        # Mul is no epilogue
])
def test_epilogue_order_and_single_use(body, expected):
    text = f"""graph(x: f32[4,8], w: f32[8,16], y: f32[4,16]) -> [z: f32[4,16]] {{
      const b: f32[16] = <elided>
      [m: f32[4,16]] = MatMul(x, w)
      {body}
    }}"""
    assert marked(text, epilogues_yield_to_kernels=False) == expected


def test_an_epilogue_feeding_a_fusable_node_is_left_to_the_kernel():
    text = """graph(x: f32[4,8], w: f32[8,16]) -> [z: f32[4,16], t: f32[16,4]] {
      const b: f32[16] = <elided>
      [m: f32[4,16]] = MatMul(x, w)
      [a: f32[4,16]] = Add(m, b)
      [z: f32[4,16]] = Erf(a)
      [m2: f32[4,16]] = MatMul(x, w)
      [a2: f32[4,16]] = Add(m2, b)
      [t: f32[16,4]] = Transpose(a2) {perm=[1, 0]}
    }"""
    assert marked(text) == ["a2"]                 # Erf fuses the first bias; Transpose cannot


def test_heavy_output_that_is_a_graph_output_keeps_its_consumers():
    text = """graph(x: f32[4,8], w: f32[8,16]) -> [m: f32[4,16], z: f32[4,16]] {
      [m: f32[4,16]] = MatMul(x, w)
      [z: f32[4,16]] = Relu(m)
    }"""
    assert marked(text) == []


def test_option_turns_the_pass_off():
    text = """graph(x: f32[4,8], w: f32[8,16]) -> [z: f32[4,16]] {
      [m: f32[4,16]] = MatMul(x, w)
      [z: f32[4,16]] = Relu(m)
    }"""
    assert marked(text) == ["z"]
    assert marked(text, fuse_epilogues=False) == []


def test_tokenizer_leaves_the_epilogue_to_the_heavy_op():
    text = """graph(x: f32[4,8], w: f32[8,16]) -> [y: f32[4,16]] {
      const b: f32[16] = <elided>
      [m: f32[4,16]] = MatMul(x, w)
      [a: f32[4,16]] = Add(m, b)
      [r: f32[4,16]] = Relu(a)
      [e: f32[4,16]] = Exp(r)
      [y: f32[4,16]] = Mul(e, r)
    }"""
    g = parse_graph(text, elided="zeros", infer=False)
    options = {"epilogues_yield_to_kernels": False}
    g = tokenize_snippets(mark_skipped_by_plugin(g, options), options)
    assert [n.op for n in g.nodes] == ["MatMul", "Add", "Relu", "Subgraph"]
    assert [n.op for n in g.nodes[3].attrs["body"].nodes] == ["Exp", "Mul"]
    g = tokenize_snippets(mark_skipped_by_plugin(parse_graph(text, elided="zeros", infer=False), {}), {})
    assert [n.op for n in g.nodes] == ["MatMul", "Subgraph"]     # by default the kernel takes the epilogue
    assert [n.op for n in g.nodes[1].attrs["body"].nodes] == ["Add", "Relu", "Exp", "Mul"]


def test_an_epilogue_read_by_a_kernel_and_another_node_stays_with_the_heavy_op():
    """A squeeze-excitation block reads the activation twice: a pooling (no snippet) and the gate's Mul.
    The result is stored for the pooling anyway, so the convolution computes it in its store."""
    text = """graph(x: f32[1,8,4,4], w: f32[8,8,3,3], s: f32[1,8,1,1]) -> [y: f32[1,8,4,4], p: f32[1,8,1,1]] {
      [c: f32[1,8,4,4]] = Conv(x, w) {pads=[1, 1, 1, 1]}
      [r: f32[1,8,4,4]] = Relu(c)
      [p: f32[1,8,1,1]] = GlobalAveragePool(r)
      [y: f32[1,8,4,4]] = Mul(r, s)
    }"""
    assert marked(text) == ["r"]
