"""Convolutions and pools over NCHW-style tensors [N, C, *spatial] (1-D, 2-D, 3-D, ...).

One sliding-window helper serves all of them: a `Window` (kernel, strides, dilations, pads, auto_pad,
ceil_mode) is placed on a concrete input (`Window.place`), and `_windows` presents the padded input as a
read-only strided view [N, C, *out, *kernel]. Conv turns that view into an im2col matrix and multiplies it
with the weights (one BLAS call per group); ConvTranspose is the Conv of the stride-dilated input with the
flipped kernel; the pools reduce the view over its kernel axes in one pooling core (`_pool`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import i8, i64, u8
from ..ir.graph import TensorType
from ..ir.shape import Dim, Shape, ShapeError
from ._indexing import dim_affine, require_rank, tensor
from .common import FLOATS, check_dtypes, compute_dtype, one_of, require_dtype_of_x
from .registry import REQUIRED, Category, OpContext, register

H = Category.HEAVY
_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# ---- window geometry -----------------------------------------------------------------------------------
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
        if span < 0:
            raise ShapeError(f"spatial dim {i} of size {d} (padded: {d + lo + hi}) is smaller than the window "
                             f"extent {ext}")
        if not self.ceil_mode:
            return span // s + 1
        n = -(-span // s) + 1
        return n - 1 if (n - 1) * s >= d + lo else n  # the last window must start inside input or begin pad

    def place(self, spatial: tuple[int, ...]) -> Placement:
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


def _window(ctx: OpContext, kernel: tuple[int, ...]) -> Window:
    """The window described by the node's attributes for a kernel of the given spatial size."""
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


def _place(ctx: OpContext, win: Window, spatial: tuple[int, ...]) -> Placement:
    try:
        return win.place(spatial)
    except ShapeError as e:
        raise ctx.fail(str(e)) from None


def _windows(x: np.ndarray, win: Window, p: Placement, fill) -> np.ndarray:
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


def _spatial_shape(ctx: OpContext, x: Shape, win: Window) -> list[Dim] | None:
    if x is None:
        return None
    if len(x) != win.rank + 2:
        raise ctx.fail(f"input of rank {len(x)} does not fit a {win.rank}-D window (rank {win.rank + 2} needed)")
    return [win.out_dim(i, d) for i, d in enumerate(x[2:])]


# ---- Conv -----------------------------------------------------------------------------------------------
def _kernel_of(ctx: OpContext, w: Shape) -> tuple[int, ...] | None:
    """The kernel's spatial size: the kernel_shape attribute, checked against the weights."""
    given = ctx.attrs["kernel_shape"]
    from_w = None if w is None else w[2:]
    if given is not None:
        if from_w is not None and (len(from_w) != len(given) or
                                   any(isinstance(a, int) and a != b for a, b in zip(from_w, given))):
            raise ctx.fail(f"kernel_shape {list(given)} does not match the weights {list(w)}")
        return tuple(int(k) for k in given)
    if from_w is None or not all(isinstance(k, int) for k in from_w):
        return None
    return tuple(from_w)


def _check_group(ctx: OpContext, c: Dim, w_in: Dim, m: Dim) -> None:
    g = ctx.attrs["group"]
    if g < 1:
        raise ctx.fail(f"group must be positive, got {g}")
    if isinstance(c, int) and isinstance(w_in, int) and c != w_in * g:
        raise ctx.fail(f"input has {c} channels but weights expect {w_in} per group x {g} groups")
    if isinstance(m, int) and m % g:
        raise ctx.fail(f"{m} output channels do not split into {g} groups")


def _check_bias(ctx: OpContext, b: Shape, m: Dim) -> None:
    if b is not None and (len(b) != 1 or (isinstance(b[0], int) and isinstance(m, int) and b[0] != m)):
        raise ctx.fail(f"bias of shape {list(b)} must be 1-D with one value per output channel ({m})")


def _infer_conv(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x, w = ctx.in_types[:2]
    require_dtype_of_x(ctx)
    if w.shape is not None and len(w.shape) < 3:
        raise ctx.fail(f"weights must have rank >= 3, got {list(w.shape)}")
    m = None if w.shape is None else w.shape[0]
    if ctx.has_input(2):
        _check_bias(ctx, ctx.in_types[2].shape, m)
    if x.shape is not None and w.shape is not None:
        if len(x.shape) != len(w.shape):
            raise ctx.fail(f"X of shape {list(x.shape)} and W of shape {list(w.shape)} differ in rank")
        _check_group(ctx, x.shape[1], w.shape[1], m)
    kernel = _kernel_of(ctx, w.shape)
    if kernel is None or x.shape is None:
        rank = x.rank if x.rank is not None else w.rank
        return [tensor(x.dtype, None if rank is None else
                       [None if x.shape is None else x.shape[0], m] + [None] * (rank - 2))]
    return [tensor(x.dtype, [x.shape[0], m] + _spatial_shape(ctx, x.shape, _window(ctx, kernel)))]


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
    p = _place(ctx, win, x.shape[2:])
    dt = compute_dtype(x.dtype)
    view = _windows(x.astype(dt, copy=False), win, p, 0)              # [N, C, *out, *kernel]
    d = win.rank
    view = view.reshape((n, group, cg) + p.out + win.kernel)
    cols = view.transpose((1, 2) + tuple(range(3 + d, 3 + 2 * d)) + (0,) + tuple(range(3, 3 + d)))
    cols = cols.reshape(group, cg * math.prod(win.kernel), n * math.prod(p.out))
    return w.astype(dt, copy=False).reshape(group, m // group, -1), cols, p.out


def conv_output(y: np.ndarray, n: int, spatial: tuple[int, ...]) -> np.ndarray:
    """The products' result [G, M/G, N * prod(out)] as the convolution's [N, M, *out] (a view)."""
    return y.reshape((-1, n) + spatial).swapaxes(0, 1)


def _conv(ctx: OpContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, win: Window, group: int) -> np.ndarray:
    """The grouped convolution as im2col + one matrix product per group, in x's dtype."""
    wm, cols, spatial = im2col(ctx, x, w, win, group)
    y = conv_output(np.matmul(wm, cols), x.shape[0], spatial)
    if b is not None:
        y = y + b.astype(y.dtype, copy=False).reshape((-1,) + (1,) * len(spatial))
    return np.ascontiguousarray(y, dtype=x.dtype)


_CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
               "strides": None}


@register("Conv", H, infer=_infer_conv, attrs=_CONV_ATTRS, inputs=(2, 3))
def conv(ctx: OpContext, x, w, b=None):
    """Cross-correlation of X [N, C, *spatial] with W [M, C/group, *kernel] (+ bias B [M])."""
    if b is not None and b.shape != (w.shape[0],):
        raise ctx.fail(f"bias of shape {list(b.shape)} must have one value per output channel ({w.shape[0]})")
    kernel = _kernel_of(ctx, w.shape)
    return _conv(ctx, x, w, b, _window(ctx, kernel), ctx.attrs["group"])


# ---- ConvTranspose ----------------------------------------------------------------------------------------
def _transpose_geometry(ctx: OpContext, spatial: tuple[Dim, ...], kernel: tuple[int, ...]
                        ) -> tuple[list[Dim], list[int] | None]:
    """(output spatial dims, padding cut from the start of each) of ConvTranspose; the padding is None
    when dynamic dims leave it unknown."""
    n = len(kernel)
    win = _window(ctx, kernel)
    a = ctx.attrs
    out_pad = [0] * n if a["output_padding"] is None else [int(v) for v in a["output_padding"]]
    if len(out_pad) != n:
        raise ctx.fail(f"output_padding has {len(out_pad)} values but {n} are needed")
    if any(not 0 <= op < max(s, d) for op, s, d in zip(out_pad, win.strides, win.dilations)):
        raise ctx.fail(f"output_padding {out_pad} must be smaller than the stride or dilation")
    # the full (unpadded) output is stride * (d - 1) + output_padding + extent = stride * d + offset
    offset = [op + win.extent(i) - s for i, (s, op) in enumerate(zip(win.strides, out_pad))]
    target = a["output_shape"]
    if target is None and win.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [dim_affine(d, mul=s) for d, s in zip(spatial, win.strides)]
    if target is None:
        begin, end = list(win.pads[:n]), list(win.pads[n:])
        return [dim_affine(d, mul=s, add=o - b - e) for d, s, o, b, e in
                zip(spatial, win.strides, offset, begin, end)], begin
    target = list(target)[-n:]
    full = [dim_affine(d, mul=s, add=o) for d, s, o in zip(spatial, win.strides, offset)]
    if not all(isinstance(f, int) and isinstance(t, int) for f, t in zip(full, target)):
        return target, None
    total = [f - t for f, t in zip(full, target)]
    return target, [t // 2 if win.auto_pad == "SAME_UPPER" else t - t // 2 for t in total]


def _infer_conv_transpose(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x, w = ctx.in_types[:2]
    require_dtype_of_x(ctx)
    g = ctx.attrs["group"]
    m = None if w.shape is None else dim_affine(w.shape[1], mul=g)
    if x.shape is not None and w.shape is not None:
        if len(x.shape) != len(w.shape):
            raise ctx.fail(f"X of shape {list(x.shape)} and W of shape {list(w.shape)} differ in rank")
        if isinstance(x.shape[1], int) and isinstance(w.shape[0], int) and x.shape[1] != w.shape[0]:
            raise ctx.fail(f"input has {x.shape[1]} channels but the weights have {w.shape[0]}")
    if ctx.has_input(2):
        _check_bias(ctx, ctx.in_types[2].shape, m)
    kernel = _kernel_of(ctx, w.shape)
    if kernel is None or x.shape is None:
        rank = x.rank if x.rank is not None else w.rank
        return [tensor(x.dtype, None if rank is None else
                       [None if x.shape is None else x.shape[0], m] + [None] * (rank - 2))]
    require_rank(ctx, x.shape, len(kernel) + 2, what="X")
    out, _ = _transpose_geometry(ctx, x.shape[2:], kernel)
    return [tensor(x.dtype, [x.shape[0], m] + out)]


@register("ConvTranspose", H, infer=_infer_conv_transpose, inputs=(2, 3),
          attrs={**_CONV_ATTRS, "output_padding": None, "output_shape": None})
def conv_transpose(ctx: OpContext, x, w, b=None):
    """Gradient of Conv w.r.t. its input: X [N, C, *spatial], W [C, M/group, *kernel] -> [N, M, *out].
    Computed as the Conv of X with zeros inserted between its elements (stride) and the spatially
    flipped, in/out-swapped kernel."""
    g, kernel = ctx.attrs["group"], _kernel_of(ctx, w.shape)
    c, mg = w.shape[:2]
    if x.ndim != w.ndim or x.shape[1] != c or c % g:
        raise ctx.fail(f"X of shape {list(x.shape)} does not fit W of shape {list(w.shape)} with group={g}")
    if b is not None and b.shape != (mg * g,):
        raise ctx.fail(f"bias of shape {list(b.shape)} must have one value per output channel ({mg * g})")
    d = len(kernel)
    win = _window(ctx, kernel)
    out, begin = _transpose_geometry(ctx, x.shape[2:], kernel)
    if any(o < 1 for o in out):
        raise ctx.fail(f"the output spatial size {out} is empty")
    stretched = np.zeros(x.shape[:2] + tuple(s * (n - 1) + 1 for s, n in zip(win.strides, x.shape[2:])), x.dtype)
    stretched[(slice(None),) * 2 + tuple(slice(None, None, s) for s in win.strides)] = x
    flipped = w[(slice(None),) * 2 + (slice(None, None, -1),) * d]
    flipped = flipped.reshape((g, c // g, mg) + kernel).swapaxes(1, 2).reshape((g * mg, c // g) + kernel)
    # the Conv pads that make the stretched input's output exactly `out` long (negative ones crop)
    pads = [win.extent(i) - 1 - begin[i] for i in range(d)] + \
        [out[i] - stretched.shape[2 + i] + begin[i] for i in range(d)]
    inner = Window(kernel, (1,) * d, win.dilations, tuple(pads))
    return _conv(ctx, stretched, flipped, b, inner, g)


# ---- pools ---------------------------------------------------------------------------------------------
def _lowest(dt: np.dtype):
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _tap_counts(win: Window, p: Placement, spatial: tuple[int, ...], include_pad: bool) -> np.ndarray:
    """How many taps of each window fall inside the input (or inside input + declared pads), as an
    array broadcastable to [*out]."""
    total = np.ones(p.out)
    for i, d in enumerate(spatial):
        taps = np.arange(p.out[i])[:, None] * win.strides[i] - p.begin[i] + \
            np.arange(win.kernel[i])[None, :] * win.dilations[i]
        lo, hi = (-p.begin[i], d + p.end[i]) if include_pad else (0, d)
        count = ((taps >= lo) & (taps < hi)).sum(axis=1)
        total = total * count.reshape([-1 if j == i else 1 for j in range(len(spatial))])
    return total


def _max_indices(x: np.ndarray, win: Window, p: Placement, view: np.ndarray, column_major: bool) -> np.ndarray:
    """For each window, the flat index into x of its (first) maximum; spatial dims flattened row-major,
    or column-major with storage_order=1."""
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    count = math.prod(spatial)
    inner = np.arange(count).reshape(spatial[::-1]).transpose() if column_major else np.arange(count).reshape(spatial)
    flat = np.arange(n * c).reshape(n, c, *([1] * len(spatial))) * count + inner
    where = _windows(flat, win, p, -1).reshape(view.shape[:2 + win.rank] + (-1,))
    best = view.reshape(where.shape).argmax(axis=-1)[..., None]
    return np.take_along_axis(where, best, axis=-1)[..., 0].astype(np.int64)


def _pool(ctx: OpContext, x: np.ndarray, kind: str, win: Window, *, include_pad: bool = False, order: int = 2,
          storage_order: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The pooling core: kind 'max', 'avg' or 'lp' over each window of x. `include_pad` counts padded
    positions in the average's divisor; `order` is Lp's p; with a `storage_order` the argmax indices of
    'max' are returned too (else None)."""
    if x.ndim != win.rank + 2:
        raise ctx.fail(f"input of shape {list(x.shape)} does not fit a {win.rank}-D window")
    p = _place(ctx, win, x.shape[2:])
    dt = compute_dtype(x.dtype)
    xc = x.astype(dt, copy=False)
    if kind == "max":
        view = _windows(xc, win, p, _lowest(dt))
        indices = None if storage_order is None else _max_indices(x, win, p, view, storage_order == 1)
        return _over_taps(view, win.rank, np.maximum).astype(x.dtype, copy=False), indices
    view = _windows(xc, win, p, 0)
    if kind == "avg":
        y = _over_taps(view, win.rank, np.add) / _tap_counts(win, p, x.shape[2:], include_pad)
    else:
        y = _over_taps(np.abs(view) ** order, win.rank, np.add) ** (1.0 / order)
    return y.astype(x.dtype), None


def _over_taps(view: np.ndarray, rank: int, ufunc) -> np.ndarray:
    """Combine a window view [..., *kernel] over its kernel taps, one whole-output pass per tap (a
    reduction over the small trailing axes of a strided view is many times slower)."""
    taps = list(np.ndindex(*view.shape[-rank:]))
    out = np.array(view[(Ellipsis,) + taps[0]])
    for tap in taps[1:]:
        ufunc(out, view[(Ellipsis,) + tap], out=out)
    return out


def _local_window(ctx: OpContext) -> Window:
    return _window(ctx, tuple(int(k) for k in ctx.attrs["kernel_shape"]))


_check_storage_order = one_of("storage_order", (0, 1))


def _infer_pool(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS | {i8, u8} if ctx.op == "MaxPool" else FLOATS)
    x = ctx.in_types[0]
    if ctx.op == "MaxPool":
        _check_storage_order(ctx)
    spatial = _spatial_shape(ctx, x.shape, _local_window(ctx))
    shape = None if spatial is None else list(x.shape[:2]) + spatial
    return [tensor(x.dtype, shape), tensor(i64, shape)]


def _infer_global_pool(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x = ctx.in_types[0]
    require_rank(ctx, x.shape, 3, -1)
    return [tensor(x.dtype, None if x.shape is None else list(x.shape[:2]) + [1] * (len(x.shape) - 2))]


def _global_window(ctx: OpContext, x: np.ndarray) -> Window:
    if x.ndim < 3:
        raise ctx.fail(f"input must have rank >= 3, got shape {list(x.shape)}")
    n = x.ndim - 2
    return Window(x.shape[2:], (1,) * n, (1,) * n, (0,) * (2 * n))


_POOL_ATTRS = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": REQUIRED, "pads": None,
               "strides": None}


@register("MaxPool", H, infer=_infer_pool, attrs={**_POOL_ATTRS, "storage_order": 0}, outputs=(1, 2))
def max_pool(ctx: OpContext, x):
    """Maximum over each window (padding never wins); Indices: flat input index of the maximum."""
    _check_storage_order(ctx)
    order = ctx.attrs["storage_order"] if len(ctx.out_types) > 1 else None
    y, indices = _pool(ctx, x, "max", _local_window(ctx), storage_order=order)
    return y if indices is None else (y, indices)


@register("AveragePool", H, infer=_infer_pool, attrs={**_POOL_ATTRS, "count_include_pad": 0})
def average_pool(ctx: OpContext, x):
    """Mean over each window; padded positions count in the divisor only with count_include_pad=1."""
    return _pool(ctx, x, "avg", _local_window(ctx), include_pad=bool(ctx.attrs["count_include_pad"]))[0]


@register("LpPool", H, infer=_infer_pool, attrs={**_POOL_ATTRS, "p": 2})
def lp_pool(ctx: OpContext, x):
    """(sum |x|^p)^(1/p) over each window."""
    return _pool(ctx, x, "lp", _local_window(ctx), order=ctx.attrs["p"])[0]


@register("GlobalMaxPool", H, infer=_infer_global_pool)
def global_max_pool(ctx: OpContext, x):
    """Maximum over all spatial positions, keeping them as size-1 dims."""
    return _pool(ctx, x, "max", _global_window(ctx, x))[0]


@register("GlobalAveragePool", H, infer=_infer_global_pool)
def global_average_pool(ctx: OpContext, x):
    """Mean over all spatial positions, keeping them as size-1 dims."""
    return _pool(ctx, x, "avg", _global_window(ctx, x))[0]


@register("GlobalLpPool", H, infer=_infer_global_pool, attrs={"p": 2})
def global_lp_pool(ctx: OpContext, x):
    """(sum |x|^p)^(1/p) over all spatial positions, keeping them as size-1 dims."""
    return _pool(ctx, x, "lp", _global_window(ctx, x), order=ctx.attrs["p"])[0]
