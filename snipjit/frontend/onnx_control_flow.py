"""Importing If, Loop and Scan: their bodies become Graph IR graphs whose reads of the enclosing graph
are explicit inputs.

A body is imported by an importer of its own whose lookups fall back to the enclosing importer: a name
the body uses but does not define becomes a body input (a capture) and, in the same order, an input of
the node (see `snipjit.ops.control_flow`). A body nested in a body captures through every level between.
The types of a body's formal inputs come from the node's inputs where the body does not declare them.
"""
from __future__ import annotations

import onnx

from ..ir.dtypes import boolean, i64
from ..ir.graph import Graph, TensorType, Value

CONTROL_FLOW = ("If", "Loop", "Scan")
MIN_OPSET = {"Scan": 9}   # Scan 8 had a batch axis and sequence lengths


def formal_input_types(op: str, inputs: list[Value | None], attrs: dict) -> list[TensorType | None]:
    """The types a body's formal inputs take from the node's inputs."""
    if op == "If":
        return []
    if op == "Loop":
        return [TensorType(i64, ()), TensorType(boolean, ())] + [v.type if v is not None else None for v in inputs[2:]]
    scans = attrs["num_scan_inputs"]
    states, sequences = inputs[:len(inputs) - scans], inputs[len(inputs) - scans:]
    axes = attrs.get("scan_input_axes") or [0] * scans
    slices = []
    for v, axis in zip(sequences, axes):
        shape = v.type.shape
        if shape is None:
            slices.append(TensorType(v.type.dtype, None))
        else:
            axis = axis + len(shape) if axis < 0 else axis
            slices.append(TensorType(v.type.dtype, tuple(d for k, d in enumerate(shape) if k != axis)))
    return [v.type for v in states] + slices


def import_control_flow(importer: "_Importer", proto: onnx.NodeProto, site: "_Site", opset: int,
                        inputs: list[Value | None], attrs: dict) -> tuple[list[Value | None], dict]:
    """The node's inputs (its own, then the captures) and attributes (the bodies as graphs, `captured`)."""
    if opset < MIN_OPSET.get(proto.op_type, 0):
        raise importer.error(site, f"{proto.op_type} of opset {opset} is not supported (from opset "
                                   f"{MIN_OPSET[proto.op_type]})")
    bodies: dict[str, tuple[Graph, list[str]]] = {}
    for a in proto.attribute:
        if a.type != onnx.AttributeProto.GRAPH:
            continue
        child = importer.child(a.g, formal_input_types(proto.op_type, inputs, attrs))
        bodies[a.name] = (child.graph(f"{site.name or proto.op_type}/{a.name}"), child.captured)
    names: list[str] = []
    for _, captured in bodies.values():
        names += [n for n in captured if n not in names]
    for name, (body, captured) in bodies.items():
        formal = body.inputs[:len(body.inputs) - len(captured)]
        by_name = dict(zip(captured, body.inputs[len(formal):]))
        outer = {n: importer.lookup_outer(n, site) for n in names}
        body.inputs = formal + [by_name.get(n) or Value(n, outer[n].type) for n in names]
        attrs[name] = body
    attrs["captured"] = len(names)
    return inputs + [importer.lookup_outer(n, site) for n in names], attrs
