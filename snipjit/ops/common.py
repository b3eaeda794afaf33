"""Inference helpers shared by op families, and shorthands to register elementwise ops."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir.dtypes import DType, boolean
from ..ir.graph import TensorType
from ..ir.shape import broadcast_shapes
from .registry import Category, OpContext, register


def same_as_input(i: int = 0) -> Callable[[OpContext], list[TensorType]]:
    """Inference: every output has the type of input i."""
    def infer(ctx: OpContext) -> list[TensorType]:
        return [ctx.in_types[i]] * max(1, len(ctx.out_types))
    return infer


def broadcast_infer(out_dtype: DType | None = None, dtype_from: int = 0,
                    same_dtype: bool = True) -> Callable[[OpContext], list[TensorType]]:
    """Inference for multidirectional broadcasting ops: shapes broadcast; dtype from input
    `dtype_from` (or `out_dtype`); with `same_dtype`, all non-condition inputs must agree."""
    def infer(ctx: OpContext) -> list[TensorType]:
        types = [t for t in ctx.in_types if t is not None]
        if same_dtype:
            ref = ctx.in_types[dtype_from].dtype
            for i, t in enumerate(ctx.in_types):
                if t is not None and i >= dtype_from and t.dtype != ref:
                    raise ctx.fail(f"input {i} has dtype {t.dtype} but input {dtype_from} has {ref}")
        shape = broadcast_shapes(*(t.shape for t in types))
        return [TensorType(out_dtype or ctx.in_types[dtype_from].dtype, shape)]
    return infer


def unary(name: str, fn: Callable[..., np.ndarray], attrs: dict | None = None,
          out_dtype: DType | None = None) -> None:
    """Register an elementwise unary op whose reference is `fn(x, **attrs)`, computed in the input's
    dtype (NumPy would otherwise promote float16 to float32 for some functions)."""
    def ref(ctx: OpContext, x):
        y = fn(x, **ctx.attrs)
        return np.asarray(y).astype(out_dtype.np if out_dtype else x.dtype, copy=False)
    ref.__doc__ = fn.__doc__
    infer = broadcast_infer(out_dtype) if out_dtype else same_as_input(0)
    register(name, Category.UNARY, infer=infer, attrs=attrs, inputs=1)(ref)


def binary(name: str, fn: Callable[..., np.ndarray], attrs: dict | None = None,
           out_dtype: DType | None = None, same_dtype: bool = True) -> None:
    """Register an elementwise binary op (NumPy broadcasting) whose reference is `fn(a, b, **attrs)`."""
    def ref(ctx: OpContext, a, b):
        y = fn(a, b, **ctx.attrs)
        return np.asarray(y).astype(out_dtype.np if out_dtype else a.dtype, copy=False)
    ref.__doc__ = fn.__doc__
    register(name, Category.BINARY, infer=broadcast_infer(out_dtype, same_dtype=same_dtype),
             attrs=attrs, inputs=2)(ref)


def comparison(name: str, fn: Callable[..., np.ndarray]) -> None:
    binary(name, fn, out_dtype=boolean)
