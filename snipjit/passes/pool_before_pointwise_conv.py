"""PoolBeforePointwiseConv: average a 1×1 convolution's input instead of its output.

A 1×1 convolution of stride 1 is linear in its input pixel by pixel (plus a bias), and an average pool is a
mean of pixels, so they commute:

    AveragePool(Conv1×1(x, w, b))  ==  Conv1×1(AveragePool(x), w, b)

when every window's mean divides by the pixels it sums (no padding, so count_include_pad cannot add zeros
the bias would not be in; no ceil_mode window running past the image) — and GlobalAveragePool likewise. The
convolution then runs on the pooled map: DenseNet's three transition layers (1×1 convolution, then a 2×2
average pool of stride 2) do a quarter of their multiply-adds. Applies when the convolution's output is read by
the pool alone and is no graph output; results change only by rounding (the sums run in another order).
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, Value
from ..ops import infer_node


def _pointwise(conv: Node) -> bool:
    """A 2-D Conv of a 1×1 kernel, stride 1, no padding (its channels mixed pixel by pixel)."""
    w = conv.inputs[1] if len(conv.inputs) > 1 else None
    x = conv.inputs[0]
    if conv.op != "Conv" or conv.domain or w is None or w.shape is None or x.shape is None or len(x.shape) != 4:
        return False
    return (tuple(w.shape[2:]) == (1, 1) and all(s == 1 for s in conv.attrs.get("strides") or (1, 1))
            and not any(conv.attrs.get("pads") or ()) and conv.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "", "VALID"))


def _exact_mean(pool: Node, spatial: tuple) -> bool:
    """An AveragePool whose every window lies inside the image (each mean divides by the pixels it sums)."""
    if pool.op == "GlobalAveragePool":
        return True
    if pool.op != "AveragePool" or any(pool.attrs.get("pads") or ()) \
            or pool.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID") \
            or any(d != 1 for d in pool.attrs.get("dilations") or ()):
        return False
    if not pool.attrs.get("ceil_mode"):
        return True
    kernel, strides = pool.attrs["kernel_shape"], pool.attrs.get("strides") or [1] * len(spatial)
    return all(isinstance(n, int) and (n - k) % s == 0 for n, k, s in zip(spatial, kernel, strides))


def pool_before_pointwise_conv(graph: Graph, options: dict | None = None) -> Graph:
    uses = graph.consumers()
    outputs = set(graph.outputs)
    moved = False
    for pool in [n for n in graph.nodes if n.op in ("AveragePool", "GlobalAveragePool") and not n.domain]:
        y = pool.inputs[0]
        conv = y.producer
        readers = uses.get(y, [])
        if conv is None or y in outputs or len(readers) != 1 or y.shape is None or not _pointwise(conv) \
                or not _exact_mean(pool, tuple(y.shape[2:])):
            continue
        x, out = conv.inputs[0], pool.outputs[0]
        pooled = Value(graph.fresh_name(f"{x.name}_pooled"))
        pool.inputs, pool.outputs = [x], [pooled]
        conv.inputs, conv.outputs = [pooled, *conv.inputs[1:]], [out]
        pooled.producer, out.producer = pool, conv
        pooled.type = infer_node(pool)[0]
        moved = True
    if moved:
        graph.toposort()   # (each moved pool now runs before its convolution)
    return graph


__all__ = ["pool_before_pointwise_conv"]
