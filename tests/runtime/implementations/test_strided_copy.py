"""The generated strided copy against NumPy: transposes, slices with steps, broadcasts, dtypes."""
import numpy as np
import pytest

import snipjit
from snipjit.runtime.implementations import strided_copy
from snipjit.runtime.parallel.native_threads import get_native_pool

pytestmark = pytest.mark.skipif(get_native_pool() is None, reason="no native pool on this platform")
rng = np.random.default_rng(0)


@pytest.mark.parametrize("make", [
    lambda: rng.standard_normal((1, 128, 12, 32), dtype=np.float32).transpose(0, 2, 1, 3),
    lambda: rng.standard_normal((1, 128, 12, 32), dtype=np.float32).transpose(0, 2, 3, 1),
    lambda: rng.standard_normal((64, 300), dtype=np.float32)[::-2, 7:290:3],
    lambda: np.broadcast_to(rng.standard_normal((1, 257), dtype=np.float32), (80, 257)),
    lambda: rng.integers(0, 100, (40, 30, 20), dtype=np.int64).transpose(2, 0, 1),
    lambda: (rng.standard_normal((2, 3, 40, 5, 60)) > 0)[:, :, ::2],                 # bool, 5 dims merged
    lambda: rng.standard_normal((70, 70, 8)).astype(np.float16)[:, ::-1],
])
def test_copies_equal_numpys(make):
    view = make()
    out = np.empty(view.shape, view.dtype)
    taken = strided_copy.copy_into(view, out)
    np.testing.assert_array_equal(out if taken else view, view)
    assert taken == (view.size >= strided_copy.MIN_ELEMENTS)


def test_views_it_cannot_take_are_refused():
    view = rng.standard_normal((20, 30, 40, 50), dtype=np.float32).transpose(3, 0, 2, 1)
    assert not strided_copy.copy_into(view, np.empty(view.shape, np.float64))             # dtype differs
    assert not strided_copy.copy_into(view, np.empty(view.shape[::-1], np.float32).T)     # out not dense
    five = rng.standard_normal((6, 7, 8, 9, 10), dtype=np.float32).transpose(4, 2, 0, 3, 1)
    assert not strided_copy.copy_into(five, np.empty(five.shape, np.float32))             # 5 dims remain


def test_collapse_merges_dims_that_step_as_one():
    assert strided_copy.collapse((2, 3, 4), (12, 4, 1)) == ([24], [1])
    assert strided_copy.collapse((4, 3, 2), (1, 8, 4)) == ([4, 6], [1, 4])
    assert strided_copy.collapse((1, 5, 1), (99, 2, 7)) == ([5], [2])


def test_movement_steps_prepare_their_copy_once_while_their_arrays_stay(monkeypatch):
    """A Transpose step prepares its copy from its first run's arrays and reruns it; a new feed array is
    prepared again. A Slice whose bounds are computed at run time never reuses a prepared copy."""
    import snipjit
    prepared = []
    real = strided_copy.prepare
    monkeypatch.setattr(strided_copy, "prepare", lambda view, out: prepared.append(out.shape) or real(view, out))
    cm = snipjit.compile(snipjit.parse_graph("""graph(x: f32[128,12,32], n: i64[1]) -> [y, z] {
  const zero: i64[1] = [0]
  const axis: i64[1] = [0]
  [t] = Transpose(x) {perm=[1,0,2]}
  [y] = Neg(t)
  [z] = Slice(x, zero, n, axis)
}"""))
    assert [s.kernel.binds for s in cm.plan if s.ops == ["Transpose"]] == [True]
    assert [s.kernel.binds for s in cm.plan if s.ops == ["Slice"]] == [False]
    req = cm.create_request()
    x = rng.standard_normal((128, 12, 32), dtype=np.float32)
    for rows in (128, 100, 128):
        y, z = req.run({"x": x, "n": np.array([rows])})
        np.testing.assert_array_equal(y, -x.transpose(1, 0, 2))
        np.testing.assert_array_equal(z, x[:rows])
    assert prepared.count((12, 128, 32)) == 1
    x[:] = rng.standard_normal((128, 12, 32), dtype=np.float32)   # in place: the same pointer
    np.testing.assert_array_equal(req.run({"x": x, "n": np.array([128])})[0], -x.transpose(1, 0, 2))
    other = rng.standard_normal((128, 12, 32), dtype=np.float32)
    np.testing.assert_array_equal(req.run({"x": other, "n": np.array([128])})[0], -other.transpose(1, 0, 2))
    assert prepared.count((12, 128, 32)) == 2


@pytest.mark.parametrize("shape", [(1, 56, 56, 4, 28), (2, 20, 21, 3, 17), (1, 9, 9, 16, 40), (1, 64, 64, 2, 2), (1, 8, 8, 64, 40)])
def test_transposes_of_the_last_two_axes_go_block_by_block(shape):
    """A channel shuffle on channels-last tensors: each pixel's rows × cols block transposed as one
    vector shuffle; a block too large for that takes the strided kernel."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    view = x.transpose(0, 1, 2, 4, 3)
    out = np.full(view.shape, np.nan, np.float32)
    launch = strided_copy.prepare(view, out)
    assert launch is not None
    launch.run()
    np.testing.assert_array_equal(out, view)
    blocked = shape[3] * shape[4] <= strided_copy.MAX_BLOCK
    assert (len(launch.dims) == 1) == blocked


def test_a_split_copies_each_part_once_into_its_output():
    """Split is a movement op of several outputs: each part is a view copied straight into its planned
    output, and its reference kernel still returns arrays of their own."""
    from snipjit.ops import get_op
    g = snipjit.parse_graph("""graph(x: f32[2,7,30]) -> [a, b, c] {
      const s: i64[3] = [8, 10, 12]
      [a, b, c] = Split(x, s) {axis = 2}
    }""")
    x = np.random.default_rng(3).standard_normal((2, 7, 30), dtype=np.float32)
    parts = snipjit.compile(g).run({"x": x})
    for part, (lo, hi) in zip(parts, ((0, 8), (8, 18), (18, 30))):
        np.testing.assert_array_equal(part, x[..., lo:hi])
    opdef = get_op("Split")
    node = g.nodes[0]
    views = opdef.view(opdef.context(node, with_values=False), x, node.inputs[1].data)
    assert all(np.shares_memory(v, x) for v in views)
    copies = opdef.reference(opdef.context(node, with_values=False), x, node.inputs[1].data)
    assert not any(np.shares_memory(c, x) for c in copies) and all(c.flags.c_contiguous for c in copies)


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.int64])
def test_dense_rows_of_every_length_copy_whole(dtype):
    """Rows whose source is contiguous copy as vectors, the last one overlapping (or, shorter than a vector,
    two overlapping narrower ones, then element by element): every length up to past two 64-byte vectors,
    into a slice of a wider output (a Concat's), the elements around each row's slice untouched."""
    size = np.dtype(dtype).itemsize
    for length in range(1, 2 * 64 // size + 3):
        rows = strided_copy.MIN_ELEMENTS // length + 2
        x = (rng.standard_normal((rows, length)) * 50).astype(dtype)
        wide = np.zeros((rows, length + 2), dtype)
        strided_copy.prepare_slice(x, wide, 1, 1).run()
        np.testing.assert_array_equal(wide[:, 1:1 + length], x, err_msg=f"length {length}")
        assert not wide[:, 0].any() and not wide[:, -1].any(), f"length {length} wrote outside its rows"
