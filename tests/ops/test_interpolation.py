"""The shared interpolation: Keys' cubic kernel against hand-computed weights and its defining properties,
and the two sampling ops that use it (Resize, GridSample) agreeing on a hand-computed cubic sample."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from snipjit.ops.interpolation import CUBIC_A, keys_cubic
from op_cases import run

TAPS = np.array([-1, 0, 1, 2])   # the four taps around a point t in [0, 1) past tap 0


@pytest.mark.parametrize("distance, weight", [
    # a = -0.75: near(t) = (1.25 t - 2.25) t^2 + 1, far(t) = ((-0.75 t + 3.75) t - 6) t + 3
    (0.0, 1.0), (0.5, 0.59375), (-0.5, 0.59375), (0.25, 0.87890625), (1.5, -0.09375), (-1.5, -0.09375),
    (1.25, -0.10546875), (1.0, 0.0), (-1.0, 0.0), (2.0, 0.0), (2.5, 0.0), (-7.0, 0.0)])
def test_keys_cubic_hand_computed(distance, weight):
    assert keys_cubic(np.array(distance), CUBIC_A) == pytest.approx(weight, abs=1e-15)


def test_keys_cubic_with_a_half_is_the_catmull_rom_weight():
    # a = -0.5 at t = 0.5: near = (1.5 * 0.5 - 2.5) * 0.25 + 1 = 0.5625, far(1.5) = -0.0625
    np.testing.assert_allclose(keys_cubic(np.array([0.5, 1.5]), -0.5), [0.5625, -0.0625])


@given(st.floats(0, 1, exclude_max=True), st.sampled_from([-0.5, -0.75, -1.0]))
def test_keys_cubic_weights_sum_to_one(t, a):
    assert keys_cubic(t - TAPS, a).sum() == pytest.approx(1.0, abs=1e-12)


@given(st.floats(0, 1, exclude_max=True), st.floats(-3, 3), st.floats(-3, 3), st.floats(-3, 3))
def test_keys_cubic_with_a_half_reproduces_quadratics(t, c0, c1, c2):
    def f(x):
        return c0 + c1 * x + c2 * x * x
    assert (keys_cubic(t - TAPS, -0.5) * f(TAPS)).sum() == pytest.approx(f(t), abs=1e-9)


def test_resize_and_grid_sample_read_the_same_cubic_sample():
    """x = j^2 read at pixel 2.5: Keys weights (a=-0.75) -0.09375, 0.59375, 0.59375, -0.09375 on x[1..4]
    give 6.125 in both ops."""
    x = np.array([0, 1, 4, 9, 16, 25], np.float64)
    resized = run("Resize", x, None, np.array([2], np.float32), mode="cubic",
                  coordinate_transformation_mode="asymmetric")
    assert resized[5] == pytest.approx(6.125)           # output 5 samples x = 5 / 2
    px = 2.5
    grid = np.array([(2 * px + 1) / 6 - 1, 0.0]).reshape(1, 1, 1, 2)
    sampled = run("GridSample", x.reshape(1, 1, 1, 6), grid, mode="cubic")
    assert sampled.reshape(-1)[0] == pytest.approx(6.125)
