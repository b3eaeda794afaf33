"""The `copy` implementation of Concat: each input copied once into its slice of the planned output (the
strided-copy kernel for large slices, NumPy for small ones), along any axis and for any element size,
agreeing with the reference; what it cannot take goes to the reference, which names the problem."""
import numpy as np
import pytest

import snipjit
from snipjit import GraphBuilder
from snipjit.ir.graph import Node, TensorType, Value
from snipjit.runtime.implementations import strided_copy
from snipjit.runtime.implementations.concat import ConcatKernel
from snipjit.runtime.parallel.native_threads import get_native_pool
from snipjit.ops.registry import OpError

rng = np.random.default_rng(4)


def kernel(arrays, axis):
    out = np.concatenate(arrays, axis=axis)
    inputs = [Value(f"x{i}", TensorType.of(a.dtype, a.shape)) for i, a in enumerate(arrays)]
    node = Node("Concat", inputs, [Value("y", TensorType.of(out.dtype, out.shape))], {"axis": axis})
    return ConcatKernel(node), out


@pytest.mark.parametrize("shapes, axis, dtype", [
    ([(1, 56, 56, 64), (1, 56, 56, 32)], 3, np.float32),        # DenseNet's channel Concat: the kernel
    ([(2, 30, 40, 7), (2, 30, 40, 1), (2, 30, 40, 20)], -1, np.float32),
    ([(4, 3, 64, 70), (4, 5, 64, 70)], 1, np.float32),           # NCHW channels: rows of whole planes
    ([(3, 9000), (2, 9000)], 0, np.float32),                     # one row: NumPy
    ([(600, 40), (600, 0), (600, 3)], 1, np.int64),              # an empty input
    ([(300, 100), (300, 60)], 1, np.uint8),
    ([(5, 4), (5, 3)], 1, np.float16),                           # small: NumPy
])
def test_concat_into_its_output_matches_numpy(shapes, axis, dtype):
    arrays = [(rng.standard_normal(s) * 50).astype(dtype) for s in shapes]
    k, expected = kernel(arrays, axis)
    out = np.full_like(expected, 7)
    k.run_into(arrays, [out])
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(k(arrays)[0], expected)
    launch = k.bind([a.shape for a in arrays], {}, 1)
    out[...] = 0
    launch(arrays + [out])
    np.testing.assert_array_equal(out, expected)


def test_a_slice_copy_writes_only_its_slice_and_refuses_what_it_cannot_take():
    pool = get_native_pool()
    if pool is None:
        pytest.skip("no native pool")
    x = rng.standard_normal((64, 32, 40), dtype=np.float32)
    out = np.full((64, 32, 100), np.nan, np.float32)
    strided_copy.prepare_slice(x, out, 2, 50).run()
    np.testing.assert_array_equal(out[..., 50:90], x)
    assert np.isnan(out[..., :50]).all() and np.isnan(out[..., 90:]).all()
    assert strided_copy.prepare_slice(x, out, 2, 61) is None                    # past the end
    assert strided_copy.prepare_slice(x.astype(np.float64), out, 2, 0) is None  # another dtype
    assert strided_copy.prepare_slice(x[:1], out[:1], 2, 0) is None              # fewer rows than threads


def test_inputs_that_do_not_fit_are_left_to_the_reference():
    k, _ = kernel([np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)], 1)
    with pytest.raises(OpError, match="input 1 has shape"):
        k.run_into([np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32)], [np.zeros((2, 7), np.float32)])


def test_a_planned_concat_joins_the_native_run_of_its_producers():
    """A Concat along the rows (no channel slices for its producers to write) copies its inputs in a
    prepared native step, so it runs inside the request's native run of steps; one of a single row
    copies with NumPy (no rows to split), outside."""
    b = GraphBuilder()
    x = b.input("x", "f32", [1, 40, 40, 48])
    y = b.Relu(b.Concat(b.Sigmoid(x), b.Exp(x), axis=2))
    b.output(b.Tanh(b.Concat(y, b.Sigmoid(y), axis=1)), "y")
    cm = snipjit.compile(b.build())
    reference = snipjit.compile(b.build(), implementations={"reference"})
    xv = rng.standard_normal((1, 40, 40, 48), dtype=np.float32)
    np.testing.assert_allclose(cm.run({"x": xv})[0], reference.run({"x": xv})[0], rtol=1e-6, atol=1e-6)
    assert [s.kind for s in cm.plan if s.ops == ["Concat"]] == ["copy", "copy"]
    request = cm.create_request()
    request.run({"x": xv})
    bound = next(iter(request._bound.values()))
    segments = [call for call in bound.joined if call[0] == "segment"]
    # the first Concat (40 rows of 40 pixels) and the snippet after it; the second (one row) copies in NumPy
    assert [(call[4].ops, len(call[1].steps)) for call in segments] == [(["Concat"], 2)]
