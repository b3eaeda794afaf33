"""The `blas` implementation: MatMul, Gemm and Conv as matrix products, into planned buffers.

Products run on snipjit's generated GEMM kernel (`gemm`) when their layout suits it (option
`gemm="numpy"` turns it off), else through NumPy's BLAS. MatMul/Gemm are matrix products into the
planned output; a 1×1 Conv (stride 1, no padding, one group)
is a plain batched GEMM of the weights with the input seen as [N, C, H*W]; other Convs use im2col and a
GEMM. NumPy products are split over snipjit's thread pool by rows (or batches), each piece a
single-threaded BLAS call, so BLAS threads never compete with snipjit's (see `blas_threads`).
Epilogue nodes the markup pass left to this implementation (a bias Add, an activation) are absorbed:
a bias along the output's last axis is added by the GEMM kernel before it stores, the others are applied
in place on the output while it is still in cache.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ...ir.dtypes import f32
from ...ir.graph import Node
from ...ops import get_op
from ...ops.elementwise import gelu
from ...ops.windows import conv_output, im2col, window_from_attrs
from . import gemm_launch, held_weights
from .base import Implementation, Kernel, NativeStep, PreparedLaunch, ReferenceKernel
from .held_weights import HeldWeight
from ..parallel.python_threads import get_pool

# epilogue op -> in-place application on the output `y` (with the node's other input `b`, attrs `a`)
EPILOGUES: dict[str, Callable[[np.ndarray, np.ndarray | None, dict], None]] = {
    "Add": lambda y, b, a: np.add(y, b, out=y),
    "Mul": lambda y, b, a: np.multiply(y, b, out=y),
    "Relu": lambda y, b, a: np.maximum(y, np.float32(0), out=y),
    "Clip": lambda y, b, a: np.clip(y, a["min"], a["max"], out=y),
    "LeakyRelu": lambda y, b, a: np.copyto(y, np.where(y < 0, y * np.float32(a["alpha"]), y)),
    "Sigmoid": lambda y, b, a: np.copyto(y, 1 / (1 + np.exp(-y))),
    "Tanh": lambda y, b, a: np.tanh(y, out=y),
    "Gelu": lambda y, b, a: np.copyto(y, gelu(y, a["approximate"])),
}
# epilogue op -> the math-library function the GEMM kernel applies before its store instead
NATIVE_ACTIVATIONS: dict[str, Callable[[dict], str]] = {
    "Gelu": lambda a: "gelu_tanh" if a["approximate"] == "tanh" else "gelu_erf",
    "Sigmoid": lambda a: "sigmoid",
    "Tanh": lambda a: "tanh",
}


class BlasKernel(Kernel):
    def __init__(self, node: Node, native: bool = True):
        self.node = node
        self.attrs = get_op(node.op).resolve_attrs(node)
        self.epilogue: list[tuple[str, np.ndarray | None, dict]] = []
        self.reference = ReferenceKernel(node)
        self.native = native and gemm_launch.available()
        self.compute = {"MatMul": self._matmul, "Gemm": self._gemm, "Conv": self._conv}[node.op]
        self.packed = self._pack_weights()

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
        if self.node.op == "MatMul" and self.packed is not None and a.ndim >= 2:
            y = np.empty(a.shape[:-1] + (self.packed.n,), np.float32)
            self._apply_epilogue(y, self._matmul(inputs, y))
            return [y]
        if self.node.op == "MatMul":
            y = np.matmul(a, b)
        elif self.node.op == "Gemm":
            n = self.packed.n if self.packed is not None else b.shape[0] if self.attrs["transB"] else b.shape[1]
            y = np.empty((a.shape[1] if self.attrs["transA"] else a.shape[0], n), np.float32)
            self._apply_epilogue(y, self._gemm(inputs, y))
            return [y]
        else:
            y = np.ascontiguousarray(self.reference(inputs)[0])
        self._apply_epilogue(y)
        return [y]

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        fused = self.compute(inputs, outputs[0])
        self._apply_epilogue(outputs[0], fused)

    @property
    def binds(self) -> bool:
        return self.native and (self.node.op == "MatMul" or self._plain_gemm())

    def _plain_gemm(self) -> bool:
        """A Gemm that is a product plus at most a constant bias: A not transposed, alpha 1, C absent or a
        constant of one value per column (checked against the output when bound) added with beta 1."""
        c = self.node.inputs[2] if len(self.node.inputs) > 2 else None
        return (self.node.op == "Gemm" and not self.attrs["transA"] and self.attrs["alpha"] == 1.0
                and (c is None or (c.is_constant and self.attrs["beta"] == 1.0 and c.data.dtype == np.float32
                                   and c.data.ndim <= 1)))

    def bind(self, in_shapes: Sequence[tuple], fixed: dict[int, np.ndarray], n_outputs: int) -> PreparedLaunch | None:
        """MatMuls of matrices and plain Gemms prepare their GEMM launch once (pointers, dims, split over
        threads)."""
        if not self.binds or any(len(s) < 2 for s in in_shapes[:2]):
            return None

        def prepare(arrays: list):
            a, b, y = arrays[0], arrays[1], arrays[-1]
            if self.node.op == "Gemm":
                c = self.node.inputs[2].data if len(self.node.inputs) > 2 else None
                if c is not None and c.size not in (1, y.shape[-1]):
                    return None
                b = b.T if self.attrs["transB"] and self.packed is None else b
                bias = None if c is None else np.ascontiguousarray(np.broadcast_to(c.reshape(-1), y.shape[-1:]))
                activation = self._activation(0)
                fused = int(bool(activation))
            else:
                bias = self._bias(y.shape[-1])
                activation = self._activation(int(bias is not None))
                fused = int(bias is not None) + int(bool(activation))
            launch = gemm_launch.prepare(a, self.packed if self.packed is not None else b, y, bias, True,  # repeats
                                         activation)
            if launch is None:
                return None
            if fused == len(self.epilogue):   # the kernel does all of it
                return NativeStep(launch)

            def call(arrays: list) -> None:
                launch.run()
                self._apply_epilogue(arrays[-1], fused)
            return call

        return self.prepared_launch(prepare, in_shapes, fixed, n_outputs)

    def native_jobs(self) -> list:
        """The GEMM kernel of a bound product by packed weights, with the activation `bind` will give it
        (a product of two computed operands chooses its kernel by the run's shapes; rows not known until
        the run: the kernel for many, which does not ask for B ahead)."""
        if self.packed is None or not self.binds:
            return []
        bias = self.node.op == "MatMul" and self._bias(self.packed.n) is not None
        activation = self._activation(int(bias))
        kernel = self.packed.kernel.for_products(activation) if activation else self.packed.kernel
        shape = self.node.inputs[0].type.shape if self.node.inputs[0].type else None
        if shape and all(isinstance(n, int) for n in shape):   # (its rows tell whether it asks for B ahead)
            kernel = gemm_launch.launch_kernel(kernel, 1, math.prod(shape[:-1]), self.packed.n, self.packed.k)
        return [kernel.job]

    def _apply_epilogue(self, y: np.ndarray, start: int = 0) -> None:
        for op, b, attrs in self.epilogue[start:]:
            EPILOGUES[op](y, b, attrs)

    def _activation(self, start: int) -> str:
        """The math-library function the GEMM kernel applies for the epilogue step at `start`, when that is
        the last step and the kernel has one for it ("" otherwise)."""
        if len(self.epilogue) != start + 1 or self.epilogue[start][0] not in NATIVE_ACTIVATIONS:
            return ""
        op, _, attrs = self.epilogue[start]
        return NATIVE_ACTIVATIONS[op](attrs)

    def _bias(self, n: int) -> np.ndarray | None:
        """The first epilogue as a bias the GEMM kernel adds: an Add of one value per output column, or of one
        value for all (a zero-initialised bias that constant folding made a scalar: then the kernel can also
        apply the activation after it)."""
        if not self.epilogue or self.epilogue[0][0] != "Add":
            return None
        b = self.epilogue[0][1]
        if b is None or b.dtype != np.float32:
            return None
        if b.size == 1:
            return np.full(n, b.reshape(-1)[0], np.float32)
        if b.size != n or (b.ndim and b.shape[-1] != n):
            return None   # (e.g. [n, 1]: one value per row)
        return np.ascontiguousarray(b.reshape(n))

    def _pack_weights(self) -> gemm_launch.PackedB | None:
        """A constant 2-D B of MatMul/Gemm (transposed for Gemm's transB), packed once for the kernel."""
        w = self.node.inputs[1] if self.node.op in ("MatMul", "Gemm") else None
        if not self.native or w is None or not w.is_constant or w.data.ndim != 2 or w.data.dtype != np.float32:
            return None
        transposed = self.node.op == "Gemm" and bool(self.attrs["transB"])
        return held_weights.offered(w, gemm_launch.PackedB, transposed) or \
            gemm_launch.pack(w.data.T if transposed else w.data)

    def holds_input(self, index: int) -> bool:
        """Whether the kernel keeps its own copy of constant input `index` (the packed weights) and never
        reads the array it is given: the program may then release the original."""
        return index == 1 and self.packed is not None

    def held(self, index: int) -> HeldWeight:
        if not self.holds_input(index):
            return super().held(index)
        return HeldWeight(self.packed, transposed=self.node.op == "Gemm" and bool(self.attrs["transB"]))

    def _product(self, a: np.ndarray, b: np.ndarray, y: np.ndarray, bias: np.ndarray | None = None,
                 packed: gemm_launch.PackedB | None = None, activation: str = "") -> int:
        """y = activation(a @ b (+ bias)), with `packed` standing for b when given (b is then not read); how
        many of the two (bias, activation) the product applied."""
        if self.native and gemm_launch.matmul(a, packed if packed is not None else b, y, bias, activation):
            return int(bias is not None) + int(bool(activation))
        parallel_matmul(a, b if packed is None else packed.unpack(), y)
        return 0

    def _matmul(self, inputs, y) -> int:
        a, b = inputs
        if a.ndim < 2 and self.packed is not None:
            np.copyto(y, np.matmul(a, self.packed.unpack()))
            return 0
        if a.ndim < 2 or b.ndim < 2:
            np.copyto(y, np.matmul(a, b))
            return 0
        bias = self._bias(y.shape[-1])
        return self._product(a, b, y, bias, self.packed, self._activation(int(bias is not None)))

    def _gemm(self, inputs, y) -> int:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        a = a.T if self.attrs["transA"] else a
        b = b.T if self.attrs["transB"] and self.packed is None else b
        alpha, beta = self.attrs["alpha"], self.attrs["beta"]
        bias = c if (c is not None and alpha == 1.0 and beta == 1.0 and c.dtype == np.float32
                     and c.ndim <= 1 and c.size == y.shape[-1]) else None
        plain = alpha == 1.0 and (c is None or bias is not None)   # (then the kernel may apply the activation too)
        activation = self._activation(0) if plain else ""
        applied = self._product(a, b, y, None if bias is None else np.ascontiguousarray(bias.reshape(-1)),
                                self.packed, activation)
        if applied > int(bool(activation)):
            c = None
        if alpha != 1.0:
            y *= np.float32(alpha)
        if c is not None:
            y += c if beta == 1.0 else c * np.float32(beta)
        return int(bool(activation)) if applied else 0

    def _conv(self, inputs, y) -> int:
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        n, c = x.shape[:2]
        if self._is_pointwise(w) and n == 1:
            self._product(w.reshape(w.shape[0], c), x.reshape(c, -1), y.reshape(w.shape[0], -1))
        elif self._is_pointwise(w):
            self._product(w.reshape(w.shape[0], c), x.reshape(n, c, -1), y.reshape(n, w.shape[0], -1))
        else:
            ctx = self.reference.ctx
            wm, cols, spatial = im2col(ctx, x, w, window_from_attrs(ctx, tuple(w.shape[2:])), self.attrs["group"])
            if wm.shape[0] == 1 and n == 1:   # the product lands in the output's layout directly
                self._product(wm[0], cols[0], y.reshape(w.shape[0], -1))
            else:
                products = np.empty((wm.shape[0], wm.shape[1], cols.shape[2]), np.float32)
                self._product(wm, cols, products)
                np.copyto(y, conv_output(products, n, spatial))
        if bias is not None:
            y += bias.reshape((-1,) + (1,) * (y.ndim - 2))
        return 0

    def _is_pointwise(self, w: np.ndarray) -> bool:
        a = self.attrs
        return (w.ndim >= 3 and all(k == 1 for k in w.shape[2:]) and a["group"] == 1
                and all(s == 1 for s in (a["strides"] or [1])) and not any(a["pads"] or [0])
                and a["auto_pad"] in ("NOTSET", "VALID", ""))


SPLIT_MIN_MULTIPLY_ADDS = 1 << 20   # smaller products run in one piece


def parallel_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b (2-D or batched, NumPy semantics), split by batches or rows over the thread pool."""
    pool = get_pool()
    m, k = a.shape[-2:]
    n = out.shape[-1]
    if pool.threads == 1 or out.size * k < SPLIT_MIN_MULTIPLY_ADDS:
        np.matmul(a, b, out=out)
        return
    batch = out.shape[:-2]
    if batch and a.shape[:-2] == batch and math.prod(batch) >= pool.threads:   # split the batch
        o3 = _view(out, (-1, m, n))
        a3 = a.reshape(-1, m, k)
        b3 = b.reshape(-1, *b.shape[-2:]) if b.shape[:-2] == batch else None
        if o3 is not None and (b3 is not None or b.ndim == 2):
            pool.parallel_for(lambda lo, hi: np.matmul(a3[lo:hi], b3[lo:hi] if b3 is not None else b,
                                                       out=o3[lo:hi]), a3.shape[0])
            return
    if b.ndim == 2 and (a.ndim == 2 or a.shape[:-2] == batch):   # rows of a, the batch folded in
        o2 = _view(out, (-1, n))
        if o2 is not None:
            a2 = a.reshape(-1, k)
            pool.parallel_for(lambda lo, hi: np.matmul(a2[lo:hi], b, out=o2[lo:hi]), a2.shape[0])
            return
    if a.ndim == 2 and m >= pool.threads:   # shared weights times a batch: rows of the weights
        pool.parallel_for(lambda lo, hi: np.matmul(a[lo:hi], b, out=out[..., lo:hi, :]), m)
        return
    np.matmul(a, b, out=out)


def _view(arr: np.ndarray, shape: tuple) -> np.ndarray | None:
    """`arr` reshaped without a copy, or None when that needs one."""
    v = arr.reshape(shape)
    return v if np.shares_memory(v, arr) else None


def accepts_blas(node: Node, options: dict) -> bool:
    if node.domain or node.op not in ("MatMul", "Gemm", "Conv"):
        return False
    return all(v is None or (v.type is not None and v.type.dtype == f32) for v in node.inputs + node.outputs)


BLAS = Implementation("blas", accepts_blas,
                      lambda node, options: BlasKernel(node, options.get("gemm", "snipjit") != "numpy"))
