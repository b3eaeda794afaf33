"""Matrix products: MatMul, Gemm and Einsum; and Det, the determinant. (The integer products,
MatMulInteger and QLinearMatMul, are in `quantization`.)

Reference kernels use NumPy's BLAS-backed products. float16/bfloat16 inputs are multiplied in float32 and
rounded back (NumPy has no BLAS for them).
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from ..ir.dtypes import i32, i64, u32, u64
from ..ir.graph import TensorType
from ..ir.shape import Dim, Shape, broadcast_dim, broadcast_shapes, shape_str
from ._indexing import require_rank, tensor
from .common import FLOATS, NUMERIC, check_dtypes, unidirectional, upcast
from .registry import Category, OpContext, register

H = Category.HEAVY


_MATMUL_TYPES = FLOATS | {i32, i64, u32, u64}


def _same_dtype(ctx: OpContext, indices: range) -> None:
    ref = ctx.in_types[indices[0]].dtype
    for i in indices:
        t = ctx.in_types[i]
        if t is not None and t.dtype != ref:
            raise ctx.fail(f"input {i} has dtype {t.dtype} but input {indices[0]} has {ref}")


# ---- MatMul ------------------------------------------------------------------------------------------
def _matmul_shape(ctx: OpContext, a: Shape, b: Shape) -> Shape:
    """NumPy matmul shape rule: batch dims broadcast; a 1-D operand gains (and loses) a unit dim."""
    if a is None or b is None:
        return None
    if not a or not b:
        raise ctx.fail("MatMul operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    k1, k2 = a2[-1], b2[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise ctx.fail(f"inner dimensions differ: {list(a)} @ {list(b)}")
    out = broadcast_shapes(a2[:-2], b2[:-2]) + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    return out


def _infer_matmul(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, _MATMUL_TYPES)
    _same_dtype(ctx, range(2))
    a, b = ctx.in_types
    return [tensor(a.dtype, _matmul_shape(ctx, a.shape, b.shape))]


def _matmul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _matmul_shape(ctx, a.shape, b.shape)
    return np.matmul(a, b)


@register("MatMul", H, infer=_infer_matmul, inputs=2)
def matmul(ctx: OpContext, a, b):
    """Matrix product with NumPy semantics (broadcast batch dims, 1-D operands as vectors)."""
    return _matmul(ctx, upcast(a), upcast(b)).astype(a.dtype, copy=False)


# ---- Gemm ---------------------------------------------------------------------------------------------
def _gemm_dims(ctx: OpContext, a: Shape, b: Shape) -> tuple[Dim, Dim]:
    require_rank(ctx, a, 2, what="A")
    require_rank(ctx, b, 2, what="B")
    if a is None or b is None:
        return None, None
    (m, ka), (kb, n) = (a[::-1] if ctx.attrs["transA"] else a), (b[::-1] if ctx.attrs["transB"] else b)
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        raise ctx.fail(f"inner dimensions differ: A' is {[m, ka]}, B' is {[kb, n]}")
    return m, n


def _infer_gemm(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, _MATMUL_TYPES)
    _same_dtype(ctx, range(len(ctx.in_types)))
    a, b = ctx.in_types[:2]
    m, n = _gemm_dims(ctx, a.shape, b.shape)
    if ctx.has_input(2):
        unidirectional(ctx, (m, n), ctx.in_types[2].shape, "C")
    return [tensor(a.dtype, [m, n])]


def _scaled(y: np.ndarray, s: float) -> np.ndarray:
    """y * s, kept in y's dtype (integral factors stay exact for integer tensors)."""
    if s == 1:
        return y
    if y.dtype.kind in "iu" and float(s).is_integer():
        return y * int(s)
    return (y * s).astype(y.dtype)


@register("Gemm", H, infer=_infer_gemm, attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
          inputs=(2, 3))
def gemm(ctx: OpContext, a, b, c=None):
    """alpha * A' @ B' + beta * C, where A' and B' are A and B, transposed when transA/transB."""
    _gemm_dims(ctx, a.shape, b.shape)
    wa, wb = upcast(a), upcast(b)
    y = _scaled((wa.T if ctx.attrs["transA"] else wa) @ (wb.T if ctx.attrs["transB"] else wb), ctx.attrs["alpha"])
    if c is not None:
        unidirectional(ctx, y.shape, c.shape, "C")
        y = y + _scaled(upcast(c), ctx.attrs["beta"])
    return y.astype(a.dtype, copy=False)


# ---- Einsum --------------------------------------------------------------------------------------------
_TERM = re.compile(r"[A-Za-z]*(\.\.\.)?[A-Za-z]*\Z")


def _parse_einsum(ctx: OpContext, n_inputs: int) -> tuple[list[str], str]:
    """Input terms and output term of the equation (the implicit output: the ellipsis, then the labels
    used once, in alphabetical order). Each term may contain one '...'."""
    eq = ctx.attrs["equation"].replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        raise ctx.fail(f"equation {eq!r} has {len(terms)} operands but the node has {n_inputs} inputs")
    for term in terms + ([rhs] if arrow else []):
        if not _TERM.match(term):
            raise ctx.fail(f"equation {eq!r}: term {term!r} is not letters with at most one '...'")
    if arrow:
        labels = set("".join(terms))
        if any(ch not in labels for ch in rhs.replace("...", "")):
            raise ctx.fail(f"equation {eq!r}: output labels must appear in an input")
        return terms, rhs
    counts = Counter("".join(terms).replace(".", ""))
    ellipsis = "..." if any("..." in t for t in terms) else ""
    return terms, ellipsis + "".join(sorted(ch for ch, c in counts.items() if c == 1))


def _infer_einsum(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, NUMERIC)
    _same_dtype(ctx, range(len(ctx.in_types)))
    terms, out = _parse_einsum(ctx, len(ctx.in_types))
    dt = ctx.in_types[0].dtype
    if any(t.shape is None for t in ctx.in_types):
        return [tensor(dt, None if "..." in out else [None] * len(out))]
    sizes: dict[str, Dim] = {}
    ellipses: list[tuple] = []
    for term, t in zip(terms, ctx.in_types):
        labels = term.replace("...", "")
        n_ell = len(t.shape) - len(labels)
        if n_ell < 0 or (n_ell and "..." not in term):
            raise ctx.fail(f"term {term!r} does not fit an input of rank {len(t.shape)}")
        head = term.index("...") if "..." in term else len(labels)
        ellipses.append(t.shape[head:head + n_ell])
        for ch, d in zip(labels, t.shape[:head] + t.shape[head + n_ell:]):
            sizes[ch] = broadcast_dim(sizes[ch], d) if ch in sizes else d
    ell = broadcast_shapes(*ellipses)
    dims: list[Dim] = []
    for part in re.split(r"(\.\.\.)", out):
        dims.extend(ell if part == "..." else [sizes[ch] for ch in part])
    return [tensor(dt, dims)]


@register("Einsum", H, infer=_infer_einsum, attrs={"equation": ""}, inputs=(1, -1))
def einsum(ctx: OpContext, *xs):
    """Einstein summation over the labelled axes of the inputs (NumPy einsum semantics)."""
    terms, out = _parse_einsum(ctx, len(xs))
    try:
        y = np.einsum(",".join(terms) + "->" + out, *(upcast(x) for x in xs), optimize=len(xs) > 1)
    except ValueError as e:
        raise ctx.fail(f"equation {ctx.attrs['equation']!r} does not fit the inputs: {e}") from None
    return np.asarray(y).astype(xs[0].dtype, copy=False)


# ---- Det -----------------------------------------------------------------------------------------
def _check_square(ctx: OpContext, shape: Shape) -> None:
    if shape is None:
        return
    if len(shape) < 2 or (isinstance(shape[-1], int) and isinstance(shape[-2], int) and shape[-1] != shape[-2]):
        raise ctx.fail(f"input must hold square matrices in its last two dims, got shape {shape_str(shape)}")


def _infer_det(ctx: OpContext) -> list[TensorType]:
    check_dtypes(ctx, FLOATS)
    x = ctx.in_types[0]
    _check_square(ctx, x.shape)
    return [x if x.shape is None else tensor(x.dtype, x.shape[:-2])]


@register("Det", H, infer=_infer_det)
def det(ctx: OpContext, x):
    """The determinants of the square matrices in the last two dims of x."""
    _check_square(ctx, x.shape)
    return np.asarray(np.linalg.det(upcast(x))).astype(x.dtype)
