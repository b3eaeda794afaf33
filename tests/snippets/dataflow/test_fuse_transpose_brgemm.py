"""FuseTransposeBrgemm: Transposes between body inputs and Brgemms, or between a Brgemm and a body output,
become layouts (the order of the dims in memory) when they keep the innermost dim, or give a B operand its K
as the innermost dim (then packed by a BrgemmCopyB); others stay."""
from snipjit import parse_graph
from snipjit.snippets.dataflow.convert_matmul_to_brgemm import ConvertMatMulToBrgemm
from snipjit.snippets.dataflow.fuse_transpose_brgemm import FuseTransposeBrgemm
from sample_graphs import head_split_block

HEADS = head_split_block(keys_in_rows=True)


def fused(text: str):
    body = parse_graph(text)
    ConvertMatMulToBrgemm().run(body)
    changed = FuseTransposeBrgemm().run(body)
    body.validate()
    return body, changed


def test_head_split_and_merge_transposes_become_layouts():
    body, changed = fused(HEADS)
    assert changed and [n.op for n in body.nodes] == ["BrgemmCopyB", "Brgemm", "Softmax", "Brgemm"]
    q, k, v = body.inputs
    assert q.type.shape == (2, 3, 9, 16) and v.type.shape == (2, 3, 9, 24) and k.type.shape == (2, 3, 16, 9)
    assert body.meta["layouts"] == [(0, 2, 1, 3), (0, 3, 1, 2), (0, 2, 1, 3)]
    assert body.outputs[0].name == "o" and body.outputs[0].type.shape == (2, 3, 9, 24)
    assert body.meta["output_layouts"] == [(0, 2, 1, 3)]
    # Kᵀ is K's rows: its K is the innermost dim in memory, so a BrgemmCopyB packs it for the product
    assert body.nodes[0].inputs[0] is k and body.nodes[1].inputs[1] is body.nodes[0].outputs[0]


def test_the_layout_is_the_inverse_of_the_permutation():
    body, _ = fused("""graph(x: f32[4,5,6,7], w: f32[5,6,7,3]) -> [y] {
     [xt] = Transpose(x) {perm = [1, 2, 0, 3]}
     [y] = MatMul(xt, w) }""")
    assert body.inputs[0].type.shape == (5, 6, 4, 7) and body.meta["layouts"] == [(2, 0, 1, 3), None]


def test_transposes_read_by_other_ops_or_not_around_brgemms_stay():
    body, changed = fused("""graph(q: f32[2,9,3,16], kt: f32[2,3,16,9]) -> [s, qh] {
     [qh] = Transpose(q) {perm = [0, 2, 1, 3]}
     [s] = MatMul(qh, kt) }""")
    assert not changed and [n.op for n in body.nodes] == ["Transpose", "Brgemm"]
    body, changed = fused("""graph(q: f32[2,3,16,9], kt: f32[2,3,16,9]) -> [s] {
     [qt] = Transpose(q) {perm = [0, 1, 3, 2]}
     [s] = MatMul(qt, kt) }""")
    assert not changed   # an A whose rows would not be contiguous
    body, changed = fused("""graph(x: f32[2,3,4]) -> [y] {
     [t] = Transpose(x) {perm = [1, 0, 2]}
     [y] = Exp(t) }""")
    assert not changed
