"""The registry of node implementations, with priorities.

Each implementation says which nodes it accepts and builds a kernel for one node. The program asks them
in priority order (highest first) and takes the first that accepts: a generated `snippet` kernel before
`blas`, before the always-available `reference` kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..ir.graph import Node
from ..ops import get_op
from .strided_copy import copy_into


@dataclass(frozen=True)
class Implementation:
    kind: str
    priority: int
    accepts: Callable[[Node, dict], bool]
    build: Callable[[Node, dict], Callable]


class NotApplicable(Exception):
    """Raised by an implementation's build when it cannot serve this node after all; the next one is
    tried."""


_IMPLEMENTATIONS: list[Implementation] = []


def register_implementation(impl: Implementation) -> None:
    _IMPLEMENTATIONS.append(impl)
    _IMPLEMENTATIONS.sort(key=lambda i: -i.priority)


def choose_implementation(node: Node, options: dict) -> tuple[str, Callable]:
    allowed = options.get("implementations")
    for impl in _IMPLEMENTATIONS:
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

    def holds_input(self, index: int) -> bool:
        """Whether the kernel keeps its own form of constant input `index` (e.g. packed weights) and
        never reads the array it is given, so the program may release the original."""
        return False

    def inplace_inputs(self) -> tuple[int, ...]:
        """Indices of inputs whose memory the (single) output may be written over, when the plan finds
        the input dead after this step and of the output's size and dtype. A kernel claims an input only
        when it reads each element of it before writing that element of the output and never again."""
        return ()


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
        else:   # movement ops: one copy of the view into the planned output, no temporary
            view = self.view(self.ctx, *inputs)
            if not copy_into(view, outputs[0]):
                np.copyto(outputs[0], view.reshape(outputs[0].shape), casting="unsafe")


def build_reference(node: Node, options: dict) -> Kernel:
    return ReferenceKernel(node)


register_implementation(Implementation("reference", 0, lambda node, options: True, build_reference))

__all__ = ["Implementation", "Kernel", "ReferenceKernel", "NotApplicable", "register_implementation",
           "choose_implementation"]
