"""Gather and scatter ops (Gather, GatherElements, GatherND, ScatterElements, ScatterND, TensorScatter):
inference on IR text (dynamic dims, errors) and reference kernels against hand-computed results."""
import itertools

import numpy as np
import pytest

import snipjit.ops  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from op_cases import i64, output_types, run


INPUTS = "x: f32[B,S,384], h: f32[B,12,32], s4: f32[2,3,4], ids: i64[B,S], w: f32[V,384]"


@pytest.mark.parametrize("body, expected", [
    # Gather family
    ("[y] = Gather(w, ids)", "f32[B,S,384]"),
    ("const i: i64[] = 0\n[y] = Gather(x, i) {axis=1}", "f32[B,384]"),
    ("const i: i64[2,1,1] = [0, 1]\n[y] = GatherElements(x, i) {axis=1}", "f32[2,1,1]"),
    ("const i: i64[5,1] = [0, 1, 0, 1, 1]\n[y] = GatherND(s4, i)", "f32[5,3,4]"),
    ("const i: i64[2,1,2] = [0, 1, 2, 0]\n[y] = GatherND(s4, i) {batch_dims=1}", "f32[2,1]"),
    ("[y] = ScatterND(x, ids, x)", "f32[B,S,384]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert output_types(body, INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = Gather(w, x)", "indices must be an integer tensor"),
    ("[y] = ScatterElements(x, ids, w)", "indices have rank 2 but data has rank 3"),
    ("const i: i64[2,2] = [0, 0, 1, 1]\n[y] = ScatterND(x, i, h)",
     r"updates have shape \['B', 12, 32\], expected \[2, 384\]"),
    ("const i: i64[3,1,2] = [0, 1, 2, 0, 1, 1]\n[y] = GatherND(s4, i) {batch_dims=1}",
     r"batch dims of data and indices differ: \[2, 3\]"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INPUTS)


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


def test_kernel_errors_name_the_node():
    with pytest.raises(OpError, match="Gather node .*out of range"):
        run("Gather", np.zeros(3), i64(-4))


# ---- TensorScatter -----------------------------------------------------------------------------------------
CACHE_INPUTS = "cache: f16[B,8,16,64], upd: f16[B,8,S,64], wi: i64[B], upd2: f16[B,4,S,64]"

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("body, expected", [
    ("[y] = TensorScatter(cache, upd, wi) {mode=\"circular\"}", "f16[B,8,16,64]"),
])
def test_tensor_scatter_inference(body, expected):
    assert output_types(body, CACHE_INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = TensorScatter(cache, upd) {axis=0}", "cannot be the batch axis"),
    ("[y] = TensorScatter(cache, upd2)", "dims 1 of past_cache and update differ"),
    ("[y] = TensorScatter(cache, upd) {mode=\"ring\"}", "mode='ring'"),
])
def test_tensor_scatter_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, CACHE_INPUTS)


@pytest.mark.parametrize("mode, start, expected", [
    ("linear", [0, 2], [[7, 8, 0, 0, 0], [0, 0, 7, 8, 0]]),
    ("circular", [4, 1], [[8, 0, 0, 0, 7], [0, 7, 8, 0, 0]])])
def test_tensor_scatter_writes_each_batch_row_at_its_index(mode, start, expected):
    past = np.zeros((2, 5, 1), np.int32)
    update = np.array([[[7], [8]], [[7], [8]]], np.int32)
    y = run("TensorScatter", past, update, np.array(start, np.int64), axis=1, mode=mode)
    assert y[..., 0].tolist() == expected and past.sum() == 0
    with pytest.raises(OpError, match="overruns"):
        run("TensorScatter", past, update, np.array([4, 0], np.int64), axis=1)


def test_tensor_scatter_default_axis_and_indices():
    past, update = randn(1, 2, 6, 3), randn(1, 2, 4, 3)
    y = run("TensorScatter", past, update)
    np.testing.assert_array_equal(y[:, :, :4], update)
    np.testing.assert_array_equal(y[:, :, 4:], past[:, :, 4:])
