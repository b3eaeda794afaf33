"""What a program step can run on. The program asks these in order and takes the first that accepts
the node: a generated `snippet` kernel for a fused Subgraph, else the `int8` convolutions of QDQ models,
else the `nhwc` convolutions and pools
on channels-last tensors, else the `blas` products (MatMul, Gemm, Conv on the generated GEMM), the
`int8` products (dynamically quantized MatMuls on the int8 GEMM), the `recurrent` layers (LSTM, GRU,
RNN), the Concats copying their inputs into their slices (`copy`), else
the op's NumPy `reference` kernel, which accepts every node."""
from __future__ import annotations

from typing import Callable

from ...ir.graph import Node
from .base import REFERENCE, Implementation, choose_implementation
from .blas import BLAS
from .concat import COPY
from .channels_last import NHWC
from .int8 import INT8
from .int8_conv import INT8_CONV
from .recurrent import RECURRENT
from .snippet import SNIPPET

IMPLEMENTATIONS: tuple[Implementation, ...] = (SNIPPET, INT8_CONV, NHWC, BLAS, INT8, RECURRENT, COPY, REFERENCE)


def choose(node: Node, options: dict) -> tuple[str, Callable]:
    """The kind and the kernel of the first implementation that takes `node` (see `IMPLEMENTATIONS`)."""
    return choose_implementation(node, options, IMPLEMENTATIONS)


__all__ = ["IMPLEMENTATIONS", "Implementation", "choose"]
