"""The `blas` implementation: MatMul, Gemm and Conv through NumPy's BLAS, into planned buffers.

MatMul/Gemm are one `np.matmul(..., out=...)`; a 1×1 Conv (stride 1, no padding, one group) is a plain
batched GEMM of the weights with the input seen as [N, C, H*W]; other Convs use im2col and a GEMM.
Epilogue nodes the markup pass left to this implementation (a bias Add, an activation) are absorbed:
applied in place on the output while it is still in cache.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..ir.dtypes import f32
from ..ir.graph import Node
from ..ops import get_op
from . import blas_threads
from .implementations import Implementation, Kernel, ReferenceKernel, register_implementation

# epilogue op -> in-place application on the output `y` (with the node's other input `b`, attrs `a`)
EPILOGUES: dict[str, Callable[[np.ndarray, np.ndarray | None, dict], None]] = {
    "Add": lambda y, b, a: np.add(y, b, out=y),
    "Mul": lambda y, b, a: np.multiply(y, b, out=y),
    "Relu": lambda y, b, a: np.maximum(y, np.float32(0), out=y),
    "Clip": lambda y, b, a: np.clip(y, a["min"], a["max"], out=y),
    "LeakyRelu": lambda y, b, a: np.copyto(y, np.where(y < 0, y * np.float32(a["alpha"]), y)),
    "Sigmoid": lambda y, b, a: np.copyto(y, 1 / (1 + np.exp(-y))),
    "Tanh": lambda y, b, a: np.tanh(y, out=y),
}


class BlasKernel(Kernel):
    def __init__(self, node: Node):
        self.node = node
        self.attrs = get_op(node.op).resolve_attrs(node)
        self.epilogue: list[tuple[str, np.ndarray | None, dict]] = []
        self.reference = ReferenceKernel(node)
        self.compute = {"MatMul": self._matmul, "Gemm": self._gemm, "Conv": self._conv}[node.op]

    def absorb(self, node: Node, data_index: int) -> bool:
        """Take an epilogue node reading this kernel's output as input `data_index`."""
        other = [v for i, v in enumerate(node.inputs) if i != data_index and v is not None]
        if node.op not in EPILOGUES or any(not v.is_constant for v in other):
            return False
        attrs = get_op(node.op).resolve_attrs(node)
        if node.op == "Clip":
            lo, hi = (v.data if v is not None else None for v in (node.inputs + [None, None])[1:3])
            attrs = {"min": lo, "max": hi}
        self.epilogue.append((node.op, other[0].data if other and node.op != "Clip" else None, attrs))
        return True

    def __call__(self, inputs):
        """Outputs whose shape was not planned: computed into a new array."""
        a, b = inputs[0], inputs[1]
        if self.node.op == "MatMul":
            y = np.matmul(a, b)
        elif self.node.op == "Gemm":
            y = np.empty((a.shape[1] if self.attrs["transA"] else a.shape[0],
                          b.shape[0] if self.attrs["transB"] else b.shape[1]), np.float32)
            self._gemm(inputs, y)
        else:
            y = np.ascontiguousarray(self.reference(inputs)[0])
        self._apply_epilogue(y)
        return [y]

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        blas_threads.for_product(self._multiply_adds(inputs, outputs[0]))
        self.compute(inputs, outputs[0])
        self._apply_epilogue(outputs[0])

    def _apply_epilogue(self, y: np.ndarray) -> None:
        for op, b, attrs in self.epilogue:
            EPILOGUES[op](y, b, attrs)

    def _multiply_adds(self, inputs, y: np.ndarray) -> int:
        """The product's size: output elements times the reduced dimension."""
        w = inputs[1]
        k = w.size // y.shape[1] if self.node.op == "Conv" else (
            inputs[0].shape[0] if self.node.op == "Gemm" and self.attrs["transA"] else inputs[0].shape[-1])
        return y.size * k

    def _matmul(self, inputs, y) -> None:
        a, b = inputs
        if a.ndim < 2 or b.ndim < 2:
            np.copyto(y, np.matmul(a, b))
        else:
            np.matmul(a, b, out=y)

    def _gemm(self, inputs, y) -> None:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        np.matmul(a.T if self.attrs["transA"] else a, b.T if self.attrs["transB"] else b, out=y)
        if self.attrs["alpha"] != 1.0:
            y *= np.float32(self.attrs["alpha"])
        if c is not None:
            y += c if self.attrs["beta"] == 1.0 else c * np.float32(self.attrs["beta"])

    def _conv(self, inputs, y) -> None:
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        if self._is_pointwise(w):
            n, c = x.shape[:2]
            np.matmul(w.reshape(w.shape[0], c), x.reshape(n, c, -1), out=y.reshape(n, w.shape[0], -1))
            if bias is not None:
                y += bias.reshape((-1,) + (1,) * (y.ndim - 2))
        else:
            np.copyto(y, self.reference(inputs)[0])

    def _is_pointwise(self, w: np.ndarray) -> bool:
        a = self.attrs
        return (w.ndim >= 3 and all(k == 1 for k in w.shape[2:]) and a["group"] == 1
                and all(s == 1 for s in (a["strides"] or [1])) and not any(a["pads"] or [0])
                and a["auto_pad"] in ("NOTSET", "VALID", ""))


def accepts_blas(node: Node, options: dict) -> bool:
    if node.domain or node.op not in ("MatMul", "Gemm", "Conv"):
        return False
    return all(v is None or (v.type is not None and v.type.dtype == f32) for v in node.inputs + node.outputs)


register_implementation(Implementation("blas", 50, accepts_blas, lambda node, options: BlasKernel(node)))
