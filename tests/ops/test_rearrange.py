"""Rearranging ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Transpose, DepthToSpace,
SpaceToDepth, Dropout): inference on IR text (dynamic dims, compile-time shape inputs, errors) and reference
kernels against hand-computed results or loop formulations."""
import itertools

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from op_cases import i64, output_types, run


INPUTS = ("x: f32[B,S,384], h: f32[B,12,32], s4: f32[2,3,4], k: i64[3], n: i64[m], u: f32[*], im: f32[N,8,H,W], "
          "d: f32[N,C,6,?]")


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
    # block moves
    ("[y] = DepthToSpace(im) {blocksize=2}", "f32[N,2,?,?]"),
    ("[y] = SpaceToDepth(d) {blocksize=2, mode=\"CRD\"}", "f32[N,?,3,?]"),
    ("[y, m] = Dropout(x)", "f32[B,S,384]; bool[B,S,384]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("const t: i64[2] = [-1, -1]\n[y] = Reshape(x, t)", "more than one -1"),
    ("const t: i64[2] = [5, 5]\n[y] = Reshape(s4, t)", r"cannot reshape \[2, 3, 4\] \(24 elements\)"),
    ("const t: i64[2] = [-1, 5]\n[y] = Reshape(s4, t)", "cannot reshape 24 elements into a multiple of 5"),
    ("const t: i64[4] = [0, 0, 0, 0]\n[y] = Reshape(s4, t)", "copies dimension 3"),
    ("const t: i64[2] = [0, -1]\n[y] = Reshape(s4, t) {allowzero=1}", "both 0 and -1"),
    ("[y] = Transpose(x) {perm=[0, 0, 1]}", "not a permutation"),
    ("const a: i64[1] = [3]\n[y] = Squeeze(s4, a)", "axes 3 is out of range"),
    ("const a: i64[1] = [1]\n[y] = Squeeze(s4, a)", "cannot squeeze axis 1 of size 3"),
    ("const a: i64[2] = [1, 1]\n[y] = Unsqueeze(s4, a)", "repeat an axis"),
    ("[y] = Flatten(s4) {axis=4}", "out of range"),
    ("[y] = DepthToSpace(im) {blocksize=3}", "not divisible by blocksize"),
    ("[y] = DepthToSpace(x) {blocksize=2}", "rank 4"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


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


def test_dropout_inference_is_identity():
    x = np.arange(6, dtype=np.float16)
    y, mask = run("Dropout", x, np.array(0.3, np.float32), outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == bool and mask.all()
