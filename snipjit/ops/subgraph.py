"""The `Subgraph` op: a fused node whose `body` graph the Snippets compiler turns into one kernel.

Node input i feeds body input i; body output j is node output j. Inference refines the body in place: the
body inputs take the node's input types (which may be more precise, e.g. name a dynamic dim) and the body
is re-inferred; the node's outputs get the body's output types. The reference kernel runs the body node
by node with the registry's reference kernels. `pattern` names a body a dedicated kernel runs ("mha": an
attention block, see `passes.tokenize_mha`); "" is a body of elementwise ops for the Snippets compiler.
"""
from __future__ import annotations

from ..ir.graph import Graph, GraphError, TensorType
from .interpreter import run_graph_reference
from .registry import REQUIRED, Category, OpContext, OpError, register


def _body(ctx: OpContext) -> Graph:
    body = ctx.attrs["body"]
    if not isinstance(body, Graph):
        raise ctx.fail(f"attribute 'body' must be a graph, got {type(body).__name__}")
    return body


def infer_subgraph(ctx: OpContext) -> list[TensorType]:
    from .infer_shapes import infer_shapes  # passes import the ops package: import late
    body = _body(ctx)
    if len(ctx.in_types) != len(body.inputs):
        raise ctx.fail(f"has {len(ctx.in_types)} inputs but its body takes {len(body.inputs)}")
    if len(ctx.out_types) != len(body.outputs):
        raise ctx.fail(f"has {len(ctx.out_types)} outputs but its body gives {len(body.outputs)}")
    for i, (t, v) in enumerate(zip(ctx.in_types, body.inputs)):
        if t is None:
            raise ctx.fail(f"input {i} is missing (a Subgraph has no optional inputs)")
        if v.type is not None and v.type.dtype != t.dtype:
            raise ctx.fail(f"input {i} is {t.dtype} but body input '{v.name}' is {v.type.dtype}")
    for t, v in zip(ctx.in_types, body.inputs):
        v.type = t
    try:
        infer_shapes(body)
    except (OpError, GraphError) as e:
        raise ctx.fail(f"in its body: {e}") from None
    return [v.type for v in body.outputs]


@register("Subgraph", Category.FUSED, infer=infer_subgraph, attrs={"body": REQUIRED, "pattern": ""},
          inputs=(0, -1), outputs=(1, -1))
def subgraph(ctx: OpContext, *inputs):
    """Run the body graph on the node's inputs with the reference kernels of its nodes."""
    body = _body(ctx)
    if len(inputs) != len(body.inputs):
        raise ctx.fail(f"got {len(inputs)} inputs but its body takes {len(body.inputs)}")
    return tuple(run_graph_reference(body, inputs))
