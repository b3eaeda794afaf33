"""The stream limit: bench/stream.c, built by `bench.native`, called through ctypes."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bench.native import build

SOURCE = Path(__file__).with_name("stream.c")


@functools.cache
def library() -> ctypes.CDLL:
    lib = build(SOURCE)
    lib.stream_sum.restype = None
    lib.stream_sum.argtypes = [
        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
        ctypes.c_ssize_t, ctypes.c_int,
    ]
    return lib


def bind(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], threads: int) -> Callable[[], None]:
    """A call streaming these C-contiguous float32 arrays, all of one size, with arguments bound once
    (the call holds the arrays)."""
    arrays = [*inputs, *outputs]
    if not inputs or any(a.dtype != np.float32 or not a.flags.c_contiguous or a.size != arrays[0].size for a in arrays):
        raise ValueError("the stream kernel takes inputs and outputs: C-contiguous float32 arrays of one size")
    ins = (ctypes.c_void_p * len(inputs))(*[a.ctypes.data for a in inputs])
    outs = (ctypes.c_void_p * len(outputs))(*[a.ctypes.data for a in outputs])
    function, size = library().stream_sum, arrays[0].size
    return lambda: (function(ins, len(inputs), outs, len(outputs), size, threads), arrays)[0]
