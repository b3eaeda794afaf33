"""Canonicalization: align every body value to the master rank and record the input layouts.

Kernels index all ports with one loop nest over the master shape, so each input gets its shape padded
with leading 1s (broadcast made explicit as size-1 dims); scalar bodies get rank 1. The dims a Brgemm walks
itself (its operands' K, see `ops.own_dims`) are not the master's. Input layouts are planar unless the caller
gives them or FuseTransposeBrgemm recorded one; they are padded with the ranks and kept in
`body.meta["layouts"]` (and those of outputs in `body.meta["output_layouts"]`) for the Linear IR and
PropagateLayout.
"""
from __future__ import annotations

from ...ir.graph import Graph, TensorType
from ...ir.shape import broadcast_shapes
from ..ops import domain_shape, own_dims
from ..pass_manager import BodyPass


class Canonicalization(BodyPass):
    name = "Canonicalization"

    def __init__(self, input_layouts: list[tuple[int, ...]] | None = None):
        self.input_layouts = input_layouts

    def run(self, body: Graph) -> bool:
        own = own_dims(body)
        master = broadcast_shapes(*(domain_shape(v.type.shape, own.get(id(v), ())) for v in body.values()))
        if master is None:
            raise ValueError(f"body '{body.name}': ranks must be known to canonicalize")
        if not master:
            master = (1,)   # scalars run as one element of a rank-1 loop nest
        rank = len(master)
        changed = False
        for v in body.values():
            shape = v.type.shape
            if shape is None or len(shape) > rank:
                raise ValueError(f"body '{body.name}': value '{v.name}' of {v.type} does not fit the "
                                 f"master shape {list(master)}")
            if len(shape) < rank:
                v.type = TensorType(v.type.dtype, (1,) * (rank - len(shape)) + tuple(shape))
                if v.data is not None:
                    v.data = v.data.reshape(v.type.shape)
                changed = True
        planar = tuple(range(rank))
        recorded = self.input_layouts or body.meta.get("layouts") or [None] * len(body.inputs)
        layouts = [_padded(layout, rank) for layout in recorded]
        outputs = [_padded(layout, rank) for layout in body.meta.get("output_layouts") or [None] * len(body.outputs)]
        for layout in layouts + outputs:
            if sorted(layout) != list(planar):
                raise ValueError(f"body '{body.name}': layout {layout} is not a permutation of rank {rank}")
        body.meta["layouts"], body.meta["output_layouts"] = layouts, outputs
        body.meta["master_shape"] = tuple(master)
        return changed


def _padded(layout: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """A layout of a value of lower rank (None: planar) for the value padded with leading dims."""
    if layout is None:
        return tuple(range(rank))
    lead = rank - len(layout)
    return tuple(range(lead)) + tuple(d + lead for d in layout)
