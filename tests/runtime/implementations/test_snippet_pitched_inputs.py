"""Snippet kernels read a marked input where a Concat assembled in place leaves it: a slice of a wider
tensor's last axis (rows of its channels farther apart than their length), at every ISA level the host
runs, on the LLVM and the C target, called directly, bound with the slice fixed, and bound with it changing."""
import shutil

import numpy as np
import pytest

import snipjit
from snipjit import GraphBuilder
from snipjit.runtime.implementations import gemm_launch
from snipjit.runtime.implementations.base import pitched_rows

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")

rng = np.random.default_rng(3)


def normalised_and_joined(channels: int):
    """z = Relu(x · s + t) per channel, and x joined with y along the channels: x is read by both."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 3, 5, channels])
    y = b.input("y", "f32", ["n", 3, 5, 2])
    scale = b.const(rng.standard_normal(channels).astype(np.float32))
    shift = b.const(rng.standard_normal(channels).astype(np.float32))
    b.output(b.Relu(b.Add(b.Mul(x, scale), shift)), "z")
    b.output(b.Concat(x, y, axis=3), "j")
    return b.build(), scale.data, shift.data


def expected(x, scale, shift):
    return np.maximum(x * scale + shift, 0)


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("channels, extra, start", [(13, 3, 0), (8, 16, 8), (37, 5, 2)])
def test_a_snippet_reads_a_slice_of_channels_where_it_is(level, target, channels, extra, start):
    if target == "c" and shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    graph, scale, shift = normalised_and_joined(channels)
    cm = snipjit.compile(graph, target=target)
    step = next(s for s in cm.plan if s.kind == "snippet")
    kernel = step.kernel
    assert kernel.pitched_inputs() == (0,)
    wide = rng.standard_normal((2, 3, 5, channels + extra)).astype(np.float32)
    x = wide[..., start:start + channels]
    assert not x.flags.c_contiguous and pitched_rows(x) == channels + extra
    want = expected(x, scale, shift)
    constants = [v.data for v in step.node.inputs[1:]]   # (the body's other inputs: scale and shift)

    out = np.full((2, 3, 5, channels), np.nan, np.float32)
    assert kernel.reads_in_place(0, x)
    kernel.run_into([x, *constants], [out])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)

    for fixed in ({0: x}, {}):   # the slice bound once (arena memory), or given at each call
        out = np.full((2, 3, 5, channels), np.nan, np.float32)
        n = 1 + len(constants)
        launch = kernel.bind([x.shape] + [c.shape for c in constants],
                             {**fixed, **dict(enumerate(constants, 1)), n: out}, 1)
        launch([x, *constants, out])
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
        assert launch.ptrs[0] == x.ctypes.data and launch.dims[kernel.rank] == channels + extra   # (no copy)
    contiguous = np.ascontiguousarray(wide[..., :channels])   # then a contiguous one through the same launch
    launch([contiguous, *constants, out])
    np.testing.assert_allclose(out, expected(contiguous, scale, shift), rtol=1e-6, atol=1e-6)


def test_pitched_rows():
    a = np.zeros((2, 4, 6, 10), np.float32)
    assert pitched_rows(a) == 10
    assert pitched_rows(a[..., 3:7]) == 10
    assert pitched_rows(a[:1, :, :, :5]) == 10
    assert pitched_rows(a[:, :, ::2, :5]) == 20      # every other pixel: rows still evenly spaced
    assert pitched_rows(a[:, ::2, :, :5]) is None     # rows of pixels skipped: not evenly spaced
    assert pitched_rows(a[:, :2, :, :5]) is None      # whole rows of pixels missing between images
    assert pitched_rows(a[..., ::2]) is None          # the channels themselves apart
    assert pitched_rows(a.transpose(0, 2, 1, 3)[..., :5]) is None
