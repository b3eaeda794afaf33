"""How close a kernel's results must be, shared by the target tests: within 4 ulp or 1e-6 relative
error of the reference at every point (NaN where NaN, infinities exact), the math library's bound."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snipjit.targets.vmath.accuracy import REL_BOUND, ULP_BOUND


@dataclass
class Errors:
    ulp: np.ndarray   # in ulp of the f32-rounded reference
    rel: np.ndarray

    @property
    def failing(self) -> np.ndarray:
        return (self.ulp > ULP_BOUND) & (self.rel > REL_BOUND)


def errors(got: np.ndarray, ref: np.ndarray) -> Errors:
    """Per-point errors of f32 results against a float64 reference (inf where NaN/inf disagree)."""
    ref32 = ref.astype(np.float32)
    diff = np.abs(got.astype(np.float64) - ref)
    ulp = diff / np.spacing(np.abs(ref32)).astype(np.float64)
    rel = diff / np.abs(ref)
    exact = (got == ref32) | (np.isnan(got) & np.isnan(ref))
    ulp, rel = np.where(exact, 0.0, ulp), np.where(exact, 0.0, rel)
    mismatch = ~exact & (np.isnan(got) | np.isnan(ref) | np.isinf(got) | np.isinf(ref32))
    return Errors(np.where(mismatch, np.inf, ulp), np.where(mismatch, np.inf, rel))


def mismatches(got: np.ndarray, want: np.ndarray, ulp: float, rel: float) -> np.ndarray:
    """Where `got` is not within `ulp` units in the last place or `rel` relative error of `want` (NaN must
    match NaN, infinities must be exact)."""
    if got.dtype == np.bool_:
        return got != want
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        tol = np.maximum(rel * np.abs(w), ulp * np.spacing(np.abs(want)).astype(np.float64))
        ok = (g == w) | (np.isnan(g) & np.isnan(w)) | (np.isfinite(g) & np.isfinite(w) & (np.abs(g - w) <= tol))
    return ~ok


def assert_close(got: np.ndarray, *wants: np.ndarray, ulp: float = ULP_BOUND, rel: float = REL_BOUND,
                 what: str = "") -> None:
    """Each element of `got` must be close (see `mismatches`) to that element of one of `wants`."""
    for w in wants:
        assert got.shape == w.shape and got.dtype == w.dtype, (what, got.shape, got.dtype, w.shape, w.dtype)
    bad = np.logical_and.reduce([mismatches(got, w, ulp, rel) for w in wants])
    if bad.any():
        rows = "\n".join(f"  at {tuple(int(k) for k in i)}: got {got[tuple(i)]!r}, want " +
                         " or ".join(repr(w[tuple(i)]) for w in wants) for i in np.argwhere(bad)[:8])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} elements differ\n{rows}")


def log_uniform(rng: np.random.Generator, n: int) -> np.ndarray:
    """Both signs, every binade from the smallest denormal to FLT_MAX."""
    magnitude = np.ldexp(rng.uniform(1.0, 2.0, n), rng.integers(-150, 128, n))
    return (magnitude * rng.choice([-1.0, 1.0], n)).astype(np.float32)


def sample(edges: np.ndarray, dense: tuple[float, float], n: int, seed: int = 0) -> np.ndarray:
    """The edge values, then n*2/5 values over all magnitudes, then the rest uniform over `dense`."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(*dense, n - n * 2 // 5).astype(np.float32)
    return np.concatenate([edges, log_uniform(rng, n * 2 // 5), values])


def sample_pow(edges: np.ndarray, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, then bases of all magnitudes with integer, half-integer and real exponents."""
    rng = np.random.default_rng(seed)
    k = n // 5
    x = np.concatenate([np.repeat(edges, len(edges)), log_uniform(rng, 2 * k), rng.uniform(-10, 10, k),
                        np.exp(rng.uniform(-7, 7, 2 * k))])
    y = np.concatenate([np.tile(edges, len(edges)), rng.integers(-40, 41, k), rng.integers(-80, 81, k) / 2,
                        rng.uniform(-30, 30, k), rng.uniform(-12, 12, k), log_uniform(rng, k)])
    return x.astype(np.float32), y[:len(x)].astype(np.float32)
