"""InferShapes: give every value its type from the op registry, merged with any declared type.

Declared shapes (from the ONNX file or the text form) may carry names for dynamic dims that inference
cannot know; inference may know static sizes the declaration left open. The merge keeps the more precise
of each dim and raises, naming the node, when the two disagree.
"""
from __future__ import annotations

from ..ir.graph import Graph, GraphError, TensorType
from ..ir.shape import ShapeError, merge_shapes
from .registry import infer_node


def infer_shapes(graph: Graph) -> Graph:
    graph.toposort()
    for node in graph.nodes:
        inferred = infer_node(node)
        for out, t in zip(node.outputs, inferred):
            if out.type is None:
                out.type = t
                continue
            if out.type.dtype != t.dtype:
                raise GraphError(f"{node.label()}: output '{out.name}' is declared {out.type.dtype} "
                                 f"but the op gives {t.dtype}")
            try:
                out.type = TensorType(t.dtype, merge_shapes(out.type.shape, t.shape))
            except ShapeError as e:
                raise GraphError(f"{node.label()}: output '{out.name}' is declared {out.type} but the "
                                 f"op gives {t}: {e}") from None
    graph.validate()
    return graph
