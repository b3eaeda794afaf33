"""MarkSkippedByPlugin: the markup pass run just before tokenization.

It marks (`node.meta["skipped_by_plugin"] = True`) the nodes the tokenizer must leave alone because
another implementation applies them better: the epilogue of a heavy op. The BLAS implementation of
Conv/MatMul/Gemm applies a bias and an activation in place on its output while it is still in cache, so

    heavy op -> [bias Add] -> [activation]

(each step optional, in this order, each consuming the single-use output of the previous one) stays with
the heavy op. A node is marked whether or not the Snippets compiler supports it: the mark says who owns
the node, and the tokenizer ignores unsupported nodes anyway. A chain whose result feeds only nodes the
tokenizer will fuse stays unmarked: that kernel applies the epilogue without an extra pass over memory,
which the in-place BLAS epilogue cannot avoid (option `epilogues_yield_to_kernels=False` keeps them
marked). A chain whose result another node reads too stays marked: the result is stored either way.
Option `fuse_epilogues=False` turns the pass off (every elementwise node is then left to the tokenizer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..ir.graph import Graph, Node, Value
from ..ops.channels_last import DOMAIN as CHANNELS_LAST
from ..snippets.supported_ops import is_supported

SKIPPED_BY_PLUGIN = "skipped_by_plugin"

# heavy op (domain, op) -> the axis of its output a bias varies along (a Conv's channel, a MatMul/Gemm's column)
HEAVY_OPS: dict[tuple[str, str], int] = {("", "Conv"): 1, ("", "MatMul"): -1, ("", "Gemm"): -1,
                                         (CHANNELS_LAST, "Conv"): -1}


def is_bias(node: Node, data: Value, heavy: Node) -> bool:
    """`data + b` with a constant b that varies at most along the heavy op's bias axis."""
    bias = node.inputs[1] if node.inputs[0] is data else node.inputs[0]
    out = data.shape
    if bias is None or not bias.is_constant or bias.dtype != data.dtype or not out:
        return False
    if len(bias.shape) > len(out):
        return False
    axis = HEAVY_OPS[heavy.domain, heavy.op] % len(out)
    padded = (1,) * (len(out) - len(bias.shape)) + tuple(bias.shape)
    return all(d == 1 or (i == axis and d == out[i]) for i, d in enumerate(padded))


def is_activation_of(node: Node, data: Value, heavy: Node) -> bool:
    """An activation of `data` whose parameters (Clip's min/max) are compile-time constants."""
    return node.inputs[0] is data and all(v is None or v.is_constant for v in node.inputs[1:])


@dataclass(frozen=True)
class EpilogueStep:
    name: str
    ops: frozenset[str]
    fits: Callable[[Node, Value, Node], bool]  # (node, the value it reads, the heavy op) -> bool

    def matches(self, node: Node, data: Value, heavy: Node) -> bool:
        return not node.domain and node.op in self.ops and self.fits(node, data, heavy)


# The epilogue a heavy op's implementation applies, in order; each step is optional.
EPILOGUE: tuple[EpilogueStep, ...] = (
    EpilogueStep("bias", frozenset({"Add"}), is_bias),
    EpilogueStep("activation", frozenset({"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "Gelu"}), is_activation_of),
)


@dataclass
class _Chain:
    heavy: Node   # the heavy op the chain starts at
    steps: int    # how many EPILOGUE steps it has already passed
    nodes: list[Node] = field(default_factory=list)   # the epilogue nodes marked so far


class MarkSkippedByPlugin:
    def __init__(self, options: dict | None = None):
        self.enabled = bool((options or {}).get("fuse_epilogues", True))
        self.yield_to_kernels = bool((options or {}).get("epilogues_yield_to_kernels", True))

    def run(self, graph: Graph) -> Graph:
        if not self.enabled:
            return graph
        graph.toposort()
        uses = graph.consumers()
        graph_outputs = set(graph.outputs)
        chains: dict[Value, _Chain] = {}  # value -> the epilogue chain it ends
        for node in graph.nodes:
            if (node.domain, node.op) in HEAVY_OPS:
                chains[node.outputs[0]] = _Chain(node, 0)
                continue
            for data in node.inputs:
                chain = chains.get(data) if data is not None else None
                if chain is None or data in graph_outputs or len(uses.get(data, ())) != 1:
                    continue
                step = self.next_step(node, data, chain)
                if step is not None:
                    node.meta[SKIPPED_BY_PLUGIN] = True
                    chains[node.outputs[0]] = _Chain(chain.heavy, step + 1, chain.nodes + [node])
                    break
        for value, chain in chains.items():
            readers = [n for n, _ in uses.get(value, ())]
            if (self.yield_to_kernels and chain.nodes and readers
                    and all(is_supported(n) and not n.meta.get(SKIPPED_BY_PLUGIN) for n in readers)):
                # kernels read the end of the chain, nothing else: they take the epilogue for free (with
                # another reader too, the value is stored anyway, and the heavy op computes it cheapest)
                for n in chain.nodes:
                    n.meta.pop(SKIPPED_BY_PLUGIN, None)
        return graph

    @staticmethod
    def next_step(node: Node, data: Value, chain: _Chain) -> int | None:
        """The index of the first epilogue step after the chain's last one that `node` performs."""
        for k in range(chain.steps, len(EPILOGUE)):
            if EPILOGUE[k].matches(node, data, chain.heavy):
                return k
        return None


def mark_skipped_by_plugin(graph: Graph, options: dict | None = None) -> Graph:
    return MarkSkippedByPlugin(options).run(graph)


__all__ = ["MarkSkippedByPlugin", "mark_skipped_by_plugin", "SKIPPED_BY_PLUGIN", "HEAVY_OPS", "EPILOGUE"]
