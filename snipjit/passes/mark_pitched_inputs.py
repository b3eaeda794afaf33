"""MarkPitchedInputs: let snippet kernels read a value where a channel Concat that also reads it puts it.

A Concat along the last axis is assembled in place when every input's producer writes straight into its
slice of the output (`Program._channel_slices`) — and every other reader of that input takes it there too:
rows of its channels farther apart than their length. DenseNet reads each dense layer's input twice: in the
BatchNorm-ReLU Subgraph in front of the layer's convolution and in the Concat that adds the layer's output
to it, so that Concat copied the block's whole feature map at every layer (12% of the network's time).
This pass marks such Subgraph inputs (`body.meta["pitched"]`, input indices): their kernels take each one's
row pitch as an argument (`snippets.lowered.memory.row_pitch`), and the plan may then chain a block's
Concats into one buffer.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Value


def _read_by_channel_concat(v: Value, readers: list[tuple[Node, int]]) -> bool:
    """A value of rows of a static length above 1 (a pitch between length-1 rows would be no stride at all)
    that a Concat along its last axis reads."""
    rank = len(v.shape) if v.type is not None and v.shape is not None else 0
    return rank >= 2 and isinstance(v.shape[-1], int) and v.shape[-1] > 1 and any(
        n.op == "Concat" and not n.domain and int(n.attrs.get("axis", 0)) % rank == rank - 1 for n, _ in readers)


def mark_pitched_inputs(graph: Graph, options: dict | None = None) -> Graph:
    uses = graph.consumers()
    for node in graph.nodes:
        # (a Brgemm walks its operands with strides of its own: bodies with products keep contiguous inputs)
        if node.op != "Subgraph" or node.domain or node.attrs.get("pattern") == "mha" \
                or any(n.op == "MatMul" for n in node.attrs["body"].nodes):
            continue
        pitched = tuple(i for i, v in enumerate(node.inputs)
                        if v is not None and not v.is_constant and _read_by_channel_concat(v, uses.get(v, [])))
        body = node.attrs["body"]
        if pitched:
            body.meta["pitched"] = pitched
        else:
            body.meta.pop("pitched", None)
    return graph


__all__ = ["mark_pitched_inputs"]
