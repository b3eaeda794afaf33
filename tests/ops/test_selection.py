"""Selection ops (Compress, NonZero, TopK, OneHot, Trilu, ReverseSequence, Unique): inference on IR
text (data-dependent sizes, errors) and reference kernels against hand-computed results and loops."""
import itertools

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from op_cases import i64, output_types, run


INPUTS = "x: f32[B,S,384], s4: f32[2,3,4], n: i64[m], ids: i64[B,S], cond: bool[m]"


@pytest.mark.parametrize("body, expected", [
    # selections
    ("const c: bool[3] = [true, false, true]\n[y] = Compress(s4, c) {axis=1}", "f32[2,2,4]"),
    ("[y] = Compress(x, cond)", "f32[?]"),
    ("[y] = Compress(x, cond) {axis=2}", "f32[B,S,?]"),
    ("[y] = NonZero(x)", "i64[3,?]"),
    ("const kk: i64[1] = [5]\n[y, i] = TopK(x, kk)", "f32[B,S,5]; i64[B,S,5]"),
    ("[y, i] = TopK(x, n) {axis=0}", "f32[?,S,384]; i64[?,S,384]"),
    ("const dd: i64[] = 10\nconst v: f32[2] = [0.0, 1.0]\n[y] = OneHot(ids, dd, v) {axis=1}", "f32[B,10,S]"),
    ("const kk: i64[] = 1\n[y] = Trilu(x, kk)", "f32[B,S,384]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("const kk: i64[1] = [5]\n[y, i] = TopK(s4, kk)", "K=5 is out of range"),
    ("[y] = Compress(x, ids)", "condition must be bool"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


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


# ---- Unique ------------------------------------------------------------------------------------------------
UNIQUE_INPUTS = "x: f32[B,S,4], i: i32[5]"


@pytest.mark.parametrize("body, expected", [
    ("[y, first, inverse, counts] = Unique(x)", "f32[?]; i64[?]; i64[?]; i64[?]"),
    ("[y, first, inverse, counts] = Unique(i)", "i32[?]; i64[?]; i64[5]; i64[?]"),
    ("[y, first, inverse] = Unique(x) {axis=-1, sorted=0}", "f32[B,S,?]; i64[?]; i64[4]"),
    ("const c: i64[5] = [3, 1, 3, 2, 1]\n[y, first, inverse, counts] = Unique(c)", "i64[3]; i64[3]; i64[5]; i64[3]"),
])
def test_unique_inference(body, expected):
    assert output_types(body, UNIQUE_INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = Unique(x) {axis=3}", "axis 3 is out of range"),
])
def test_unique_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, UNIQUE_INPUTS)


def test_unique_flattened_sorted_and_in_order_of_appearance():
    x = np.array([2, 1, 1, 3, 4, 3], np.int64)
    y, first, inverse, counts = run("Unique", x, outputs=4, sorted=0)
    assert (y.tolist(), first.tolist(), inverse.tolist(), counts.tolist()) == \
        ([2, 1, 3, 4], [0, 1, 3, 4], [0, 1, 1, 2, 3, 2], [1, 2, 2, 1])
    y, first, inverse, counts = run("Unique", np.array([[1, 3], [2, 3]], np.float32), outputs=4)
    assert (y.tolist(), first.tolist(), inverse.tolist(), counts.tolist()) == \
        ([1, 2, 3], [0, 2, 1], [0, 2, 1, 2], [1, 1, 2])


@pytest.mark.parametrize("sort", [0, 1])
def test_unique_slices_along_an_axis(sort):
    x = np.array([[[1, 1], [0, 1], [2, 1], [0, 1]]] * 2, np.float32)  # [2, 4, 2]; slices along axis 1
    y, first, inverse, counts = run("Unique", x, outputs=4, axis=-2, sorted=sort)
    # distinct slices: [1, 1] first at 0, [0, 1] at 1 (and 3), [2, 1] at 2
    order = [1, 0, 2] if sort else [0, 1, 2]
    np.testing.assert_array_equal(y, x[:, order])
    assert first.tolist() == order
    np.testing.assert_array_equal(y[:, inverse], x)  # every slice maps back to its value
    assert counts.tolist() == [[1, 2, 1][o] for o in order]


def test_unique_of_bfloat16_sorts_by_value():
    import ml_dtypes
    x = np.array([3.5, -1, 3.5, 0.25], ml_dtypes.bfloat16)
    y, counts = (run("Unique", x, outputs=4)[k] for k in (0, 3))
    assert y.dtype == x.dtype and y.astype(np.float32).tolist() == [-1, 0.25, 3.5] and counts.tolist() == [1, 1, 2]


def test_kernel_errors_name_the_node():
    with pytest.raises(OpError, match="ReverseSequence node .*sequence_lens"):
        run("ReverseSequence", np.zeros((2, 2)), i64(3, 1))
