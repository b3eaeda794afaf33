"""Symbolic integers for runtime quantities: sums of products of master-shape dims.

Kernels serve every shape of a dynamic model, so work amounts, strides and pointer shifts are not numbers
at compile time but polynomials over the master shape's dims `D0, D1, ...` (static dims are folded in as
numbers). `Sym` is such a polynomial: a map from a sorted tuple of dim indices (a monomial) to its
integer coefficient.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Sym:
    terms: tuple[tuple[tuple[int, ...], int], ...] = field(default=())

    @staticmethod
    def const(c: int) -> "Sym":
        return Sym(((((), int(c)),) if c else ()))

    @staticmethod
    def dim(i: int, static: Sequence[int | None] | None = None) -> "Sym":
        """The master dim i, folded to a number when `static[i]` is known."""
        if static is not None and static[i] is not None:
            return Sym.const(static[i])
        return Sym((((i,), 1),))

    @staticmethod
    def _make(d: Mapping[tuple[int, ...], int]) -> "Sym":
        return Sym(tuple(sorted((k, v) for k, v in d.items() if v)))

    def __add__(self, other: "Sym | int") -> "Sym":
        other = other if isinstance(other, Sym) else Sym.const(other)
        d = dict(self.terms)
        for k, v in other.terms:
            d[k] = d.get(k, 0) + v
        return Sym._make(d)

    def __neg__(self) -> "Sym":
        return Sym(tuple((k, -v) for k, v in self.terms))

    def __sub__(self, other: "Sym | int") -> "Sym":
        return self + -(other if isinstance(other, Sym) else Sym.const(other))

    def __mul__(self, other: "Sym | int") -> "Sym":
        other = other if isinstance(other, Sym) else Sym.const(other)
        d: dict[tuple[int, ...], int] = {}
        for k1, v1 in self.terms:
            for k2, v2 in other.terms:
                k = tuple(sorted(k1 + k2))
                d[k] = d.get(k, 0) + v1 * v2
        return Sym._make(d)

    __rmul__ = __mul__
    __radd__ = __add__

    @property
    def is_const(self) -> bool:
        return all(not k for k, _ in self.terms)

    @property
    def value(self) -> int | None:
        """The number, when the polynomial has no dims."""
        return sum(v for _, v in self.terms) if self.is_const else None

    @property
    def is_zero(self) -> bool:
        return not self.terms

    def evaluate(self, dims: Sequence[int]) -> int:
        total = 0
        for k, v in self.terms:
            p = v
            for i in k:
                p *= dims[i]
            total += p
        return total

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for k, v in self.terms:
            mono = "*".join(f"D{i}" for i in k)
            if not mono:
                parts.append(str(v))
            elif v == 1:
                parts.append(mono)
            elif v == -1:
                parts.append("-" + mono)
            else:
                parts.append(f"{v}*{mono}")
        return " + ".join(parts).replace("+ -", "- ")

    __repr__ = __str__
