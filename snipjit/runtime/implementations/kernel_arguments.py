"""A generated kernel's arguments as its ABI (`KernelFunction`: `fn(ptrs, dims, begin, end, scratch)`) takes them:
an array of pointers and an array of int64 dims, each in the order of the kernel's names for them, given by name."""
from __future__ import annotations

import ctypes

import numpy as np


def pointer_array(names: tuple[str, ...], **arrays: np.ndarray | None) -> ctypes.Array:
    """The pointers `names`, in order, to the arrays of those names (those not given, or None: null)."""
    _known(names, arrays, "pointer")
    return (ctypes.c_void_p * len(names))(*[None if arrays.get(n) is None else arrays[n].ctypes.data for n in names])


def dim_array(names: tuple[str, ...], default: int | None = None, **values: int) -> ctypes.Array:
    """The int64 dims `names`, in order, from the values of those names (those not given: `default`, if any)."""
    _known(names, values, "dim")
    missing = [n for n in names if n not in values]
    if missing and default is None:
        raise KeyError(f"kernel dims not given: {missing}")
    return (ctypes.c_int64 * len(names))(*(values.get(n, default) for n in names))


def _known(names: tuple[str, ...], given: dict, kind: str) -> None:
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise KeyError(f"not {kind}s of the kernel ({', '.join(names)}): {unknown}")
