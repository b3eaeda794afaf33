"""Function expansion: an ONNX op without a snipjit definition, whose schema defines it as a function of
simpler ops, is imported as the nodes of that function body.

ONNX defines many composite ops (Swish, RMSNormalization, NegativeLogLikelihoodLoss, Attention, ...) by a
function body in their schema, either fixed (`OpSchema.has_function`) or built for the node at hand from
its attributes and input types (`has_context_dependent_function`). Runtimes without a dedicated kernel run
the body instead, and so does snipjit: `expand` returns the body's nodes, rewritten for one call site:

* the function's formal inputs and outputs become the node's actual value names (a missing optional input
  stays missing; an omitted optional output gets a fresh name), every other value gets a fresh name, so
  two expansions of one function never collide;
* attributes that refer to a function attribute (`ref_attr_name`) take the node's attribute of that name,
  else the function's default (`FunctionProto.attribute_proto`), else the schema's default, else they are
  left out, as the ONNX function semantics say;
* the body's nodes keep their own opset imports (`Expansion.opsets`): a body written against opset 18
  is read as opset 18 even in an opset 21 model.

The body's nodes are then imported like any other node by the frontend, so a body node whose op is itself
a function (SoftmaxCrossEntropyLoss uses NegativeLogLikelihoodLoss) is expanded in turn, and errors (an op
of the body that snipjit lacks) name the original node. The function version used is the latest one not
newer than the model's opset for the op's domain.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import onnx
import onnx.defs

from ..ir.graph import TensorType


@dataclass
class Expansion:
    """The nodes replacing one node, in order, and the opset versions they are written against."""
    function: str
    nodes: list[onnx.NodeProto]
    opsets: dict[str, int]


class ExpansionError(ValueError):
    """The schema's function body could not be built for this node."""


def expand(node: onnx.NodeProto, opset: int, input_types: list[TensorType | None],
           fresh_name: Callable[[str], str]) -> Expansion | None:
    """The function body of `node` (an op of a domain imported at `opset`) for this call site, or None
    when its schema defines no function. `input_types` are the types of the node's inputs (None where
    missing or unknown): context-dependent bodies depend on them. `fresh_name(hint)` returns a value name
    not used anywhere else in the model."""
    schema = _schema(node.op_type, _canonical(node.domain), opset)
    if schema is None:
        return None
    found = _function_version(schema, opset)
    if found is None:
        return None
    version, context_dependent = found
    if context_dependent:
        types = [_type_proto(t).SerializeToString() for t in input_types]
        try:
            body = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(),
                                                                            types)
        except Exception as e:  # the C++ body builder rejects attributes or types it cannot handle
            raise ExpansionError(f"cannot build the function body of {node.op_type}: {e}") from None
        function = onnx.FunctionProto()
        function.ParseFromString(body)
    else:
        function = onnx.FunctionProto()
        function.ParseFromString(schema.get_function_with_opset_version(version))
    if not function.node and not function.output:  # a builder may decline (returns an empty body)
        raise ExpansionError(f"the schema of {node.op_type} gives no function body for this node")
    return Expansion(node.op_type, _instantiate(function, node, schema, fresh_name),
                     {_canonical(o.domain): o.version for o in function.opset_import})


# ---- schema look-up ---------------------------------------------------------------------------------
def _schema(op: str, domain: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, opset, domain)
    except onnx.defs.SchemaError:
        return None


def _function_version(schema: onnx.defs.OpSchema, opset: int) -> tuple[int, bool] | None:
    """The latest function version at most `opset`, and whether it is context-dependent."""
    candidates = []
    if schema.has_function:
        candidates += [(v, False) for v in schema.function_opset_versions if v <= opset]
    if schema.has_context_dependent_function:
        candidates += [(v, True) for v in schema.context_dependent_function_opset_versions if v <= opset]
    return max(candidates) if candidates else None


def _canonical(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _type_proto(t: TensorType | None) -> onnx.TypeProto:
    """The ONNX form of a value's type; an empty TypeProto when unknown (or the input is missing)."""
    if t is None:
        return onnx.TypeProto()
    shape = None if t.shape is None else [d if isinstance(d, (int, str)) else None for d in t.shape]
    return onnx.helper.make_tensor_type_proto(t.dtype.onnx, shape)


# ---- instantiation ----------------------------------------------------------------------------------
def _instantiate(function: onnx.FunctionProto, call: onnx.NodeProto, schema: onnx.defs.OpSchema,
                 fresh_name: Callable[[str], str]) -> list[onnx.NodeProto]:
    """The body's nodes with values renamed for the call site and attribute references resolved."""
    prefix = call.name or call.op_type
    names: dict[str, str] = {}
    for i, formal in enumerate(function.input):
        names[formal] = call.input[i] if i < len(call.input) else ""
    for i, formal in enumerate(function.output):
        actual = call.output[i] if i < len(call.output) else ""
        names[formal] = actual or fresh_name(f"{prefix}/{formal}")

    def rename(name: str) -> str:
        if not name:
            return ""
        if name not in names:
            names[name] = fresh_name(f"{prefix}/{name}")
        return names[name]

    attributes = _attribute_values(function, call, schema)
    nodes = []
    for k, body_node in enumerate(function.node):
        node = onnx.NodeProto()
        node.CopyFrom(body_node)
        node.input[:] = [rename(n) for n in body_node.input]
        node.output[:] = [rename(n) for n in body_node.output]
        if call.name:
            node.name = f"{call.name}/{body_node.name or body_node.op_type.lower()}{k}"
        del node.attribute[:]
        for a in body_node.attribute:
            if not a.ref_attr_name:
                node.attribute.append(a)
                if a.type == onnx.AttributeProto.GRAPH:   # its reads of the body's values: renamed too
                    _rename_outer(node.attribute[-1].g, rename)
            elif a.ref_attr_name in attributes:
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(attributes[a.ref_attr_name])
                resolved.name = a.name
                node.attribute.append(resolved)
        nodes.append(node)
    return nodes


def _rename_outer(graph: onnx.GraphProto, rename: Callable[[str], str]) -> None:
    """Rename, in place, the names a subgraph (and the subgraphs in it) reads from around it."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer} | \
        {o for n in graph.node for o in n.output}

    def outer(name: str) -> str:
        return name if not name or name in defined else rename(name)

    for n in graph.node:
        n.input[:] = [outer(x) for x in n.input]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_outer(a.g, outer)
    for v in graph.output:
        v.name = outer(v.name)


def _attribute_values(function: onnx.FunctionProto, call: onnx.NodeProto,
                      schema: onnx.defs.OpSchema) -> dict[str, onnx.AttributeProto]:
    """What each function attribute is at this call: the node's, else the function's default, else the
    schema's default; attributes with none of these are absent."""
    values: dict[str, onnx.AttributeProto] = {}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default.type != onnx.AttributeProto.UNDEFINED:
            values[name] = default
    for default in function.attribute_proto:
        values[default.name] = default
    for a in call.attribute:
        values[a.name] = a
    return values
