"""Inference helpers shared by op families, and shorthands to register elementwise ops.

Elementwise kernels registered through `unary`, `binary` and `variadic` compute half-precision floats
(f16, bf16) in f32 and round the result back, run with NumPy's floating-point warnings silenced (ONNX
defines inf/nan results), and turn an `ArithmeticError` raised by the math function (integer division
by zero) into an error naming the node.
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable, Sequence

import numpy as np

from ..ir.dtypes import (DType, bf16, boolean, dtype as to_dtype, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32,
                         u64)
from ..ir.graph import Node, TensorType, Value
from ..ir.shape import Shape, ShapeError, broadcast_shapes, normalize_axis, shape_str
from .registry import Category, OpContext, OpError, get_op, infer_node, register

# Type constraints, named as in the ONNX schemas.
FLOATS = frozenset({f16, bf16, f32, f64})
SIGNED_INTS = frozenset({i8, i16, i32, i64})
INTS = SIGNED_INTS | {u8, u16, u32, u64}
SIGNED = FLOATS | SIGNED_INTS
NUMERIC = FLOATS | INTS
BOOL = frozenset({boolean})

Check = Callable[[OpContext], None]


def check_dtypes(ctx: OpContext, allowed: Iterable[DType], inputs: Iterable[int] | None = None) -> None:
    """Fail unless the dtypes of the given inputs (default: all present ones) are in `allowed`."""
    allowed = frozenset(allowed)
    for i in range(len(ctx.in_types)) if inputs is None else inputs:
        t = ctx.in_types[i] if i < len(ctx.in_types) else None
        if t is not None and t.dtype not in allowed:
            names = ", ".join(sorted(d.name for d in allowed))
            raise ctx.fail(f"input {i} has dtype {t.dtype}; {ctx.op} takes {names}")


def require_dtype_of_x(ctx: OpContext) -> None:
    """Fail unless every present input has the dtype of input 0 (X)."""
    x = ctx.in_types[0]
    for i, t in enumerate(ctx.in_types):
        if t is not None and t.dtype != x.dtype:
            raise ctx.fail(f"input {i} has dtype {t.dtype} but X has {x.dtype}")


def one_of(attr: str, choices: Sequence) -> Check:
    """A check that attribute `attr` has one of `choices`."""
    def check(ctx: OpContext) -> None:
        if ctx.attrs[attr] not in choices:
            raise ctx.fail(f"attribute {attr}={ctx.attrs[attr]!r} must be one of {list(choices)}")
    return check


def axis_of(ctx: OpContext, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` made non-negative for a tensor of `rank`, failing (naming the node) when out of range."""
    try:
        return normalize_axis(int(axis), rank, what)
    except ShapeError as e:
        raise ctx.fail(str(e)) from None


def unidirectional(ctx: OpContext, target: Shape, shape: Shape, what: str) -> None:
    """Fail unless `shape` broadcasts to `target` without changing it (ONNX unidirectional
    broadcasting); dynamic dims pass, since they may fit at run time."""
    if target is None or shape is None:
        return
    bad = len(shape) > len(target) or any(
        isinstance(s, int) and isinstance(t, int) and s not in (1, t)
        for s, t in zip(reversed(shape), reversed(target)))
    if bad:
        raise ctx.fail(f"{what} of shape {shape_str(shape)} does not broadcast to {shape_str(target)}")


_HALF = (f16.np, bf16.np)
_F32 = np.dtype(np.float32)


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype math on `dt` is done in: f32 for half-precision floats, `dt` itself otherwise."""
    return _F32 if dt in _HALF else np.dtype(dt)


def upcast(x: np.ndarray) -> np.ndarray:
    """`x` in its compute dtype (see `compute_dtype`)."""
    return x.astype(_F32) if x.dtype in _HALF else x


def check_broadcast(ctx: OpContext, *arrays: np.ndarray | None) -> tuple[int, ...]:
    """The broadcast shape of run-time arrays, failing with their shapes when they do not broadcast."""
    shapes = [a.shape for a in arrays if a is not None]
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ctx.fail("shapes " + ", ".join(shape_str(s) for s in shapes) + " do not broadcast") from None


def same_as_input(i: int = 0) -> Callable[[OpContext], list[TensorType]]:
    """Inference: every output has the type of input i."""
    def infer(ctx: OpContext) -> list[TensorType]:
        return [ctx.in_types[i]] * max(1, len(ctx.out_types))
    return infer


def broadcast_infer(out_dtype: DType | None = None, dtype_from: int = 0, same_dtype: bool = True,
                    dtypes: Iterable[DType] | None = None,
                    check: Check | None = None) -> Callable[[OpContext], list[TensorType]]:
    """Inference for multidirectional broadcasting ops: shapes broadcast; dtype from input
    `dtype_from` (or `out_dtype`); with `same_dtype`, all non-condition inputs must agree. `dtypes`
    restricts the dtype of input `dtype_from`; `check` validates attributes."""
    def infer(ctx: OpContext) -> list[TensorType]:
        types = [t for t in ctx.in_types if t is not None]
        if dtypes is not None:
            check_dtypes(ctx, dtypes, [dtype_from])
        if same_dtype:
            ref = ctx.in_types[dtype_from].dtype
            for i, t in enumerate(ctx.in_types):
                if t is not None and i >= dtype_from and t.dtype != ref:
                    raise ctx.fail(f"input {i} has dtype {t.dtype} but input {dtype_from} has {ref}")
        if check is not None:
            check(ctx)
        shape = broadcast_shapes(*(t.shape for t in types))
        return [TensorType(out_dtype or ctx.in_types[dtype_from].dtype, shape)]
    return infer


def _elementwise(name: str, category: Category, fn: Callable[..., np.ndarray], attrs: dict | None,
                 out_dtype: DType | None, dtypes: Iterable[DType] | None, check: Check | None,
                 inputs: tuple[int, int], same_dtype: bool = True) -> None:
    """Register an elementwise op whose reference is `fn(*inputs, **attrs)` (see the module doc);
    the result has `out_dtype`, or the dtype of the first input."""
    result_dtype = out_dtype.np if out_dtype else None

    def ref(ctx: OpContext, *xs):
        # NumPy's floating-point warnings are silenced by the callers (requests, the interpreter):
        # overflow to inf and out-of-range casts are defined (or undefined in ONNX too), not errors
        if check is not None:
            check(ctx)
        if len(xs) > 1:
            check_broadcast(ctx, *xs)
        try:
            y = fn(*(upcast(x) for x in xs), **ctx.attrs)
        except ArithmeticError as e:
            raise ctx.fail(str(e)) from None
        y = np.asarray(y)
        dt = result_dtype or xs[0].dtype
        return y if y.dtype == dt else y.astype(dt)
    ref.__doc__ = fn.__doc__
    infer = broadcast_infer(out_dtype, same_dtype=same_dtype, dtypes=dtypes, check=check)
    register(name, category, infer=infer, attrs=attrs, inputs=inputs)(ref)


def unary(name: str, fn: Callable[..., np.ndarray], attrs: dict | None = None,
          out_dtype: DType | None = None, dtypes: Iterable[DType] | None = None,
          check: Check | None = None) -> None:
    """Register an elementwise unary op whose reference is `fn(x, **attrs)`; `dtypes` restricts the
    input dtype, `check` validates attributes at inference and run time."""
    _elementwise(name, Category.UNARY, fn, attrs, out_dtype, dtypes, check, (1, 1))


def binary(name: str, fn: Callable[..., np.ndarray], attrs: dict | None = None,
           out_dtype: DType | None = None, same_dtype: bool = True, dtypes: Iterable[DType] | None = None,
           check: Check | None = None) -> None:
    """Register an elementwise binary op (NumPy broadcasting) whose reference is `fn(a, b, **attrs)`."""
    _elementwise(name, Category.BINARY, fn, attrs, out_dtype, dtypes, check, (2, 2), same_dtype)


def comparison(name: str, fn: Callable[..., np.ndarray], dtypes: Iterable[DType] | None = None) -> None:
    binary(name, fn, out_dtype=boolean, dtypes=dtypes)


def variadic(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], dtypes: Iterable[DType],
             finish: Callable[[np.ndarray, int], np.ndarray] | None = None) -> None:
    """Register a variadic broadcasting op that folds its inputs pairwise with `fn`, then applies
    `finish(result, number_of_inputs)` (Mean divides the sum)."""
    def fold(*xs: np.ndarray) -> np.ndarray:
        y = functools.reduce(fn, xs)
        return y if finish is None else finish(y, len(xs))
    fold.__doc__ = fn.__doc__
    _elementwise(name, Category.BINARY, fold, None, None, dtypes, None, (1, -1))


def evaluate(op: str, inputs: Sequence[np.ndarray | None], attrs: dict | None = None,
             outputs: int = 1, domain: str = "") -> list[np.ndarray]:
    """Run one op on constant inputs (None: a missing optional input), the way a compiled program
    does: infer the output types, then run the reference kernel. Raises OpError on bad input, and
    also when the kernel's results disagree with the inferred types (a bug in the op)."""
    ins = [None if x is None else Value.constant(f"in{i}", x) for i, x in enumerate(inputs)]
    node = Node(op, ins, [Value(f"out{i}") for i in range(outputs)], dict(attrs or {}), domain=domain)
    types = infer_node(node)
    for out, t in zip(node.outputs, types):
        out.type = t
    opdef = get_op(op, domain)
    results = opdef.run(opdef.context(node, with_values=False), [None if v is None else v.data for v in ins])
    if len(results) < outputs:
        raise OpError(f"{node.label()}: the kernel gave {len(results)} outputs for {outputs}")
    for r, t in zip(results, types):
        fits = t.shape is None or (len(t.shape) == r.ndim and all(
            not isinstance(d, int) or d == n for d, n in zip(t.shape, r.shape)))
        if to_dtype(r.dtype) != t.dtype or not fits:
            raise OpError(f"{node.label()}: the kernel gave {r.dtype}{shape_str(r.shape)} but inference "
                          f"says {t}")
    return results[:outputs]
