"""ChannelsLast: put regions of 2-D convolutions on the channels-last layout [N, H, W, C].

ONNX convolutions are NCHW. The convolution kernels want the channels contiguous: an output pixel's
channels are the vector lanes of the GEMM (`runtime.implementations.conv_launch`), any channel count
fills whole register blocks, and a depthwise convolution or a pool is a vector operation per pixel. So
each 2-D Conv with constant weights becomes its channels-last twin (`snipjit.nhwc::Conv`; likewise a
ConvTranspose of one group with explicit pads), and the layout spreads forward through the ops that do
not care which axis the channels are on:

* elementwise ops, when every other input is on the layout, a constant (permuted once, here), or a
  per-image vector [N, C, 1, 1] (squeeze-excitation's scale: its transpose moves no data);
* pools (`snipjit.nhwc::MaxPool`, `AveragePool`, `GlobalAveragePool`, `GlobalMaxPool`) and LRN (its window
  of channels is then along the contiguous axis: `snipjit.nhwc::LRN`);
* a Concat along the channels (then along the last axis), when all its inputs are on the layout;
* a Transpose to NHWC of a value on the layout is that value; a value the model itself transposes from
  NHWC to NCHW is on the layout already (ConvNeXt's permutes around its LayerNorm cancel); a vision
  transformer's patch tokens (the image flattened, [N, C, H·W], and transposed to [N, H·W, C]) are the
  value on the layout reshaped;
* then a residual Add and a SiLU, HardSwish or Sigmoid reading a Conv's output alone join the Conv (its fourth
  input, its `activation`), which its kernel applies before the store.

Reorders (Transpose nodes; a Reshape where only axes of size 1 move) are inserted only at the edges: where
a value enters a Conv from NCHW (but a network's 3-channel image is read in place: `input_layout = "NCHW"`),
and where an op that needs NCHW (a Reshape, Flatten, a graph output) reads a value of a region — once per
value, however many readers it has. The rewritten ops keep their meaning; the graph's inputs and outputs
keep their layout. Option `channels_last=False` turns the pass off. It runs after constant folding
(BatchNorm folded into the Conv weights) and before the markup and tokenizer, which then fuse the
elementwise ops between convolutions over the channels-last tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.dtypes import f32
from ..ir.graph import Graph, Node, TensorType, Value
from ..ops import get_op, has_op
from ..ops.channels_last import DOMAIN, POOLS, TO_NCHW, TO_NHWC, is_depthwise
from .constant_analysis import FreshNames

IMAGE_CHANNELS = 4   # a Conv of at most this many NCHW channels reads them in place
META = "channels_last"


def _is_4d(v: Value | None) -> bool:
    return v is not None and v.type is not None and v.shape is not None and len(v.shape) == 4


def _permuted_type(t: TensorType, perm: tuple[int, ...]) -> TensorType:
    return TensorType(t.dtype, tuple(t.shape[p] for p in perm))


def _perm(node: Node) -> tuple[int, ...] | None:
    perm = node.attrs.get("perm")
    return None if perm is None else tuple(int(p) % 4 for p in perm)


@dataclass
class Summary:
    """What the pass did, for `explain()`."""
    converted: dict[str, int] = field(default_factory=dict)   # op -> nodes moved onto the layout
    reorders_in: int = 0      # transposes NCHW -> NHWC inserted
    reorders_out: int = 0     # transposes NHWC -> NCHW inserted
    cancelled: int = 0        # the model's own transposes that became no-ops

    def __str__(self) -> str:
        ops = ", ".join(f"{op} {n}" for op, n in sorted(self.converted.items()))
        return (f"channels-last: {ops or 'nothing'}; reorders inserted: {self.reorders_in} in, "
                f"{self.reorders_out} out; the model's transposes cancelled: {self.cancelled}")


class _ChannelsLast:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.fresh = FreshNames(graph)
        self.twin: dict[int, Value] = {}      # id(NCHW value) -> the same tensor channels-last
        self.pending: dict[int, Value] = {}   # NCHW values no node produces any more (made on demand)
        self.alias: dict[int, Value] = {}     # values replaced by another one (cancelled transposes)
        self.deferred: set[int] = set()       # outputs of the model's own NHWC -> NCHW transposes
        self.absorbed: set[int] = set()       # nodes a rewrite of an earlier node took over
        self.nodes: list[Node] = []
        self.outputs = set(graph.outputs)
        self.summary = Summary()

    def run(self) -> Graph:
        self.uses = self.graph.consumers()
        for node in self.graph.nodes:
            if id(node) in self.absorbed:
                continue
            node.inputs = [None if v is None else self.alias.get(id(v), v) for v in node.inputs]
            if not (self._channel_shuffle(node) or self._tokens(node) or self._convert(node)):
                node.inputs = [None if v is None else self._nchw(v) for v in node.inputs]
                self.nodes.append(node)
        self.graph.outputs = [self._nchw(self.alias.get(id(v), v)) for v in self.graph.outputs]
        self.graph.nodes = self.nodes
        self._fuse_residuals()
        self._fuse_activations()
        self.summary.cancelled += len(self.deferred)
        self.graph.meta[META] = self.summary
        return self.graph

    # ---- the two layouts of a value -------------------------------------------------------------
    def _nhwc(self, v: Value) -> Value:
        """v channels-last: its twin, a permuted constant, or a new transpose."""
        twin = self.twin.get(id(v))
        if twin is not None:
            return twin
        if v.is_constant:   # (a lower rank broadcasts as before once padded to 4)
            data = v.data.reshape((1,) * (4 - v.data.ndim) + v.data.shape)
            twin = Value.constant(self.fresh(f"{v.name}_nhwc"), np.ascontiguousarray(np.transpose(data, TO_NHWC)))
        else:
            twin = Value(self.fresh(f"{v.name}_nhwc"), _permuted_type(v.type, TO_NHWC))
            self._transpose(v, twin, TO_NHWC)
            self.summary.reorders_in += 1
        self.twin[id(v)] = twin
        return twin

    def _nchw(self, v: Value) -> Value:
        """v as the NCHW tensor its readers outside the regions expect (transposed back on first use)."""
        twin = self.pending.pop(id(v), None)
        if twin is not None:
            self._transpose(twin, v, TO_NCHW)
            if id(v) in self.deferred:   # the model's own transpose, needed after all
                self.deferred.discard(id(v))
            else:
                self.summary.reorders_out += 1
        return v

    def _transpose(self, src: Value, dst: Value, perm: tuple[int, ...]) -> None:
        """A reorder; a Reshape (a view) where it moves only axes of size 1 (a pooled [N, 1, 1, C])."""
        shape = src.shape
        if shape is not None and all(isinstance(d, int) for d in shape) \
                and [p for p in perm if shape[p] != 1] == [a for a in range(len(shape)) if shape[a] != 1]:
            target = self._constant("reorder_shape", np.array([shape[p] for p in perm], np.int64))
            self.nodes.append(Node("Reshape", [src, target], [dst], {}))
        else:
            self.nodes.append(Node("Transpose", [src], [dst], {"perm": list(perm)}))

    def _produce(self, node: Node, inputs: list[Value | None], domain: str, attrs: dict | None = None) -> None:
        """Emit `node` on the layout: its output's twin computed from `inputs`, the NCHW output pending."""
        out = node.outputs[0]
        twin = Value(self.fresh(f"{out.name}_nhwc"), _permuted_type(out.type, TO_NHWC))
        self.nodes.append(Node(node.op, inputs, [twin], dict(node.attrs if attrs is None else attrs),
                               node.name, domain, dict(node.meta)))
        self._output(node, twin)
        self.summary.converted[node.op] = self.summary.converted.get(node.op, 0) + 1

    # ---- the rules -------------------------------------------------------------------------------
    def _convert(self, node: Node) -> bool:
        if node.domain or len(node.outputs) != 1 or not _is_4d(node.outputs[0]):
            return False
        x = node.inputs[0] if node.inputs else None
        on_layout = x is not None and id(x) in self.twin
        if node.op == "Conv" and self._is_conv2d(node) and self._reads_image(node):
            self._produce(node, list(node.inputs), DOMAIN, {**node.attrs, "input_layout": "NCHW"})
        elif node.op == "Conv" and self._is_conv2d(node):
            self._produce(node, [self._nhwc(x), *node.inputs[1:]], DOMAIN)
        elif node.op == "ConvTranspose" and self._is_conv2d(node) and self._plain_transpose(node):
            self._produce(node, [self._nhwc(x), *node.inputs[1:]], DOMAIN)
        elif node.op in POOLS and on_layout:
            self._produce(node, [self.twin[id(x)]], DOMAIN)
        elif node.op == "Concat" and self._concat_on_layout(node):
            self._produce(node, [self.twin[id(v)] for v in node.inputs], "", {**node.attrs, "axis": 3})
        elif node.op == "Transpose" and on_layout and _perm(node) == TO_NHWC and node.outputs[0] not in self.outputs:
            self.alias[id(node.outputs[0])] = self.twin[id(x)]    # the region's tensor already
            self.summary.cancelled += 1
        elif node.op == "Transpose" and _is_4d(x) and _perm(node) == TO_NCHW and id(x) not in self.twin:
            out = node.outputs[0]    # an NHWC tensor the model puts back to NCHW: the twin is x itself
            out.producer = None
            self.twin[id(out)] = self.pending[id(out)] = x
            self.deferred.add(id(out))
        elif node.op == "LRN" and on_layout and x.dtype == f32:
            self._produce(node, [self.twin[id(x)]], DOMAIN)
        elif self._elementwise_on_layout(node):
            self._produce(node, [None if v is None else self._operand(v) for v in node.inputs], "")
        else:
            return False
        return True

    def _fuse_residuals(self) -> None:
        """An Add (or a two-input Sum) of a channels-last Conv's output (its only reader) and another tensor
        of its shape (a residual connection) becomes the Conv's fourth input, added before the store; the Conv moves to
        the Add's place, where the other tensor is computed. Not for depthwise Convs (their window
        kernel adds no residual)."""
        uses = self.graph.consumers()
        nodes = list(self.graph.nodes)
        taken: set[int] = set()   # Adds a Conv took (the other Conv reading one stays as it is)
        for conv in [n for n in nodes if n.domain == DOMAIN and n.op == "Conv" and len(n.inputs) <= 3]:
            out, w = conv.outputs[0], conv.inputs[1].data
            readers = [n for n, _ in uses.get(out, [])]
            if out in self.outputs or len(readers) != 1 or is_depthwise(w.shape, conv.attrs.get("group", 1)):
                continue
            add = readers[0]
            other = [v for v in add.inputs if v is not out]
            if (add.op not in ("Add", "Sum") or add.domain or id(add) in taken or len(add.inputs) != 2
                    or len(other) != 1 or other[0] is None
                    or other[0].type != out.type or add.outputs[0].type != out.type):
                continue
            bias = conv.inputs[2] if len(conv.inputs) > 2 else None
            conv.inputs = [conv.inputs[0], conv.inputs[1], bias, other[0]]
            conv.outputs = [add.outputs[0]]
            add.outputs[0].producer = conv
            nodes.remove(conv)
            nodes[nodes.index(add)] = conv
            taken.add(id(add))
            self.summary.converted["residual Add"] = self.summary.converted.get("residual Add", 0) + 1
        self.graph.nodes = nodes

    def _fuse_activations(self) -> None:
        """A SiLU (Mul(t, Sigmoid(t))), HardSwish or Sigmoid reading a channels-last Conv's output alone
        becomes the Conv's `activation`, computed before the store (squeeze-excitation's Sigmoid then runs
        once per channel, not once per pixel in the snippet of the Mul that broadcasts it)."""
        uses = self.graph.consumers()
        fused: set[int] = set()
        for conv in [n for n in self.graph.nodes if n.domain == DOMAIN and n.op == "Conv"]:
            out = conv.outputs[0]
            readers = [n for n, _ in uses.get(out, [])]
            if conv.attrs.get("activation") or out in self.outputs:
                continue
            if len(readers) == 1 and readers[0].op in ("HardSwish", "Sigmoid") and not readers[0].domain:
                activation, taken = "hard_swish" if readers[0].op == "HardSwish" else "sigmoid", readers
            elif (len(readers) == 2 and {n.op for n in readers} == {"Sigmoid", "Mul"}
                  and not any(n.domain for n in readers)):
                sigmoid, mul = sorted(readers, key=lambda n: n.op != "Sigmoid")
                gate = sigmoid.outputs[0]
                if set(mul.inputs) != {out, gate} or [n for n, _ in uses.get(gate, [])] != [mul]:
                    continue
                activation, taken = "silu", [sigmoid, mul]
            else:
                continue
            result = taken[-1].outputs[0]
            conv.attrs = {**conv.attrs, "activation": activation}
            conv.outputs = [result]
            result.producer = conv
            fused.update(map(id, taken))
            self.summary.converted[activation] = self.summary.converted.get(activation, 0) + 1
        self.graph.nodes = [n for n in self.graph.nodes if id(n) not in fused]

    def _emit(self, op: str, inputs: list[Value], shape: tuple, attrs: dict | None = None, name: str = "t") -> Value:
        out = Value(self.fresh(f"{name}_nhwc"), TensorType(f32, shape))
        self.nodes.append(Node(op, inputs, [out], dict(attrs or {})))
        return out

    def _constant(self, name: str, data: np.ndarray) -> Value:
        return Value.constant(self.fresh(name), data)

    def _output(self, node: Node, twin: Value) -> None:
        """`twin` computes node's output on the layout; the NCHW output is made on demand."""
        out = node.outputs[0]
        out.producer = None
        self.twin[id(out)] = self.pending[id(out)] = twin

    def _only_reader(self, v: Value, op: str) -> Node | None:
        readers = self.uses.get(v, [])
        if len(readers) != 1 or v in self.outputs or readers[0][0].op != op or readers[0][0].domain:
            return None
        return readers[0][0]

    def _channel_shuffle(self, node: Node) -> bool:
        """Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4), Reshape back to [N, C, H, W]
        (ShuffleNet) of a value on the layout: the same on the last axis, [N, H, W, g, C/g] transposed to
        [N, H, W, C/g, g], where the reshapes are views and the transpose the only copy."""
        x = node.inputs[0] if node.op == "Reshape" and not node.domain else None
        if x is None or id(x) not in self.twin:
            return False
        split = node.outputs[0].shape
        transpose = self._only_reader(node.outputs[0], "Transpose")
        merge = transpose and self._only_reader(transpose.outputs[0], "Reshape")
        if (merge is None or split is None or len(split) != 5 or not all(isinstance(d, int) for d in split[1:])
                or tuple(transpose.attrs.get("perm", ())) != (0, 2, 1, 3, 4) or merge.outputs[0].shape != x.shape):
            return False
        n, groups, per_group, h, w = split
        y = self.twin[id(x)]
        grouped = self._emit("Reshape", [y, self._constant("shuffle_groups", np.array([0, h, w, groups, per_group]))],
                             (n, h, w, groups, per_group))
        swapped = self._emit("Transpose", [grouped], (n, h, w, per_group, groups), {"perm": [0, 1, 2, 4, 3]})
        channels = self._constant("shuffle_channels", np.array([0, h, w, groups * per_group]))
        merged = self._emit("Reshape", [swapped, channels], y.shape, name=merge.outputs[0].name)
        self._output(merge, merged)
        self.absorbed.update((id(transpose), id(merge)))
        self.summary.converted["channel shuffle"] = self.summary.converted.get("channel shuffle", 0) + 1
        return True

    def _tokens(self, node: Node) -> bool:
        """Reshape [N, C, H, W] -> [N, C, H·W], then Transpose (0, 2, 1), of a value on the layout (a vision
        transformer's patch embedding, `flatten(2).transpose(1, 2)`): [N, H, W, C] viewed as [N, H·W, C]."""
        x = node.inputs[0] if node.op == "Reshape" and not node.domain else None
        if x is None or id(x) not in self.twin:
            return False
        transpose = self._only_reader(node.outputs[0], "Transpose")
        n, c, h, w = x.shape
        if (transpose is None or not all(isinstance(d, int) for d in (c, h, w))
                or node.outputs[0].shape != (n, c, h * w) or tuple(transpose.attrs.get("perm", ())) != (0, 2, 1)):
            return False
        shape = self._constant("tokens_shape", np.array([0, h * w, c]))
        self.nodes.append(Node("Reshape", [self.twin[id(x)], shape], [transpose.outputs[0]], {}, transpose.name))
        self.absorbed.add(id(transpose))
        self.summary.cancelled += 1
        return True

    def _operand(self, v: Value) -> Value:
        """An elementwise op's input on the layout (a scalar constant as it is)."""
        return v if v.is_constant and v.data.ndim < 4 and v.data.size == 1 else self._nhwc(v)

    @staticmethod
    def _is_conv2d(node: Node) -> bool:
        x, w = node.inputs[0], node.inputs[1]
        b = node.inputs[2] if len(node.inputs) > 2 else None
        return (_is_4d(x) and x.dtype == f32 and w.is_constant and w.data.ndim == 4 and w.data.dtype == np.float32
                and (b is None or b.is_constant) and node.outputs[0].dtype == f32)

    @staticmethod
    def _plain_transpose(node: Node) -> bool:
        """A ConvTranspose of one group with explicit pads (no output_shape, no auto_pad)."""
        a = node.attrs
        return (a.get("group", 1) == 1 and a.get("output_shape") is None
                and a.get("auto_pad", "NOTSET") in ("NOTSET", ""))

    def _reads_image(self, node: Node) -> bool:
        """A Conv of a few-channel NCHW tensor (a network's image) the layout has no twin of: its kernel
        reads the channel planes in place instead of a reordered copy."""
        x = node.inputs[0]
        return (id(x) not in self.twin and isinstance(x.shape[1], int) and x.shape[1] <= IMAGE_CHANNELS
                and node.attrs.get("group", 1) == 1)

    def _concat_on_layout(self, node: Node) -> bool:
        return (node.attrs.get("axis") in (1, -3) and all(v is not None and id(v) in self.twin for v in node.inputs))

    def _elementwise_on_layout(self, node: Node) -> bool:
        if not has_op(node.op) or not get_op(node.op).category.is_elementwise:
            return False
        present = [v for v in node.inputs if v is not None]
        if not any(id(v) in self.twin for v in present):
            return False
        for v in present:
            if id(v) in self.twin or (v.is_constant and v.data.ndim <= 4):
                continue
            if not (_is_4d(v) and v.shape[2] == 1 and v.shape[3] == 1):
                return False   # a full NCHW operand would need a reorder of its own
        return True


def channels_last(graph: Graph, options: dict | None = None) -> Graph:
    if not (options or {}).get("channels_last", True):
        return graph
    if not any(n.op in ("Conv", "ConvTranspose") and not n.domain and _ChannelsLast._is_conv2d(n) for n in graph.nodes):
        return graph
    graph.toposort()
    return _ChannelsLast(graph).run()


__all__ = ["channels_last", "Summary", "META"]
