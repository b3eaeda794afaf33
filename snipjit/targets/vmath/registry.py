"""A math function: its name, its definition over the vector builder, its arity and parameters.

A function is ``impl(*vecs, **params) -> Vec``: operands are f32 ``Vec`` values, parameters are
compile-time Python values (an ONNX attribute such as LeakyRelu's alpha, PowerStatic's exponent),
so a renderer emits one specialised body per parameter set.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from .vector import Vec


@dataclass(frozen=True)
class MathOp:
    """A named math function over ``Vec`` operands."""

    name: str
    impl: Callable[..., Vec]
    arity: int = 1
    params: tuple[str, ...] = ()

    def __call__(self, *args, **params) -> Vec:
        """``op(*operands, *params, **params)``: the first ``arity`` arguments are ``Vec`` operands."""
        operands = [a for a in args if isinstance(a, Vec)]
        if len(operands) != self.arity or args[:self.arity] != tuple(operands):
            raise TypeError(f"{self.name} takes {self.arity} operand(s), got {len(operands)}")
        unknown = set(params) - set(self.params)
        if unknown:
            raise TypeError(f"{self.name} has no parameter(s) {sorted(unknown)}; it takes {list(self.params)}")
        return self.impl(*args, **params)


def register(name: str, arity: int = 1):
    """Decorator: ``impl`` as the math function ``name`` (its parameters follow the operands); the
    package's ``OPS`` collects the functions of every family module."""
    def make(impl: Callable[..., Vec]) -> MathOp:
        return MathOp(name, impl, arity, tuple(inspect.signature(impl).parameters)[arity:])

    return make
