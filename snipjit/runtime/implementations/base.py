"""What every implementation shares: the `Implementation` record, the `Kernel` a step runs, prepared
launches, and the always-available `reference` implementation (the op's NumPy kernel).

Each implementation says which nodes it accepts and builds a kernel for one node; the list the program
asks, in order, is `implementations.choice.IMPLEMENTATIONS`.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...ir.graph import Node
from ...ops import get_op
from . import strided_copy
from .held_weights import HeldWeight


@dataclass(frozen=True)
class Implementation:
    kind: str
    accepts: Callable[[Node, dict], bool]
    build: Callable[[Node, dict], Callable]


class NotApplicable(Exception):
    """Raised by an implementation's build when it cannot serve this node after all; the next one is
    tried."""


def choose_implementation(node: Node, options: dict, implementations: Sequence[Implementation]
                          ) -> tuple[str, Callable]:
    """The first of `implementations` (in order) that accepts the node, among those `options` allows."""
    allowed = options.get("implementations")
    for impl in implementations:
        if allowed is not None and impl.kind not in allowed:
            continue
        if impl.accepts(node, options):
            try:
                return impl.kind, impl.build(node, options)
            except NotApplicable:
                continue
    raise ValueError(f"{node.label()}: no implementation accepts this node")


class Kernel:
    """A step's code. `kernel(inputs)` returns new output arrays; `run_into(inputs, outputs)` writes
    into arrays the caller planned (by default through a copy: implementations override it)."""

    def __call__(self, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        raise NotImplementedError

    def run_into(self, inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        for out, result in zip(outputs, self(inputs)):
            np.copyto(out, result.reshape(out.shape))

    def bind(self, in_shapes: Sequence[tuple], fixed: dict[int, np.ndarray], n_outputs: int):
        """A launcher `launcher(arrays)` (inputs then outputs) with the call prepared once for inputs of
        these shapes, `fixed` mapping argument positions to arrays that never change (arena, constants);
        None when the kernel has none for this call. Kernels that override it (`binds`) always write
        planned memory, so their launches can be prepared."""
        return None

    @property
    def binds(self) -> bool:
        return type(self).bind is not Kernel.bind

    def prepared_launch(self, prepare, in_shapes, fixed, n_outputs: int) -> "PreparedLaunch":
        """`bind`'s launcher for a kernel with one output: `prepare`'s call, else `run_into`, prepared again
        when an array at a position not in `fixed` changes."""
        changing = [i for i in range(len(in_shapes) + n_outputs) if i not in fixed]
        return PreparedLaunch(prepare, lambda arrays: self.run_into(arrays[:-1], arrays[-1:]), changing)

    def native_jobs(self) -> list:
        """The generated kernels (`object_cache.NativeJob`) its first runs will load, as far as the step
        tells: compiled ahead, in parallel, by `planning.compile_workers` (a kernel it does not name is
        compiled when first used)."""
        return []

    def holds_input(self, index: int) -> bool:
        """Whether the kernel keeps its own form of constant input `index` (e.g. packed weights) and
        never reads the array it is given, so the program may release the original."""
        return False

    def held(self, index: int) -> "HeldWeight":
        """Its own form of constant input `index` (see `held_weights`), for kernels that hold it."""
        raise NotImplementedError(f"{type(self).__name__} holds no input {index}")

    @property
    def writes_channel_slices(self) -> bool:
        """Whether `run_into` and `bind` take an output that is a slice of a wider tensor's last axis
        (the program then lets it write straight into a Concat's output)."""
        return False

    def pitched_inputs(self) -> tuple[int, ...]:
        """Indices of inputs that `run_into` and `bind` take as a slice of a wider tensor's last axis (rows
        of their elements farther apart than their length: `pitched_rows`), so the program may let a
        Concat assemble them in place, where this kernel reads them too."""
        return ()

    def reads_in_place(self, index: int, a: np.ndarray) -> bool:
        """Whether input `index` can be read where it is: contiguous, or pitched rows the kernel takes there
        (else it needs a contiguous copy)."""
        return a.flags.c_contiguous or (index in self.pitched_inputs() and pitched_rows(a) is not None)

    def inplace_inputs(self) -> tuple[int, ...]:
        """Indices of inputs whose memory the (single) output may be written over, when the plan finds
        the input dead after this step and of the output's size and dtype. A kernel claims an input only
        when it reads each element of it before writing that element of the output and never again."""
        return ()


def pitched_rows(a: np.ndarray) -> int | None:
    """The elements from one row (innermost dim) of `a` to the next, when its rows are contiguous and evenly
    spaced and the dims outside them whole rows apart (C-contiguous, or a slice of the last axis of a
    C-contiguous array); else None."""
    if a.flags.c_contiguous:
        return a.shape[-1] if a.ndim else 1
    if a.ndim < 2 or a.strides[-1] != a.itemsize or a.shape[-2] == 1 or a.strides[-2] % a.itemsize:
        return None
    pitch = expected = a.strides[-2]
    if pitch < a.shape[-1] * a.itemsize:
        return None
    for n, step in zip(reversed(a.shape[:-1]), reversed(a.strides[:-1])):
        if n != 1 and step != expected:
            return None
        expected *= n
    return pitch // a.itemsize


class NativeStep:
    """A prepared call that is launches of compiled kernels and nothing else (no Python work around them),
    so a run of such steps can go to the native pool as one `JobSequence`. Each launch has `run()` and its
    `native_call`; `counted`, if given, counts the launches (`calls`) of a snippet kernel."""

    def __init__(self, *launches, counted=None):
        self.launches, self.counted = launches, counted

    def __call__(self, arrays: list | None = None) -> None:
        for launch in self.launches:
            launch.run()

    @property
    def native_calls(self) -> list | None:
        """The launches' `NativeCall`s, or None when one of them has none."""
        calls = [getattr(launch, "native_call", None) for launch in self.launches]
        return None if None in calls else calls


class PreparedLaunch:
    """A step launcher that prepares its call from the arrays of a first call and reruns it while later
    calls pass the same array objects (arena and constant arrays always are; feeds and output buffers
    when the caller reuses them). `prepare(arrays)` gives the call to rerun, or None when the arrays take
    the kernel's general way, `fallback(arrays)`; arrays are the inputs, then the outputs. The call
    is given the arrays again rather than holding them: a strong reference would keep an output buffer
    from being recycled. `watched` limits the identity test to the positions that can change."""

    def __init__(self, prepare: Callable[[list], Callable[[list], None] | None], fallback: Callable[[list], None],
                 watched: Sequence[int] | None = None):
        self.prepare, self.fallback = prepare, fallback
        self.watched = None if watched is None else list(watched)
        self.call: Callable[[list], None] | None = None
        self.seen: list[tuple[int, weakref.ref]] | None = None

    def __call__(self, arrays: list) -> None:
        if self.seen is None:
            self._prepare(arrays)
        else:
            for i, r in self.seen:   # (a plain loop: launches are microseconds, a generator adds a tenth)
                if r() is not arrays[i]:
                    self._prepare(arrays)
                    break
        (self.call or self.fallback)(arrays)

    def prepared(self, arrays: list) -> Callable[[list], None] | None:
        """The call prepared for these arrays (None: they take the fallback)."""
        if self.seen is None or any(r() is not arrays[i] for i, r in self.seen):
            self._prepare(arrays)
        return self.call

    def native_step(self, arrays: list) -> NativeStep | None:
        """The call prepared for these arrays, when it is one native launch (see `NativeStep`)."""
        call = self.prepared(arrays)
        return call if isinstance(call, NativeStep) and call.native_calls is not None else None

    def _prepare(self, arrays: list) -> None:
        self.call = self.prepare(arrays)
        self.seen = [(i, _absent if arrays[i] is None else weakref.ref(arrays[i])) for i in
                     (range(len(arrays)) if self.watched is None else self.watched)]


def _absent() -> None:
    """What an absent optional input's reference gives: None, as the argument always is."""
    return None


class ReferenceKernel(Kernel):
    """The op's NumPy reference kernel, with attributes resolved once at compile time."""

    def __init__(self, node: Node):
        opdef = get_op(node.op, node.domain)
        self.fn = opdef.reference
        self.view = opdef.view
        self.ctx = opdef.context(node, with_values=False)
        self.dtypes = [o.type.dtype.np for o in node.outputs]

    def __call__(self, inputs):
        out = self.fn(self.ctx, *inputs)
        if not isinstance(out, (tuple, list)):
            out = np.asarray(out)
            return [out if out.dtype == self.dtypes[0] else out.astype(self.dtypes[0])]
        return [np.asarray(o).astype(dt, copy=False) for o, dt in zip(out, self.dtypes)]

    def run_into(self, inputs, outputs) -> None:
        if self.view is None:
            super().run_into(inputs, outputs)
        else:   # movement ops: one copy of each view into its planned output, no temporary
            views = self.view(self.ctx, *inputs)
            for view, out in zip(views if isinstance(views, tuple) else (views,), outputs):
                if not strided_copy.copy_into(view, out):
                    np.copyto(out, view.reshape(out.shape), casting="unsafe")

    @property
    def binds(self) -> bool:
        """Movement ops whose view depends on the data input alone (not on values of other inputs, which
        may change between runs in the same arrays) prepare their copy once."""
        return self.view is not None and all(v is None or v.is_constant for v in self.ctx.node.inputs[1:])

    def bind(self, in_shapes, fixed, n_outputs) -> PreparedLaunch | None:
        if not self.binds or n_outputs != 1:
            return None

        def prepare(arrays: list):
            launch = strided_copy.prepare(self.view(self.ctx, *arrays[:-1]), arrays[-1])
            return NativeStep(launch) if launch is not None else None

        return PreparedLaunch(prepare, lambda arrays: self.run_into(arrays[:-1], arrays[-1:]))


def build_reference(node: Node, options: dict) -> Kernel:
    return ReferenceKernel(node)


REFERENCE = Implementation("reference", lambda node, options: True, build_reference)

__all__ = ["Implementation", "Kernel", "NativeStep", "PreparedLaunch", "ReferenceKernel", "NotApplicable", "REFERENCE",
           "choose_implementation"]
