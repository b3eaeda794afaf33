"""The one accuracy table of the math library: per function, the largest error measured on
either target, which the accuracy tests (tests/targets/vmath/test_vmath_accuracy.py) hold it to at
every ISA level the host can execute.

Measured against a float64 reference: 10**5 points per function, log-uniform magnitudes of both
signs from the smallest denormal to FLT_MAX, dense samples of the interesting range, and edge
values (±0, denormals, overflow/underflow thresholds, the thresholds between fast and full paths,
±inf, NaN). ``max_ulp`` is in ulp of the f32-rounded reference (0: always correctly rounded);
``max_rel`` is over normal results. Every point must also be within 4 ulp or 1e-6 relative; no
function needs an absolute bound, since results near zero crossings are relatively accurate too.
On ISA levels without FMA the Horner steps round twice: ``unfused`` is the bound there where it is
larger (exact products come from Dekker's two-product instead, so no function loses more than a
few tenths of an ulp).

The LLVM and C renderers of a function give bit-identical results (the tests check every sample
and every special value), with NaN compared as NaN whatever its payload: both emit the same IEEE
operations in the same order and fuse exactly the ``fma`` calls of the definitions.
"""
from __future__ import annotations

from dataclasses import dataclass

ULP_BOUND, REL_BOUND = 4.0, 1e-6


@dataclass(frozen=True)
class Bound:
    max_ulp: float
    max_rel: float
    note: str = ""
    unfused: tuple[float, float] | None = None   # (max_ulp, max_rel) on levels without FMA, if larger

    def at(self, fused_multiply_add: bool) -> tuple[float, float]:
        """(max_ulp, max_rel) on an ISA level with or without FMA."""
        if fused_multiply_add or self.unfused is None:
            return self.max_ulp, self.max_rel
        return self.unfused


_RELATIVE = "above 4 ulp only where the relative bound holds"
_EXACT_REDUCTION = "exact reduction for every float"

ACCURACY: dict[str, Bound] = {
    "exp": Bound(2.0, 1.6e-07, unfused=(2.2, 1.7e-07)),
    "expm1": Bound(1.9, 1.5e-07, unfused=(2.0, 1.6e-07)),
    "log": Bound(1.2, 9.8e-08),
    "log1p": Bound(1.7, 1.4e-07),
    "tanh": Bound(4.6, 2.8e-07, _RELATIVE, unfused=(4.9, 2.9e-07)),
    "sigmoid": Bound(2.7, 2.2e-07, unfused=(2.9, 2.2e-07)),
    "silu": Bound(3.1, 2.3e-07),
    "softplus": Bound(2.6, 2.3e-07, unfused=(2.7, 2.3e-07)),
    "mish": Bound(4.9, 3.2e-07, _RELATIVE, unfused=(4.9, 3.3e-07)),
    "erf": Bound(5.5, 3.3e-07, _RELATIVE, unfused=(5.6, 3.4e-07)),
    "erfc": Bound(6.2, 4.4e-07, _RELATIVE, unfused=(6.3, 4.4e-07)),
    "gelu_erf": Bound(6.8, 4.5e-07, _RELATIVE),
    "gelu_tanh": Bound(4.3, 3.7e-07, _RELATIVE),
    "gelu": Bound(6.8, 4.5e-07, "gelu_erf, or gelu_tanh with approximate='tanh'"),
    "pow": Bound(0.6, 5.3e-08, "double-precision log and exp"),
    "pow_static": Bound(11.3, 8.0e-07, "x**-8 = (1/x)**8: at most 15 roundings, < 9e-7 rel"),
    "sqrt": Bound(0.0, 0.0),
    "reciprocal": Bound(0.0, 0.0),
    "rsqrt": Bound(1.5, 9.0e-08),
    "sin": Bound(1.5, 1.2e-07, _EXACT_REDUCTION, unfused=(1.6, 1.3e-07)),
    "cos": Bound(1.5, 1.3e-07, _EXACT_REDUCTION),
    "tan": Bound(3.3, 2.2e-07, _EXACT_REDUCTION),
    "atan": Bound(1.9, 1.5e-07, unfused=(2.0, 1.5e-07)),
    "asin": Bound(2.3, 2.6e-07),
    "acos": Bound(1.1, 1.2e-07),
    "sinh": Bound(1.9, 1.6e-07, unfused=(2.1, 1.6e-07)),
    "cosh": Bound(1.9, 1.5e-07, unfused=(2.1, 1.5e-07)),
    "asinh": Bound(2.0, 1.6e-07),
    "acosh": Bound(2.2, 1.7e-07),
    "atanh": Bound(2.1, 1.9e-07),
    "abs": Bound(0.0, 0.0),
    "neg": Bound(0.0, 0.0),
    "relu": Bound(0.0, 0.0),
    "leaky_relu": Bound(0.0, 0.0),
    "prelu": Bound(0.0, 0.0),
    "thresholded_relu": Bound(0.0, 0.0),
    "elu": Bound(1.6, 1.1e-07, unfused=(1.6, 1.2e-07)),
    "selu": Bound(1.8, 1.8e-07, unfused=(2.0, 1.8e-07)),
    "celu": Bound(1.8, 1.5e-07, "x/alpha rounded before expm1"),
    "clip": Bound(0.0, 0.0),
    "hard_sigmoid": Bound(0.0, 0.0, "alpha*x + beta with the product exact"),
    "hard_swish": Bound(2.3, 1.8e-07, "gate (x + 3) * (1/6): the sum is exact near -3"),
    "softsign": Bound(1.5, 1.2e-07),
    "round_half_even": Bound(0.0, 0.0),
    "sign": Bound(0.0, 0.0),
}
