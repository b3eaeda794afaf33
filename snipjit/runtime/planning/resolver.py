"""Shape resolution: the concrete type of every value for one signature of input shapes.

Dynamic models compile once; the first run with a new input-shape signature resolves the graph for it:
types are inferred node by node with concrete input types, and shape computations (nodes whose inputs
are all known small integer tensors, such as `Shape → Gather → Concat` chains) are evaluated right away,
so their steps never run per inference. The result is cached by the program, per signature.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...ir.graph import Graph, TensorType
from ...ops import Category, OpContext, get_op
from ...ops.registry import OpError

KNOWN_VALUE_LIMIT = 4096   # elements: an integer tensor this small, computed from known values, is evaluated now


@dataclass
class Resolution:
    types: list[TensorType | None]                           # per slot; None: known only when it runs
    values: dict[int, np.ndarray] = field(default_factory=dict)   # slots evaluated at resolution time
    skipped: set[int] = field(default_factory=set)           # steps whose outputs are all in `values`


def resolve(program, input_types: list[TensorType]) -> Resolution:
    types: list[TensorType | None] = [None] * program.num_slots
    values: dict[int, np.ndarray] = {}
    for slot, data in program.constants:
        types[slot] = TensorType.of(data.dtype, data.shape)
        values[slot] = data
    for slot, t in zip(program.input_slots, input_types):
        types[slot] = t
    res = Resolution(types, {})
    for index, step in enumerate(program.steps):
        node = step.node
        in_types = [types[s] if s >= 0 else None for s in step.in_slots]
        in_values = [values.get(s) if s >= 0 else None for s in step.in_slots]
        if any(t is None for s, t in zip(step.in_slots, in_types) if s >= 0):
            continue   # an input is only known at run time: so are the outputs
        opdef = get_op(node.op, node.domain)
        if _evaluate_now(opdef, step, in_types, in_values):
            ctx = OpContext(node, opdef.resolve_attrs(node), in_types, in_values, [o.type for o in node.outputs])
            with np.errstate(all="ignore"):
                outs = opdef.run(ctx, in_values)
            for s, o, v in zip(step.out_slots, outs, node.outputs):
                o = o.astype(v.type.dtype.np, copy=False)
                values[s] = o
                res.values[s] = o
                types[s] = TensorType.of(o.dtype, o.shape)
            res.skipped.add(index)
            continue
        for s, t in zip(step.out_slots, _infer(node, opdef, in_types, in_values)):
            types[s] = t if t is not None and t.is_static else None
    return res


def _evaluate_now(opdef, step, in_types, in_values) -> bool:
    if opdef.category in (Category.HEAVY, Category.FUSED):
        return False
    if opdef.category == Category.SHAPE and opdef.name in ("Shape", "Size"):
        return True
    present = [v for s, v in zip(step.in_slots, in_values) if s >= 0]
    if not present or any(v is None for v in present):
        return False
    return all(v.size <= KNOWN_VALUE_LIMIT for v in present) and all(
        not np.issubdtype(v.dtype, np.floating) for v in present)


def _infer(node, opdef, in_types, in_values) -> list[TensorType | None]:
    if node.op == "Subgraph":
        return _infer_subgraph(node, in_types)
    ctx = OpContext(node, opdef.resolve_attrs(node), in_types, in_values, [o.type for o in node.outputs])
    try:
        return list(opdef.infer(ctx))
    except (OpError, ValueError) as e:
        raise OpError(f"{node.label()}: cannot run with input types "
                      f"{[str(t) for t in in_types]}: {e}") from None


def _infer_subgraph(node, in_types) -> list[TensorType | None]:
    body: Graph = node.attrs["body"].copy()
    for v, t in zip(body.inputs, in_types):
        v.type = t
    for v in body.values():
        if v.producer is not None:
            v.type = None
    from ...ops.infer_shapes import infer_shapes
    infer_shapes(body)
    return [v.type for v in body.outputs]
