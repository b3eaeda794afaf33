"""Slicing ops (Concat, Split, Slice, Expand, Tile, Pad): inference on IR text (dynamic dims,
compile-time index inputs, errors) and reference kernels against hand-computed results and NumPy."""
import itertools

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from op_cases import i64, output_types, run


INPUTS = "x: f32[B,S,384], h: f32[B,12,32], s4: f32[2,3,4], k: i64[3], n: i64[m], ids: i64[B,S], w: f32[V,384]"


@pytest.mark.parametrize("body, expected", [
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
    # Expand / Tile / Pad
    ("const t: i64[4] = [7, 1, 1, 384]\n[y] = Expand(x, t)", "f32[7,B,S,384]"),
    ("[y] = Expand(x, k)", "f32[?,?,384]"),
    ("const r: i64[3] = [1, 2, 3]\n[y] = Tile(x, r)", "f32[B,?,1152]"),
    ("const p: i64[6] = [0, 0, 1, 0, 0, 2]\n[y] = Pad(x, p)", "f32[B,S,387]"),
    ("const p: i64[2] = [1, -1]\nconst a: i64[1] = [-1]\n[y] = Pad(s4, p, _, a) {mode=\"edge\"}", "f32[2,3,4]"),
    ("[y] = Pad(x, k)", "f32[?,?,?]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = Concat(x, h) {axis=0}", r"input sizes along axis 2 \(not the concat axis 0\) differ: \[32, 384\]"),
    ("[y] = Concat(x, ids) {axis=0}", "dtype i64"),
    ("[y] = Concat(x, w) {axis=0}", "different ranks"),
    ("[a, b] = Split(s4) {num_outputs=3}", "num_outputs=3 but the node has 2 outputs"),
    ("[a, b] = Split(s4) {axis=1}", "does not split evenly"),
    ("const p: i64[2] = [1, 2]\n[a, b] = Split(s4, p)", "sums to 3 but the axis has size 2"),
    ("const s: i64[1] = [0]\nconst st: i64[1] = [0]\n[y] = Slice(s4, s, s, _, st)", "steps cannot be 0"),
    ("const r: i64[2] = [1, 2]\n[y] = Tile(s4, r)", "one non-negative count per axis"),
    ("const p: i64[4] = [1, 1, 1, 1]\n[y] = Pad(s4, p)", "6 are needed"),
    ("const p: i64[6] = [1, 1, 1, 1, 1, 1]\n[y] = Pad(s4, p) {mode=\"mirror\"}", "must be one of"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


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
