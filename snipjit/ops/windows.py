"""Public window helpers: the sliding-window geometry that convolutions, pools and their inverses share,
and the im2col form of a convolution that the reference kernels and the BLAS runtime both multiply.

A `Window` (kernel, strides, dilations, pads, auto_pad, ceil_mode) comes from a node's attributes
(`window_from_attrs`) and is placed on a concrete input (`place_window`), which fixes the output size and
the padding per spatial dim; `window_view` then presents the padded input as a read-only strided view
[N, C, *out, *kernel], and `im2col` turns that view into the column matrix of a grouped convolution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..ir.shape import Dim, ShapeError
from ._indexing import dim_affine
from .common import compute_dtype
from .registry import OpContext

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class Placement:
    """A window placed on a concrete input: per spatial dim, the output size and the padding."""
    out: tuple[int, ...]
    begin: tuple[int, ...]   # padding before the input
    end: tuple[int, ...]     # declared padding after the input (what count_include_pad counts)
    reach: tuple[int, ...]   # padding after the input the last window needs (negative: an unread tail)


@dataclass(frozen=True)
class Window:
    """A sliding window over the spatial dims; pads are ONNX-ordered (all begins, then all ends)."""
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    auto_pad: str = "NOTSET"
    ceil_mode: bool = False

    @property
    def rank(self) -> int:
        return len(self.kernel)

    def extent(self, i: int) -> int:
        """How many input positions the dilated kernel spans along spatial dim i."""
        return (self.kernel[i] - 1) * self.dilations[i] + 1

    def out_dim(self, i: int, d: Dim) -> Dim:
        """Output size along spatial dim i for an input size d (static, or symbolic when certain)."""
        s, ext = self.strides[i], self.extent(i)
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            return dim_affine(d, div=s, ceil=True)
        lo, hi = (0, 0) if self.auto_pad == "VALID" else (self.pads[i], self.pads[i + self.rank])
        if not isinstance(d, int):
            return dim_affine(d, add=lo + hi - ext + 1) if s == 1 else None
        span = d + lo + hi - ext
        if span < 0 and not (self.ceil_mode and span > -s):   # (ceil_mode: one window, overhanging the end)
            raise ShapeError(f"spatial dim {i} of size {d} (padded: {d + lo + hi}) is smaller than the window "
                             f"extent {ext}")
        if not self.ceil_mode:
            return span // s + 1
        n = -(-span // s) + 1
        return n - 1 if (n - 1) * s >= d + lo else n  # the last window must start inside input or begin pad

    def clipped(self, spatial: tuple[int, ...]) -> "Window":
        """The window with each kernel dim that reaches past the input and both pads (a ceil_mode window
        larger than the input) cut to what it covers: the same single window, without taps that can
        only read padding nobody declared."""
        kernel = list(self.kernel)
        for i, d in enumerate(spatial):
            covered = d + self.pads[i] + self.pads[i + self.rank]
            if self.dilations[i] == 1 and self.auto_pad == "NOTSET" and kernel[i] > covered:
                kernel[i] = covered
        return replace(self, kernel=tuple(kernel))

    def place(self, spatial: tuple[int, ...]) -> Placement:
        """The window on an input of these spatial sizes: output size and padding per dim."""
        out, begin, end, reach = [], [], [], []
        for i, d in enumerate(spatial):
            o = self.out_dim(i, d)
            if o < 1:
                raise ShapeError(f"spatial dim {i} of size {d} gives no window")
            if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                total = max(0, (o - 1) * self.strides[i] + self.extent(i) - d)
                lo = total // 2 if self.auto_pad == "SAME_UPPER" else total - total // 2
                hi = total - lo
            elif self.auto_pad == "VALID":
                lo = hi = 0
            else:
                lo, hi = self.pads[i], self.pads[i + self.rank]
            out.append(o)
            begin.append(lo)
            end.append(hi)
            reach.append((o - 1) * self.strides[i] + self.extent(i) - d - lo)
        return Placement(tuple(out), tuple(begin), tuple(end), tuple(reach))


def window_from_attrs(ctx: OpContext, kernel: tuple[int, ...]) -> Window:
    """The window a conv or pool node's attributes (strides, dilations, pads, auto_pad, ceil_mode)
    describe for a kernel of the given spatial size; bad attributes raise OpError naming the node."""
    n = len(kernel)
    a = ctx.attrs

    def ints_attr(name: str, default: int, length: int) -> tuple[int, ...]:
        v = a.get(name)
        v = [default] * length if v is None else [int(x) for x in v]
        if len(v) != length:
            raise ctx.fail(f"{name} has {len(v)} values but {length} are needed for {n} spatial dims")
        return tuple(v)

    auto_pad = a.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in _AUTO_PADS:
        raise ctx.fail(f"auto_pad must be one of {list(_AUTO_PADS)}, got {auto_pad!r}")
    win = Window(tuple(kernel), ints_attr("strides", 1, n), ints_attr("dilations", 1, n),
                 ints_attr("pads", 0, 2 * n), auto_pad, bool(a.get("ceil_mode", 0)))
    if min(win.kernel + win.strides + win.dilations, default=1) < 1 or min(win.pads, default=0) < 0:
        raise ctx.fail(f"kernel {list(win.kernel)}, strides {list(win.strides)} and dilations "
                       f"{list(win.dilations)} must be positive and pads {list(win.pads)} non-negative")
    return win


def place_window(ctx: OpContext, win: Window, spatial: tuple[int, ...]) -> Placement:
    """`win.place(spatial)`, a window that does not fit the input raising OpError naming the node."""
    try:
        return win.place(spatial)
    except ShapeError as e:
        raise ctx.fail(str(e)) from None


def window_view(x: np.ndarray, win: Window, p: Placement, fill) -> np.ndarray:
    """Read-only view [N, C, *out, *kernel] of x [N, C, *spatial] padded with `fill`: element
    [n, c, o..., k...] is x[n, c, o*stride - begin + k*dilation, ...]."""
    crop = tuple(slice(max(-b, 0), d - max(-r, 0)) for d, b, r in zip(x.shape[2:], p.begin, p.reach))
    grow = [(0, 0)] * 2 + [(max(b, 0), max(r, 0)) for b, r in zip(p.begin, p.reach)]
    padded = x[(slice(None), slice(None)) + crop]
    if any(g != (0, 0) for g in grow):
        padded = np.pad(padded, grow, constant_values=fill)
    st = padded.strides
    shape = padded.shape[:2] + p.out + win.kernel
    strides = st[:2] + tuple(st[2 + i] * s for i, s in enumerate(win.strides)) + \
        tuple(st[2 + i] * d for i, d in enumerate(win.dilations))
    return np.lib.stride_tricks.as_strided(padded, shape, strides, writeable=False)


def im2col(ctx: OpContext, x: np.ndarray, w: np.ndarray, win: Window, group: int
           ) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """A grouped convolution as matrix products: weights [G, M/G, K], columns [G, K, N * prod(out)]
    (K = C/G * prod(kernel)), and the output's spatial size; in x's compute dtype."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    if x.ndim != w.ndim or c != cg * group or m % group:
        raise ctx.fail(f"X of shape {list(x.shape)} does not fit W of shape {list(w.shape)} with group={group}")
    if w.shape[2:] != win.kernel:
        raise ctx.fail(f"kernel_shape {list(win.kernel)} does not match the weights {list(w.shape)}")
    p = place_window(ctx, win, x.shape[2:])
    dt = compute_dtype(x.dtype)
    view = window_view(x.astype(dt, copy=False), win, p, 0)              # [N, C, *out, *kernel]
    d = win.rank
    view = view.reshape((n, group, cg) + p.out + win.kernel)
    cols = view.transpose((1, 2) + tuple(range(3 + d, 3 + 2 * d)) + (0,) + tuple(range(3, 3 + d)))
    cols = cols.reshape(group, cg * math.prod(win.kernel), n * math.prod(p.out))
    return w.astype(dt, copy=False).reshape(group, m // group, -1), cols, p.out


def conv_output(y: np.ndarray, n: int, spatial: tuple[int, ...]) -> np.ndarray:
    """The products' result [G, M/G, N * prod(out)] as the convolution's [N, M, *out] (a view)."""
    return y.reshape((-1, n) + spatial).swapaxes(0, 1)
