"""The `snippet` implementation: a Subgraph node runs as one generated kernel.

At compile time the body goes through the Snippets compiler. At run time the step binds the master
shape from the input shapes, checks it fits what the kernel was compiled for (which dims broadcast),
allocates the outputs, and splits the kernel's parallel domain over the thread pool. A shape the kernel
cannot serve (a dim broadcasting at run time that was not known to at compile time) runs on the
reference kernels instead — correct, only slower.
"""
from __future__ import annotations

import ctypes
import math
import threading
from typing import Sequence

import numpy as np

from ...ir.graph import Node, TensorType
from ...memory.solver import aligned_empty
from ...snippets.subgraph_compiler import CompiledSnippet
from ..errors import KernelBoundsError
from ..parallel.native_threads import NativeCall, get_native_pool, scratchpads
from ..parallel.python_threads import get_pool
from .brgemm_attention import build_attention
from .base import Implementation, Kernel, NativeStep, PreparedLaunch, build_reference, pitched_rows
from .snippet_compile import ThreadScratchpads, compile_body, compile_retyped, launch_parallel

PARALLEL_MIN_ELEMENTS = 1 << 15   # below this, splitting across threads costs more than it gains


class SnippetKernel(Kernel):
    def __init__(self, node: Node, compiled: CompiledSnippet, fallback, options: dict | None = None):
        self.node = node
        self.compiled = compiled
        self.fallback = fallback
        self.options = options or {}
        self.variants: dict[tuple, "SnippetKernel | None"] = {}   # by broadcast pattern of the inputs
        self._variants_lock = threading.Lock()
        self.rank = len(compiled.master_shape)
        self.out_dtypes = [o.type.dtype.np for o in node.outputs]
        self.out_ranks = [len(o.type.shape) for o in node.outputs]
        self.out_broadcast = [[d == 1 for d in shape] for shape in compiled.output_shapes]
        self.fn = compiled.kernel.fn
        self.pitched = tuple(node.attrs["body"].meta.get("pitched", ()))   # the kernel's dims after the master's
        self.calls = 0
        self._scratchpad = ThreadScratchpads()   # each thread that runs a chunk has its own

    def master_shape(self, arrays: Sequence) -> tuple[int, ...] | None:
        """The run-time master shape of input arrays (or their shapes), or None when they break the
        compile-time broadcast pattern."""
        rank = self.rank
        master = [1] * rank
        aligned = []
        for a in arrays:
            a_shape = a if isinstance(a, tuple) else a.shape
            shape = (1,) * (rank - len(a_shape)) + a_shape
            aligned.append(shape)
            for d, n in enumerate(shape):
                if n != 1:
                    if master[d] not in (1, n):
                        return None
                    master[d] = n
        for shape, compiled in zip(aligned, self.compiled.input_shapes):
            for d, (n, c) in enumerate(zip(shape, compiled)):
                if (c == 1) != (n == 1) and master[d] != 1:
                    return None
        return tuple(master)

    def specialised(self, arrays: Sequence[np.ndarray]) -> "SnippetKernel | None":
        """A kernel compiled for the broadcast pattern these inputs have (size-1 dims the compile-time
        types did not know about), made once per pattern; None when the inputs do not broadcast."""
        pattern = tuple(tuple(n == 1 for n in (a if isinstance(a, tuple) else a.shape)) for a in arrays)
        if pattern in self.variants:
            return self.variants[pattern]
        with self._variants_lock:
            if pattern not in self.variants:
                self.variants[pattern] = self._compile_variant(arrays)
        return self.variants[pattern]

    def _compile_variant(self, arrays: Sequence[np.ndarray]) -> "SnippetKernel | None":
        body = self.node.attrs["body"]
        types = [TensorType(v.type.dtype, tuple(1 if n == 1 else (d if d != 1 else None)
                                                for n, d in zip(a if isinstance(a, tuple) else a.shape, v.type.shape)))
                 for v, a in zip(body.inputs, arrays)]
        made = compile_retyped(body, types, self.options)
        if made is None:
            return None
        kernel = SnippetKernel(self.node, made[0], self.fallback, self.options)
        return kernel if kernel.master_shape(arrays) is not None else None

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = [np.ascontiguousarray(a) for a in inputs]
        master = self.master_shape(arrays)
        if master is None:
            variant = self.specialised(arrays)
            return variant(arrays) if variant is not None else self.fallback(inputs)
        outs = [np.empty(tuple(1 if b else n for b, n in zip(bcast, master)), dt)
                 for bcast, dt in zip(self.out_broadcast, self.out_dtypes)]
        if any(o.size for o in outs):   # an empty reduced axis still fills its (non-empty) outputs
            self._launch(arrays, outs, master)
        return [o.reshape(o.shape[self.rank - r:]) for o, r in zip(outs, self.out_ranks)]

    def pitched_inputs(self) -> tuple[int, ...]:
        """The inputs the body marks (`MarkPitchedInputs`): the kernel takes their row pitch as an argument
        (checked mode verifies accesses against contiguous buffers: it takes copies)."""
        return () if self.compiled.kernel.checked else self.pitched

    def dims(self, master: Sequence[int], inputs: Sequence) -> ctypes.Array:
        """The kernel's `dims` argument: the master shape, then each pitched input's row pitch (an input given
        by its shape alone, not yet known: its rows' length)."""
        pitches = [pitched_rows(a) if isinstance(a, np.ndarray) else a[-1] for a in (inputs[i] for i in self.pitched)]
        return (ctypes.c_int64 * (self.rank + len(pitches)))(*master, *pitches)

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        arrays = [a if self.reads_in_place(i, a) else np.ascontiguousarray(a) for i, a in enumerate(inputs)]
        master = self.master_shape(arrays)
        if master is None:
            variant = self.specialised(arrays)
            if variant is not None:
                variant.run_into(arrays, outputs)
            else:
                super().run_into(inputs, outputs)
        elif any(o.size for o in outputs):
            self._launch(arrays, outputs, master)

    def _launch(self, arrays: Sequence[np.ndarray], outs: Sequence[np.ndarray], master: tuple[int, ...]) -> None:
        ptrs = (ctypes.c_void_p * (len(arrays) + len(outs)))(*[a.ctypes.data for a in arrays],
                                                              *[o.ctypes.data for o in outs])
        dims = self.dims(master, arrays)
        domain = 1
        for d in master[:self.compiled.parallel_rank]:
            domain *= d
        fn = self.fn
        self.calls += 1
        row_bytes = master[-1] * 4 * self.compiled.scratch_rows
        if self.compiled.kernel.checked:
            self._launch_checked(ptrs, dims, domain, [*arrays, *outs], row_bytes)
        elif int(np.prod(master)) < PARALLEL_MIN_ELEMENTS:
            fn(ptrs, dims, 0, domain, self._scratchpad(row_bytes))
        else:
            launch_parallel(fn, ptrs, dims, domain, row_bytes, self._scratchpad)

    def _launch_checked(self, ptrs, dims, domain: int, buffers: Sequence[np.ndarray], scratch_bytes: int) -> None:
        """Checked mode: one thread, every access verified; a violation raises naming the expression."""
        sizes = (ctypes.c_int64 * (len(buffers) + 1))(*[b.nbytes for b in buffers], scratch_bytes)
        error = (ctypes.c_int64 * 3)(-1, -1, -1)
        self.fn(ptrs, dims, 0, domain, self._scratchpad(scratch_bytes), sizes, error)
        if error[0] >= 0:
            kernel = self.compiled.kernel
            expr = kernel.expressions.get(error[0], f"expression {error[0]}")
            what = (f"input {error[1]}" if error[1] < len(self.compiled.input_shapes) else
                    f"output {error[1] - len(self.compiled.input_shapes)}" if error[1] < len(buffers)
                    else "the scratchpad")
            raise KernelBoundsError(f"kernel {kernel.name} of {self.node.label()}: {expr} accessed {what} at byte "
                                    f"offset {error[2]}, outside its {sizes[error[1]]} bytes")

    def bind(self, in_shapes: Sequence[tuple], fixed: dict[int, np.ndarray], n_outputs: int) -> "BoundLaunch | None":
        """A launcher with the argument arrays built once, for inputs of these shapes. `fixed` maps
        argument positions (inputs, then outputs) to arrays whose memory never changes (arena,
        constants); the others are read from the slots at each call."""
        if self.compiled.kernel.checked:
            return None   # checked kernels take their sizes and error record per call
        kernel: SnippetKernel | None = self
        if self.master_shape(in_shapes) is None:
            kernel = self.specialised(in_shapes)
        master = kernel.master_shape(in_shapes) if kernel is not None else None
        if master is None or 0 in master:
            return None   # unusual shapes take the general path
        return BoundLaunch(kernel, master, fixed, len(in_shapes) + n_outputs, in_shapes)

    def inplace_inputs(self) -> tuple[int, ...]:
        """Purely elementwise kernels (elementwise ops only: one loop nest plus its tail, no reductions
        or scratch buffers) read each element once, before storing that element of their one output, so
        the output may overwrite any input of its shape (not broadcast). `inplace=False` turns it off."""
        from ...snippets.supported_ops import ELEMENTWISE_OPS
        c = self.compiled
        if (not self.options.get("inplace", True) or len(c.output_shapes) != 1 or c.scratch_rows
                or not all(n.op in ELEMENTWISE_OPS for n in self.node.attrs["body"].nodes)):
            return ()
        return tuple(i for i, shape in enumerate(c.input_shapes) if tuple(shape) == tuple(c.output_shapes[0]))


class BoundLaunch:
    """A snippet call with its pointer and dims arrays prepared: the pointers of arguments whose arrays
    may change between runs (feeds, output buffers) are set again only when they do (`PreparedLaunch`)."""

    def __init__(self, kernel: SnippetKernel, master: tuple[int, ...], fixed: dict[int, np.ndarray], n_args: int,
                 in_shapes: Sequence[tuple]):
        self.kernel = kernel
        self.ptrs = (ctypes.c_void_p * n_args)(*[fixed[i].ctypes.data if i in fixed else 0 for i in range(n_args)])
        self.dynamic = [i for i in range(n_args) if i not in fixed]
        self.n_inputs = n_args - len(kernel.out_dtypes)
        self.dims = kernel.dims(master, [fixed.get(i, shape) for i, shape in enumerate(in_shapes)])
        self.domain = math.prod(master[:kernel.compiled.parallel_rank])
        self.parallel = math.prod(master) >= PARALLEL_MIN_ELEMENTS
        self.scratch_bytes = master[-1] * 4 * kernel.compiled.scratch_rows
        self.fixed = fixed   # keeps the fixed arrays alive as long as their pointers are used
        self.native = get_native_pool() if self.parallel else None
        self._pointed = PreparedLaunch(self._point, self._point_at_copies, self.dynamic)
        # a request runs on one thread at a time, so its serial launches can own their scratchpad
        self.serial_pad = aligned_empty(self.scratch_bytes) if self.scratch_bytes and not self.parallel else None
        self.serial_pad_address = self.serial_pad.ctypes.data if self.serial_pad is not None else None
        if self.native is not None:   # addresses and per-thread scratchpads fixed once
            self.fn_address = ctypes.cast(kernel.fn, ctypes.c_void_p).value
            self.scratch = scratchpads(self.native.threads, self.scratch_bytes)
            self.args = (ctypes.addressof(self.ptrs), ctypes.addressof(self.dims), self.domain, 0,
                         self.scratch.base, self.scratch.stride)

    def __call__(self, args: list[np.ndarray]) -> None:
        self._pointed(args)

    def native_step(self, args: list[np.ndarray]) -> NativeStep | None:
        """This launch as one native call, its pointers set for `args` (see `NativeStep`)."""
        if self._pointed.prepared(args) is None or self.native_call is None:
            return None
        return NativeStep(self, counted=self.kernel)

    def run(self) -> None:
        self._launch([])

    @property
    def native_call(self) -> NativeCall | None:
        if not self.parallel:
            return NativeCall(ctypes.cast(self.kernel.fn, ctypes.c_void_p).value, ctypes.addressof(self.ptrs),
                              ctypes.addressof(self.dims), self.domain, 1, self.serial_pad_address or 0, 0, False)
        return None if self.native is None else self.native.call(self.fn_address, *self.args)

    def _point(self, args: list[np.ndarray]):
        """Point at the arguments themselves, unless an input is neither contiguous nor pitched rows the
        kernel takes."""
        if any(i < self.n_inputs and not self.kernel.reads_in_place(i, args[i]) for i in self.dynamic):
            return None
        for i in self.dynamic:
            self.ptrs[i] = args[i].ctypes.data
        self._set_pitches(args)
        return self._launch

    def _point_at_copies(self, args: list[np.ndarray]) -> None:
        for i in self.dynamic:
            if i < self.n_inputs and not args[i].flags.c_contiguous:
                args[i] = np.ascontiguousarray(args[i])   # held by `args` in the caller until the call returns
            self.ptrs[i] = args[i].ctypes.data
        self._set_pitches(args)
        self._launch(args)

    def _set_pitches(self, args: list[np.ndarray]) -> None:
        for j, i in enumerate(self.kernel.pitched):
            if i in self.dynamic:
                self.dims[self.kernel.rank + j] = pitched_rows(args[i])

    def _launch(self, args: list[np.ndarray]) -> None:
        k = self.kernel
        k.calls += 1
        if not self.parallel:
            k.fn(self.ptrs, self.dims, 0, self.domain, self.serial_pad_address)
        elif self.native is not None:
            self.native.run(self.fn_address, *self.args)
        else:
            fn, ptrs, dims, scratch_bytes = k.fn, self.ptrs, self.dims, self.scratch_bytes
            get_pool().parallel_for(lambda lo, hi: fn(ptrs, dims, lo, hi, k._scratchpad(scratch_bytes)),
                                    self.domain)


def build_snippet(node: Node, options: dict) -> Kernel:
    """The generated kernel of a Subgraph: the attention kernel for an attention block (pattern "mha"),
    else its body through the Snippets compiler."""
    if node.attrs.get("pattern") == "mha":
        return build_attention(node, options)
    return SnippetKernel(node, compile_body(node.attrs["body"], options), build_reference(node, options), options)


SNIPPET = Implementation("snippet", lambda node, options: node.op == "Subgraph", build_snippet)

__all__ = ["SnippetKernel", "build_snippet"]
