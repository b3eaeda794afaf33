"""Weights a kernel holds in its own form (packed for its microkernel): the graph's array rebuilt from
that form, and packed forms handed to the kernels being built.

A program releases the graph's copy of such a constant (`planning.program.release_held_constants`), so
the packed form is the only one. A saved model stores it as a `HeldWeight`; loading it on the machine
it was packed for offers the forms to the kernels being built (`offering`), which take them instead of
packing again; anywhere else `original()` gives the graph's array back, for a build from scratch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.graph import Value
from ..scoped import ThreadScoped
from . import conv_launch


@dataclass(frozen=True)
class HeldWeight:
    packed: object                                # gemm_launch.PackedB, conv_launch.PackedConv, ...
    transposed: bool = False                      # the graph's array is the packed matrix transposed
    kernel_size: tuple[int, int] | None = None    # (KH, KW) of a PackedConv, which keeps only KH·KW

    def original(self) -> np.ndarray:
        if isinstance(self.packed, conv_launch.PackedConv):
            w = self.packed.unpack(*self.kernel_size)
        else:
            w = self.packed.unpack()
        return np.ascontiguousarray(w.T if self.transposed else w)


offering: ThreadScoped[dict[str, HeldWeight]] = ThreadScoped()
"""`with offering(forms):` kernels built on this thread inside the block take the packed form offered for
their constant (by value name) instead of packing it."""


def offered(value: Value, kind: type, transposed: bool = False) -> object | None:
    """The packed form of `kind` offered for constant `value` (of the graph's array transposed, or not),
    if any."""
    forms = offering.get()
    held = forms.get(value.name) if forms else None
    if held is None or not isinstance(held.packed, kind) or held.transposed != transposed:
        return None
    return held.packed
