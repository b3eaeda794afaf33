"""Data-movement ops: inference on IR text (dynamic dims, compile-time index inputs, errors) and reference
kernels against hand-computed results or independent NumPy/loop formulations."""
import itertools

import numpy as np
import pytest

import snipjit.ops.movement  # noqa: F401  (registers the ops)
from snipjit import parse_graph
from snipjit.ops import OpError
from snipjit.ops.common import evaluate

INPUTS = ("x: f32[B,S,384], h: f32[B,12,32], s4: f32[2,3,4], k: i64[3], n: i64[m], ids: i64[B,S], "
          "w: f32[V,384], u: f32[*], im: f32[N,8,H,W], d: f32[N,C,6,?], cond: bool[m]")


def types(body, inputs=INPUTS):
    """The output types of the last node of `body`, which the graph returns."""
    outs = body.strip().splitlines()[-1].split("]")[0].lstrip("[")
    g = parse_graph(f"graph({inputs}) -> [{outs}] {{\n{body}\n}}")
    return "; ".join(str(v.type) for v in g.outputs)


def run(op, *inputs, outputs=1, **attrs):
    res = evaluate(op, inputs, attrs, outputs=outputs)
    return res[0] if outputs == 1 else res


def i64(*v):
    return np.array(v, dtype=np.int64)


# ---- inference -----------------------------------------------------------------------------------
@pytest.mark.parametrize("body, expected", [
    # Reshape: 0 copies (named) dims, -1 cancels named dims, unknown shape keeps the rank
    ("const t: i64[4] = [0, 0, 12, 32]\n[y] = Reshape(x, t)", "f32[B,S,12,32]"),
    ("const t: i64[2] = [0, -1]\n[y] = Reshape(h, t)", "f32[B,384]"),
    ("const t: i64[3] = [-1, 12, 32]\n[y] = Reshape(h, t)", "f32[B,12,32]"),
    ("const t: i64[2] = [0, -1]\n[y] = Reshape(x, t)", "f32[B,?]"),
    ("const t: i64[2] = [-1, 6]\n[y] = Reshape(s4, t)", "f32[4,6]"),
    ("[y] = Reshape(x, k)", "f32[?,?,?]"),
    ("[y] = Reshape(x, n)", "f32[*]"),
    ("const t: i64[2] = [12, 2]\n[y] = Reshape(s4, t) {allowzero=1}", "f32[12,2]"),
    # Transpose / Flatten / Squeeze / Unsqueeze / Identity
    ("[y] = Transpose(x) {perm=[1, 0, 2]}", "f32[S,B,384]"),
    ("[y] = Transpose(x)", "f32[384,S,B]"),
    ("[y] = Transpose(u) {perm=[1, 0]}", "f32[?,?]"),
    ("[y] = Flatten(h)", "f32[B,384]"),
    ("[y] = Flatten(x) {axis=2}", "f32[?,384]"),
    ("[y] = Flatten(s4) {axis=-1}", "f32[6,4]"),
    ("[y] = Flatten(s4) {axis=0}", "f32[1,24]"),
    ("const a: i64[2] = [0, -1]\n[y] = Unsqueeze(x, a)", "f32[1,B,S,384,1]"),
    ("[y] = Unsqueeze(x, k)", "f32[?,?,?,?,?,?]"),
    ("const a: i64[1] = [0]\n[t] = Unsqueeze(x, a)\n[y] = Squeeze(t, a)", "f32[B,S,384]"),
    ("const t: i64[4] = [1, 24, 1, 1]\n[r] = Reshape(s4, t)\n[y] = Squeeze(r)", "f32[24]"),
    ("[y] = Squeeze(x)", "f32[*]"),
    ("[y] = Identity(x)", "f32[B,S,384]"),
    # Concat sums static sizes along the axis and merges the others
    ("[y] = Concat(x, x) {axis=-1}", "f32[B,S,768]"),
    ("[y] = Concat(x, x) {axis=1}", "f32[B,?,384]"),
    ("[y] = Concat(s4, s4, s4) {axis=0}", "f32[6,3,4]"),
    # Split: num_outputs (last chunk smaller), constant split sizes, unknown sizes
    ("[a, b, c] = Split(x) {axis=2, num_outputs=3}", "f32[B,S,128]; f32[B,S,128]; f32[B,S,128]"),
    ("[a, b] = Split(s4) {axis=1, num_outputs=2}", "f32[2,2,4]; f32[2,1,4]"),
    ("const p: i64[2] = [1, 3]\n[a, b] = Split(s4, p) {axis=2}", "f32[2,3,1]; f32[2,3,3]"),
    ("[a, b] = Split(x, n)", "f32[?,S,384]; f32[?,S,384]"),
    ("[a, b] = Split(x)", "f32[?,S,384]; f32[?,S,384]"),
    # Slice: whole-axis slices keep named dims, partial ones on dynamic dims give ?
    ("const s: i64[1] = [0]\nconst e: i64[1] = [9223372036854775807]\nconst a: i64[1] = [1]\n"
     "[y] = Slice(x, s, e, a)", "f32[B,S,384]"),
    ("const s: i64[2] = [1, 10]\nconst e: i64[2] = [3, -10]\nconst a: i64[2] = [1, 2]\n"
     "[y] = Slice(x, s, e, a)", "f32[B,?,364]"),
    ("const s: i64[1] = [-1]\nconst e: i64[1] = [-9223372036854775807]\nconst a: i64[1] = [1]\n"
     "const st: i64[1] = [-1]\n[y] = Slice(x, s, e, a, st)", "f32[B,S,384]"),
    ("const s: i64[1] = [100]\nconst e: i64[1] = [-100]\nconst a: i64[1] = [2]\nconst st: i64[1] = [-3]\n"
     "[y] = Slice(s4, s, e, a, st)", "f32[2,3,2]"),
    ("const a: i64[1] = [1]\n[y] = Slice(x, k, k, a)", "f32[B,?,384]"),
    ("[y] = Slice(x, k, k)", "f32[?,?,?]"),
    # Gather family
    ("[y] = Gather(w, ids)", "f32[B,S,384]"),
    ("const i: i64[] = 0\n[y] = Gather(x, i) {axis=1}", "f32[B,384]"),
    ("const i: i64[2,1,1] = [0, 1]\n[y] = GatherElements(x, i) {axis=1}", "f32[2,1,1]"),
    ("const i: i64[5,1] = [0, 1, 0, 1, 1]\n[y] = GatherND(s4, i)", "f32[5,3,4]"),
    ("const i: i64[2,1,2] = [0, 1, 2, 0]\n[y] = GatherND(s4, i) {batch_dims=1}", "f32[2,1]"),
    ("[y] = ScatterND(x, ids, x)", "f32[B,S,384]"),
    # Expand / Tile / Pad
    ("const t: i64[4] = [7, 1, 1, 384]\n[y] = Expand(x, t)", "f32[7,B,S,384]"),
    ("[y] = Expand(x, k)", "f32[?,?,384]"),
    ("const r: i64[3] = [1, 2, 3]\n[y] = Tile(x, r)", "f32[B,?,1152]"),
    ("const p: i64[6] = [0, 0, 1, 0, 0, 2]\n[y] = Pad(x, p)", "f32[B,S,387]"),
    ("const p: i64[2] = [1, -1]\nconst a: i64[1] = [-1]\n[y] = Pad(s4, p, _, a) {mode=\"edge\"}", "f32[2,3,4]"),
    ("[y] = Pad(x, k)", "f32[?,?,?]"),
    # block moves
    ("[y] = DepthToSpace(im) {blocksize=2}", "f32[N,2,?,?]"),
    ("[y] = SpaceToDepth(d) {blocksize=2, mode=\"CRD\"}", "f32[N,?,3,?]"),
    # selections
    ("const c: bool[3] = [true, false, true]\n[y] = Compress(s4, c) {axis=1}", "f32[2,2,4]"),
    ("[y] = Compress(x, cond)", "f32[?]"),
    ("[y] = Compress(x, cond) {axis=2}", "f32[B,S,?]"),
    ("[y] = NonZero(x)", "i64[3,?]"),
    ("const kk: i64[1] = [5]\n[y, i] = TopK(x, kk)", "f32[B,S,5]; i64[B,S,5]"),
    ("[y, i] = TopK(x, n) {axis=0}", "f32[?,S,384]; i64[?,S,384]"),
    ("const dd: i64[] = 10\nconst v: f32[2] = [0.0, 1.0]\n[y] = OneHot(ids, dd, v) {axis=1}", "f32[B,10,S]"),
    ("const kk: i64[] = 1\n[y] = Trilu(x, kk)", "f32[B,S,384]"),
    ("[y, m] = Dropout(x)", "f32[B,S,384]; bool[B,S,384]"),
    # Resize: constant scales/sizes give static dims where the input dim is static
    ("const sc: f32[4] = [1.0, 1.0, 2.0, 0.5]\n[y] = Resize(d, _, sc)", "f32[N,C,12,?]"),
    ("const sz: i64[2] = [10, 20]\n[y] = Resize(im, _, _, sz) {axes=[2, 3]}", "f32[N,8,10,20]"),
    ("const sz: i64[2] = [5, 4]\n[y] = Resize(s4, _, _, sz) {axes=[1, 2], keep_aspect_ratio_policy=\"not_larger\"}",
     "f32[2,3,4]"),
    ("[y] = Resize(im, _, _, k)", "f32[?,?,?,?]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert types(body) == expected


@pytest.mark.parametrize("body, message", [
    ("const t: i64[2] = [-1, -1]\n[y] = Reshape(x, t)", "more than one -1"),
    ("const t: i64[2] = [5, 5]\n[y] = Reshape(s4, t)", r"cannot reshape \[2, 3, 4\] \(24 elements\)"),
    ("const t: i64[2] = [-1, 5]\n[y] = Reshape(s4, t)", "cannot reshape 24 elements into a multiple of 5"),
    ("const t: i64[4] = [0, 0, 0, 0]\n[y] = Reshape(s4, t)", "copies dimension 3"),
    ("const t: i64[2] = [0, -1]\n[y] = Reshape(s4, t) {allowzero=1}", "both 0 and -1"),
    ("[y] = Transpose(x) {perm=[0, 0, 1]}", "not a permutation"),
    ("[y] = Concat(x, h) {axis=0}", r"input sizes along axis 2 \(not the concat axis 0\) differ: \[32, 384\]"),
    ("[y] = Concat(x, ids) {axis=0}", "dtype i64"),
    ("[y] = Concat(x, w) {axis=0}", "different ranks"),
    ("[a, b] = Split(s4) {num_outputs=3}", "num_outputs=3 but the node has 2 outputs"),
    ("[a, b] = Split(s4) {axis=1}", "does not split evenly"),
    ("const p: i64[2] = [1, 2]\n[a, b] = Split(s4, p)", "sums to 3 but the axis has size 2"),
    ("const s: i64[1] = [0]\nconst st: i64[1] = [0]\n[y] = Slice(s4, s, s, _, st)", "steps cannot be 0"),
    ("const a: i64[1] = [3]\n[y] = Squeeze(s4, a)", "axes 3 is out of range"),
    ("const a: i64[1] = [1]\n[y] = Squeeze(s4, a)", "cannot squeeze axis 1 of size 3"),
    ("const a: i64[2] = [1, 1]\n[y] = Unsqueeze(s4, a)", "repeat an axis"),
    ("[y] = Flatten(s4) {axis=4}", "out of range"),
    ("[y] = Gather(w, x)", "indices must be an integer tensor"),
    ("const r: i64[2] = [1, 2]\n[y] = Tile(s4, r)", "one non-negative count per axis"),
    ("const p: i64[4] = [1, 1, 1, 1]\n[y] = Pad(s4, p)", "6 are needed"),
    ("const p: i64[6] = [1, 1, 1, 1, 1, 1]\n[y] = Pad(s4, p) {mode=\"mirror\"}", "must be one of"),
    ("[y] = DepthToSpace(im) {blocksize=3}", "not divisible by blocksize"),
    ("[y] = DepthToSpace(x) {blocksize=2}", "rank 4"),
    ("const kk: i64[1] = [5]\n[y, i] = TopK(s4, kk)", "K=5 is out of range"),
    ("[y] = Resize(s4)", "exactly one of scales and sizes"),
    ("const sc: f32[3] = [1.0, 1.0, 2.0]\n[y] = Resize(s4, _, sc) {mode=\"bicubic\"}", "must be one of"),
    ("const sc: f32[2] = [1.0, 2.0]\n[y] = Resize(s4, _, sc)", "2 values for 3 axes"),
    ("[y] = ScatterElements(x, ids, w)", "indices have rank 2 but data has rank 3"),
    ("const i: i64[2,2] = [0, 0, 1, 1]\n[y] = ScatterND(x, i, h)",
     r"updates have shape \['B', 12, 32\], expected \[2, 384\]"),
    ("const i: i64[3,1,2] = [0, 1, 2, 0, 1, 1]\n[y] = GatherND(s4, i) {batch_dims=1}",
     r"batch dims of data and indices differ: \[2, 3\]"),
    ("[y] = Compress(x, ids)", "condition must be bool"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body)


# ---- reference kernels ---------------------------------------------------------------------------------
def test_reshape_zero_and_minus_one():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run("Reshape", x, i64(0, -1)), x.reshape(2, 12))
    assert run("Reshape", np.zeros((0, 3), np.float32), i64(3, 0), allowzero=1).shape == (3, 0)
    assert run("Reshape", np.zeros((2, 0), np.float32), i64(0, 0)).shape == (2, 0)
    y = run("Reshape", x, i64(24))
    y[0] = 100                          # outputs never alias inputs
    assert x[0, 0, 0] == 0


def test_transpose_and_flatten():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    y = run("Transpose", x, perm=[2, 0, 1])
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(y, np.moveaxis(x, 2, 0))
    np.testing.assert_array_equal(run("Transpose", x), x.T)
    assert run("Flatten", x, axis=-2).shape == (2, 12)


def test_squeeze_unsqueeze():
    x = np.zeros((1, 3, 1), np.int32)
    assert run("Squeeze", x).shape == (3,)
    assert run("Squeeze", x, i64(-1)).shape == (1, 3)
    assert run("Unsqueeze", x, i64(4, 0)).shape == (1, 1, 3, 1, 1)
    with pytest.raises(OpError, match="cannot squeeze axis 1 of size 3"):
        run("Squeeze", x, i64(1))


def test_concat_and_split():
    a, b = np.ones((2, 1), np.int64), np.zeros((2, 3), np.int64)
    np.testing.assert_array_equal(run("Concat", a, b, axis=-1), [[1, 0, 0, 0]] * 2)
    x = np.arange(10)
    parts = run("Split", x, outputs=4, num_outputs=4)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    parts = run("Split", x, i64(2, 0, 8), outputs=3)
    assert [p.tolist() for p in parts] == [[0, 1], [], [2, 3, 4, 5, 6, 7, 8, 9]]
    with pytest.raises(OpError, match="cannot be split into 4 chunks"):
        run("Split", np.arange(5), outputs=4, num_outputs=4)


@pytest.mark.parametrize("start, end, step, expected", [
    (2, 5, 1, [2, 3, 4]),
    (-3, 100, 1, [7, 8, 9]),
    (-100, 3, 1, [0, 1, 2]),
    (8, 2, -2, [8, 6, 4]),
    (100, -100, -3, [9, 6, 3, 0]),
    (-100, -2**63 + 1, -1, [0]),           # start clamps to 0 (not to "before 0") for negative steps
    (5, 5, 1, []),
    (3, 7, -1, []),
])
def test_slice_clamping(start, end, step, expected):
    x = np.arange(10, dtype=np.float32)
    assert run("Slice", x, i64(start), i64(end), i64(0), i64(step)).tolist() == expected


def test_slice_axes_subset():
    x = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(run("Slice", x, i64(1, -1), i64(3, 0), i64(-1, 1), i64(1, -1)), x[:, 2:0:-1, 1:3])


def test_gather_negative_indices_and_range_errors():
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(run("Gather", w, i64(-1, 0)), w[[3, 0]])
    np.testing.assert_array_equal(run("Gather", w, np.array([[2]], np.int32), axis=1), w[:, [[2]]])
    with pytest.raises(OpError, match="indices value 4 is out of range for a dimension of size 4"):
        run("Gather", w, i64(4))


def test_gather_and_scatter_elements():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[2, -1], [0, 1]], np.int64)
    got = run("GatherElements", data, idx, axis=1)
    assert got.tolist() == [[data[0, 2], data[0, 3]], [data[1, 0], data[1, 1]]]
    upd = np.array([[10, 20], [30, 40]], np.float32)
    got = run("ScatterElements", data, np.array([[1, 1], [0, 2]], np.int64), upd, axis=0, reduction="add")
    expected = data.copy()
    for (i, j), u in zip([(1, 0), (1, 1), (0, 0), (2, 1)], upd.reshape(-1)):
        expected[i, j] += u
    np.testing.assert_array_equal(got, expected)
    got = run("ScatterElements", data, np.array([[0, 0]], np.int64), np.array([[5, 7]], np.float32),
              axis=1, reduction="max")
    assert got[0].tolist() == [7, 1, 2, 3]


def test_gather_nd_and_scatter_nd():
    data = np.arange(24).reshape(2, 3, 4)
    assert run("GatherND", data, np.array([[1, 2, 3], [0, 0, -1]], np.int64)).tolist() == [23, 3]
    np.testing.assert_array_equal(run("GatherND", data, np.array([[1], [0]], np.int64)), data[[1, 0]])
    got = run("GatherND", data, np.array([[[2]], [[0]]], np.int64), batch_dims=1)
    np.testing.assert_array_equal(got, np.stack([data[0, 2:3], data[1, 0:1]]))
    upd = np.full((2, 4), 2)
    got = run("ScatterND", data, np.array([[0, 1], [0, 1]], np.int64), upd, reduction="mul")
    expected = data.copy()
    expected[0, 1] *= 4
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(OpError, match="updates have shape"):
        run("ScatterND", data, np.array([[0, 1]], np.int64), upd)


def test_expand_tile():
    x = np.array([[1], [2]], np.int8)
    np.testing.assert_array_equal(run("Expand", x, i64(2, 1, 3)), np.broadcast_to(x, (2, 2, 3)))
    np.testing.assert_array_equal(run("Expand", x, i64(1)), x)   # a target dim 1 keeps the input's
    with pytest.raises(OpError, match="do not broadcast"):
        run("Expand", x, i64(3, 3))
    np.testing.assert_array_equal(run("Tile", x, i64(2, 3)), [[1, 1, 1], [2, 2, 2]] * 2)


@pytest.mark.parametrize("mode, expected", [
    ("constant", [9, 9, 1, 2, 3, 9]),
    ("reflect", [3, 2, 1, 2, 3, 2]),
    ("edge", [1, 1, 1, 2, 3, 3]),
    ("wrap", [2, 3, 1, 2, 3, 1]),
])
def test_pad_modes(mode, expected):
    x = np.array([1, 2, 3], np.float32)
    value = np.array(9, np.float32)
    assert run("Pad", x, i64(2, 1), value, mode=mode).tolist() == expected


def test_pad_axes_and_negative_pads():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = run("Pad", x, i64(-1, 1), None, i64(-1))
    np.testing.assert_array_equal(got, np.pad(x[:, 1:], [(0, 0), (0, 1)]))


def test_depth_to_space_modes_against_loops():
    n, c, h, w, b = 1, 8, 2, 3, 2
    x = np.arange(n * c * h * w, dtype=np.float32).reshape(n, c, h, w)
    cc = c // (b * b)
    dcr, crd = np.zeros((n, cc, h * b, w * b), np.float32), np.zeros((n, cc, h * b, w * b), np.float32)
    for ch, i, j, y, z in itertools.product(range(cc), range(b), range(b), range(h), range(w)):
        dcr[0, ch, y * b + i, z * b + j] = x[0, (i * b + j) * cc + ch, y, z]
        crd[0, ch, y * b + i, z * b + j] = x[0, ch * b * b + i * b + j, y, z]
    np.testing.assert_array_equal(run("DepthToSpace", x, blocksize=b), dcr)
    np.testing.assert_array_equal(run("DepthToSpace", x, blocksize=b, mode="CRD"), crd)
    for mode in ("DCR", "CRD"):   # SpaceToDepth inverts DepthToSpace in the same mode
        y = run("DepthToSpace", x, blocksize=b, mode=mode)
        np.testing.assert_array_equal(run("SpaceToDepth", y, blocksize=b, mode=mode), x)


def test_topk_ties_prefer_lower_index():
    x = np.array([1, 3, 3, 2, 3, 1], np.float32)
    v, i = run("TopK", x, i64(4), outputs=2)
    assert v.tolist() == [3, 3, 3, 2] and i.tolist() == [1, 2, 4, 3]
    v, i = run("TopK", x, i64(3), outputs=2, largest=0)
    assert v.tolist() == [1, 1, 2] and i.tolist() == [0, 5, 3]
    m = np.array([[5, 1, 5], [0, 0, 7]], np.int32)
    v, i = run("TopK", m, i64(1), outputs=2, axis=0)
    assert v.tolist() == [[5, 1, 7]] and i.tolist() == [[0, 0, 1]]


def test_nonzero_compress_trilu():
    x = np.array([[0, 2], [3, 0]], np.float32)
    assert run("NonZero", x).tolist() == [[0, 1], [1, 0]]
    assert run("NonZero", np.array(5.0)).shape == (0, 1)
    assert run("Compress", x, np.array([False, True, True])).tolist() == [2, 3]
    assert run("Compress", x, np.array([True, False]), axis=1).tolist() == [[0], [3]]
    m = np.ones((2, 3, 3), np.int64)
    np.testing.assert_array_equal(run("Trilu", m, i64(1)), np.triu(m, 1))
    np.testing.assert_array_equal(run("Trilu", m, upper=0), np.tril(m))


def test_reverse_sequence_against_loop():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)     # [time, batch]
    lens = i64(4, 1, 2)
    expected = x.copy()
    for b, n in enumerate(lens):
        expected[:n, b] = x[:n, b][::-1]
    np.testing.assert_array_equal(run("ReverseSequence", x, lens), expected)
    np.testing.assert_array_equal(run("ReverseSequence", x.T.copy(), lens, batch_axis=0, time_axis=1), expected.T)


def test_one_hot():
    got = run("OneHot", i64(0, -1, 3, 7), np.array(4.0, np.float32), np.array([-1, 5], np.int32), axis=0)
    expected = np.full((4, 4), -1, np.int32)
    expected[0, 0] = expected[3, 1] = expected[3, 2] = 5
    np.testing.assert_array_equal(got, expected)


def test_dropout_inference_is_identity():
    x = np.arange(6, dtype=np.float16)
    y, mask = run("Dropout", x, np.array(0.3, np.float32), outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == bool and mask.all()


def test_resize_nearest_and_linear():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    y = run("Resize", x, None, np.array([1, 1, 2, 2], np.float32), coordinate_transformation_mode="asymmetric")
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3))
    # half_pixel linear downscale by 2 averages neighbour pairs
    row = np.array([[0, 2, 4, 8]], np.float32)
    y = run("Resize", row, None, np.array([1, 0.5], np.float32), mode="linear")
    assert y.tolist() == [[1, 6]]
    # align_corners: the ends map onto the ends
    y = run("Resize", np.array([0, 3], np.float32), None, None, i64(4), mode="linear",
            coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(y, [0, 1, 2, 3])


def test_resize_cubic_hand_computed():
    x = np.array([0, 1, 4, 9, 16, 25], np.float64)
    y = run("Resize", x, None, np.array([2], np.float32), mode="cubic", coordinate_transformation_mode="asymmetric")
    # output 5 samples x = 2.5: Keys weights (a=-0.75) -0.09375, 0.59375, 0.59375, -0.09375 on x[1..4]
    assert y.shape == (12,) and y[5] == pytest.approx(6.125)


def test_resize_integer_dtype_rounds_and_crop_extrapolates():
    x = np.array([0, 255], np.uint8)
    y = run("Resize", x, None, None, i64(3), mode="linear", coordinate_transformation_mode="align_corners")
    assert y.dtype == np.uint8 and y.tolist() == [0, 128, 255]
    y = run("Resize", np.array([1, 2, 3], np.float32), np.array([-1, 1], np.float32), None, i64(3),
            mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0)
    np.testing.assert_allclose(y, [-7, 1, 3])    # samples x = -2 (outside: extrapolated), 0 and 2


def test_kernel_errors_name_the_node():
    with pytest.raises(OpError, match="Gather node .*out of range"):
        run("Gather", np.zeros(3), i64(-4))
    with pytest.raises(OpError, match="ReverseSequence node .*sequence_lens"):
        run("ReverseSequence", np.zeros((2, 2)), i64(3, 1))
