"""Snippets-specific ops that appear in body graphs after the data-flow optimizer (domain "snippets").

`Scalar` holds a single constant value inside the kernel; `PowerStatic` is `Pow` with a compile-time
exponent; `Brgemm` is a matrix product of blocks the kernel reads from memory (ConvertMatMulToBrgemm), and
`BrgemmCopyB` packs a B stored column by column (FuseTransposeBrgemm). All are registered with inference
and a reference kernel, so an optimized body still runs on the reference interpreter — that is how the
data-flow passes are tested for keeping semantics.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import dtype as to_dtype
from ..ir.graph import TensorType
from ..ops.common import same_as_input
from ..ops.registry import REQUIRED, Category, OpContext, get_op, register

DOMAIN = "snippets"
BLOCK_OPS = ("Brgemm", "BrgemmCopyB")   # operations on whole blocks in memory, outside the vector loops


def _infer_scalar(ctx: OpContext) -> list[TensorType]:
    return [TensorType(to_dtype(ctx.attrs["dtype"]), tuple(ctx.attrs["shape"]))]


@register("Scalar", Category.UNARY, infer=_infer_scalar, inputs=0, domain=DOMAIN,
          attrs={"value": REQUIRED, "dtype": "f32", "shape": []})
def scalar(ctx: OpContext):
    """A single value broadcast to any shape; `shape` is all ones (rank-aligned by canonicalization)."""
    return np.full(tuple(ctx.attrs["shape"]), ctx.attrs["value"], to_dtype(ctx.attrs["dtype"]).np)


@register("PowerStatic", Category.UNARY, infer=same_as_input(0), inputs=1, domain=DOMAIN,
          attrs={"power": REQUIRED})
def power_static(ctx: OpContext, x):
    """x ** power for a compile-time power."""
    return np.power(x, x.dtype.type(ctx.attrs["power"])).astype(x.dtype, copy=False)


REDUCE_KINDS = ("sum", "max", "min", "prod", "mean", "shift_max")
# shift_max: a row maximum used only to shift exponents (softmax): it need not carry a NaN of the row,
# whose exp reaches the result through the sum anyway, so targets may use a plain, cheaper max.


def _infer_reduce_last(ctx: OpContext) -> list[TensorType]:
    t = ctx.in_types[0]
    if ctx.attrs["kind"] not in REDUCE_KINDS:
        raise ctx.fail(f"kind must be one of {REDUCE_KINDS}, got {ctx.attrs['kind']!r}")
    if t.shape is None or not t.shape:
        raise ctx.fail("ReduceLast needs an input of known rank >= 1")
    return [TensorType(t.dtype, tuple(t.shape[:-1]) + (1,))]


@register("ReduceLast", Category.REDUCTION, infer=_infer_reduce_last, inputs=1, domain=DOMAIN,
          attrs={"kind": REQUIRED})
def reduce_last(ctx: OpContext, x):
    """The reduction of the innermost axis, kept as a size-1 dim (sum, max, min, prod, mean, shift_max)."""
    fn = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean,
          "shift_max": np.max}[ctx.attrs["kind"]]
    return fn(x, axis=-1, keepdims=True).astype(x.dtype, copy=False)


def _infer_brgemm(ctx: OpContext) -> list[TensorType]:
    a, b = ctx.in_types
    if a.shape is None or b.shape is None or len(a.shape) < 2 or len(b.shape) < 2:
        raise ctx.fail("Brgemm needs operands of known rank >= 2")
    return get_op("MatMul").infer(ctx)


@register("Brgemm", Category.HEAVY, infer=_infer_brgemm, inputs=2, domain=DOMAIN)
def brgemm(ctx: OpContext, a, b):
    """The matrix product of the last two axes (leading axes broadcast), as a block of a kernel: the
    Snippets form of a MatMul, whose operands are read and written in memory, not vector registers."""
    return np.matmul(a, b).astype(a.dtype, copy=False)


@register("BrgemmCopyB", Category.MOVEMENT, infer=same_as_input(0), inputs=1, domain=DOMAIN)
def brgemm_copy_b(ctx: OpContext, b):
    """B of a Brgemm copied with its rows contiguous (the kernel packs a B stored column by column)."""
    return np.array(b, copy=True)


def own_dims(body) -> dict[int, tuple[int, ...]]:
    """The dims of each body input and output (and packed B) by value id that the kernel's loop domain does
    not index because a Brgemm walks them itself: an A operand's K (its last axis), a B operand's K (second last),
    and the columns of a product written straight to a body output (its last axis, and its B's).
    Dims are counted from the end (-1, -2)."""
    found: dict[int, set[int]] = {}
    outputs = {id(v) for v in body.outputs}
    for node in body.nodes:
        if node.op != "Brgemm" or node.domain != DOMAIN:
            continue
        a, b = node.inputs
        c = node.outputs[0]
        row_output = id(c) in outputs
        found.setdefault(id(a), set()).add(-1)
        found.setdefault(id(b), set()).update((-2, -1) if row_output else (-2,))
        if row_output:
            found.setdefault(id(c), set()).add(-1)
    for node in body.nodes:   # a packed B: its source is walked as the B it becomes
        if node.op == "BrgemmCopyB" and node.domain == DOMAIN and id(node.outputs[0]) in found:
            found.setdefault(id(node.inputs[0]), set()).update(found[id(node.outputs[0])])
    edges = {id(v) for v in list(body.inputs) + list(body.outputs)}
    edges |= {id(n.outputs[0]) for n in body.nodes if n.op == "BrgemmCopyB" and n.domain == DOMAIN}
    return {k: tuple(sorted(v)) for k, v in found.items() if k in edges}


def domain_shape(shape: tuple, own: tuple[int, ...]) -> tuple:
    """`shape` as the kernel's loop domain sees it: its own dims (see `own_dims`) as 1."""
    if shape is None:
        return None
    rank = len(shape)
    return tuple(1 if d - rank in own else n for d, n in enumerate(shape))
