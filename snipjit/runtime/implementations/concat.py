"""The `copy` implementation of Concat into planned memory: each input copied once, straight into its
slice of the output (the generated strided-copy kernel, rows split over the native pool), instead of the
reference joining the inputs into a new array that is then copied into the plan's. DenseNet's 58 Concats,
each of the block's growing feature map, took 16% of its time that way."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...ir.graph import Node
from ...ops._indexing import norm_axis
from . import strided_copy
from .base import Implementation, Kernel, NativeStep, PreparedLaunch, ReferenceKernel


class ConcatKernel(Kernel):
    def __init__(self, node: Node):
        self.reference = ReferenceKernel(node)

    def __call__(self, inputs):
        return self.reference(inputs)

    def _slices(self, inputs: Sequence[np.ndarray], out: np.ndarray) -> tuple[int, list[int]] | None:
        """(axis, each input's first index along it in the output), when the inputs fit the output."""
        axis = norm_axis(self.reference.ctx, self.reference.ctx.attrs["axis"], out.ndim)
        starts, start = [], 0
        for x in inputs:
            if x.ndim != out.ndim or x.dtype != out.dtype or x.shape[:axis] != out.shape[:axis] \
                    or x.shape[axis + 1:] != out.shape[axis + 1:]:
                return None
            starts.append(start)
            start += x.shape[axis]
        return (axis, starts) if start == out.shape[axis] else None

    def run_into(self, inputs, outputs) -> None:
        out = outputs[0]
        found = self._slices(inputs, out)
        if found is None:   # (the reference names what does not fit)
            np.copyto(out, self.reference(inputs)[0])
            return
        axis, starts = found
        for x, start in zip(inputs, starts):
            launch = strided_copy.prepare_slice(np.ascontiguousarray(x), out, axis, start) \
                if out.flags.c_contiguous else None
            if launch is not None:
                launch.run()
            else:
                np.copyto(out[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)], x)

    def bind(self, in_shapes, fixed, n_outputs) -> PreparedLaunch:
        """Every input copied by a prepared kernel launch (none left to NumPy): one native step."""
        def prepare(arrays: list):
            *inputs, out = arrays
            found = self._slices(inputs, out)
            if found is None or not all(x.flags.c_contiguous for x in inputs) or not out.flags.c_contiguous:
                return None
            launches = [strided_copy.prepare_slice(x, out, found[0], start)
                        for x, start in zip(inputs, found[1]) if x.size]
            return NativeStep(*launches) if launches and None not in launches else None

        return self.prepared_launch(prepare, in_shapes, fixed, n_outputs)


def accepts(node: Node, options: dict) -> bool:
    return node.op == "Concat" and not node.domain


COPY = Implementation("copy", accepts, lambda node, options: ConcatKernel(node))
