"""Winograd F(m×m, 3×3) convolutions (transforms generated from the matrices, products on the GEMM
microkernel) against the ONNX reference Conv at every ISA level this host can execute: tiles of 2 and 4,
maps not a multiple of the tile, asymmetric pads, batches, bias, residual, activation, clamp, an output
that is a channel slice of a wider tensor; the tile choice; the weights' transform undone."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from snipjit.runtime.implementations import conv_launch, gemm_launch, winograd_launch
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.winograd import MATRICES

from test_conv_launch import ACTIVATIONS, reference

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


@pytest.mark.parametrize("tile", sorted(MATRICES))
def test_the_matrices_compute_a_correlation(tile):
    """Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A is the valid 3×3 correlation of the α×α tile d, exactly (in fractions)."""
    bt, g, at = (np.array(m, dtype=object) for m in MATRICES[tile])
    rng = np.random.default_rng(tile)
    d = np.array([[Fraction(int(v)) for v in row] for row in rng.integers(-9, 9, (tile + 2, tile + 2))], dtype=object)
    w = np.array([[Fraction(int(v)) for v in row] for row in rng.integers(-9, 9, (3, 3))], dtype=object)
    y = at.dot((g.dot(w).dot(g.T)) * (bt.dot(d).dot(bt.T))).dot(at.T)
    want = [[sum(d[r + i, s + j] * w[i, j] for i in range(3) for j in range(3)) for s in range(tile)]
            for r in range(tile)]
    assert (y == np.array(want, dtype=object)).all()


def check(rng, images, h, w, c, o, tile, pads=(1, 1, 1, 1), bias=False, residual=False, activation="",
          clamp=None, slice_of=0):
    x = rng.standard_normal((images, h, w, c), dtype=np.float32)
    weights = rng.standard_normal((o, c, 3, 3), dtype=np.float32)
    b = rng.standard_normal(o, dtype=np.float32) if bias else None
    geometry = conv_launch.ConvGeometry((3, 3), (1, 1), pads)
    want = reference(x, weights, b, geometry, 1)
    extra = rng.standard_normal(want.shape, dtype=np.float32) if residual else None
    want = ACTIVATIONS[activation](want if extra is None else want + extra)
    if clamp is not None:
        want = np.clip(want, *clamp)
    whole = np.full((*want.shape[:3], o + slice_of), np.nan, np.float32)
    out = whole[..., slice_of:]
    packed = winograd_launch.pack_winograd(weights, tile)
    launch = winograd_launch.prepare_winograd(x, packed, out, geometry, b, clamp, activation=activation,
                                              residual=extra)
    launch.run()
    # F(4x4, 3x3) multiplies its inputs by up to 5 and weights by 1/24...: larger rounding than the direct sum
    atol = (2e-5 if tile == 2 else 2e-4) * (9 * c) ** 0.5 * max(1.0, np.abs(want).max())
    np.testing.assert_allclose(out, want, rtol=0, atol=atol)
    assert np.isnan(whole[..., :slice_of]).all()


def lanes() -> int:
    return jit.host().level.f32_lanes


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("case", [
    dict(images=1, h=9, w=7, c=2, o=3, bias=True),
    dict(images=2, h=8, w=8, c=2, o=1, pads=(0, 1, 2, 0), clamp=(0.0, np.inf)),
    dict(images=1, h=13, w=10, c=4, o=5, residual=True, activation="silu", clamp=(-1.0, 2.0)),
    dict(images=1, h=3, w=3, c=2, o=2, pads=(1, 1, 1, 1), bias=True, slice_of=8),   # one tile, mostly padding
    dict(images=1, h=6, w=17, c=3, o=2, pads=(2, 0, 1, 2), slice_of=3),
])
def test_winograd_convolutions(level, tile, case):
    """Channels in vectors of the level (c and o count vectors)."""
    n = lanes()
    check(np.random.default_rng(len(str(case)) + tile), **{**case, "c": case["c"] * n, "o": case["o"] * n}, tile=tile)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(images=st.integers(1, 2), h=st.integers(1, 12), w=st.integers(1, 12), c=st.integers(1, 3), o=st.integers(1, 3),
       tile=st.sampled_from([2, 4]), top=st.integers(0, 2), left=st.integers(0, 2), bottom=st.integers(0, 2),
       right=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_random_winograd_geometries(level, images, h, w, c, o, tile, top, left, bottom, right, seed):
    if h + top + bottom < 3 or w + left + right < 3:
        return
    check(np.random.default_rng(seed), images, h, w, c * lanes(), o * lanes(), tile, (top, left, bottom, right),
          bias=bool(seed & 1), residual=bool(seed & 2), clamp=(0.0, np.inf) if seed & 4 else None)


def test_the_tile_follows_the_map_and_only_plain_3x3_windows_take_one():
    n = lanes()
    plain = conv_launch.ConvGeometry((3, 3))
    assert winograd_launch.choose_tile((2 * n, 2 * n, 3, 3), 1, plain, False, (56, 56)) == 4
    assert winograd_launch.choose_tile((2 * n, 2 * n, 3, 3), 1, plain, False, (14, 14)) == 2
    assert winograd_launch.choose_tile((2 * n, 2 * n, 3, 3), 1, plain, False, (3, 3)) == 0
    square, strided = (2 * n, 2 * n, 3, 3), conv_launch.ConvGeometry((3, 3), (2, 2))
    dilated = conv_launch.ConvGeometry((3, 3), dilations=(2, 2))
    for shape, groups, geometry, planar in [(square, 2, plain, False), (square, 1, strided, False),
                                            (square, 1, dilated, False),
                                            ((2 * n, 2 * n, 5, 5), 1, conv_launch.ConvGeometry((5, 5)), False),
                                            ((2 * n + 1, 2 * n, 3, 3), 1, plain, False),   # a lane tail
                                            ((2 * n, n, 3, 3), 1, plain, False),           # one vector in
                                            (square, 1, plain, True)]:                     # an NCHW image
        assert winograd_launch.choose_tile(shape, groups, geometry, planar, (56, 56)) == 0


@pytest.mark.parametrize("tile", [2, 4])
def test_the_weights_transform_is_undone(tile):
    w = np.random.default_rng(tile).standard_normal((3 * lanes(), 2 * lanes(), 3, 3), dtype=np.float32)
    np.testing.assert_allclose(winograd_launch.pack_winograd(w, tile).unpack(), w, rtol=0, atol=1e-5)


def test_shapes_that_do_not_fit_are_refused():
    n = lanes()
    packed = winograd_launch.pack_winograd(np.zeros((n, 2 * n, 3, 3), np.float32), 2)
    geometry = conv_launch.ConvGeometry((3, 3), pads=(1, 1, 1, 1))
    x = np.zeros((1, 6, 6, 2 * n), np.float32)
    with pytest.raises(ValueError, match="input channels"):
        winograd_launch.prepare_winograd(np.zeros((1, 6, 6, n), np.float32), packed, np.zeros((1, 6, 6, n), np.float32),
                                         geometry)
    with pytest.raises(ValueError, match="not"):
        winograd_launch.prepare_winograd(x, packed, np.zeros((1, 4, 4, n), np.float32), geometry)
    with pytest.raises(ValueError, match="bias"):
        winograd_launch.prepare_winograd(x, packed, np.zeros((1, 6, 6, n), np.float32), geometry,
                                         np.zeros(n + 1, np.float32))
