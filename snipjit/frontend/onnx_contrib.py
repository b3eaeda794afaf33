"""Operators of ONNX Runtime's `com.microsoft` domain, as models optimized for ONNX Runtime carry them,
written as standard ops when they are imported.

- MultiHeadAttention: query, key and value [batch, rows, hidden] (hidden = num_heads · head size; the value's
  may differ), an optional projection bias [3 parts: query, key, value] added to them, an optional key
  padding mask (int, [batch, keys] or [batch, rows, keys]; 0 or less: masked, `mask_filter_value`, default
  -10000, added) and attention bias ([batch or 1, heads or 1, rows, keys]), `unidirectional` (causal, as
  ONNX Runtime's kernel without past keys: row i sees key j when j <= i, the last row every key; the keys
  a row does not see are left out), `scale` (default 1/sqrt(head size)). It becomes the head split,
  Q·Kᵀ · scale, the attention bias and the padding added, a Where hiding the causal mask's keys (-inf),
  Softmax, ·V and the head merge (in the query's float type): the pattern TokenizeMHA fuses into one
  attention step. Refused, naming the node: packed QKV or KV, 4-D keys or values, past/present keys and
  values (a KV cache), a mask of sequence lengths, the qk output, a bias of another length.
"""
from __future__ import annotations

import math

import numpy as np

from .onnx_opsets import Builder, OnnxNode

DOMAIN = "com.microsoft"


def _static_width(b: Builder, name: str, value) -> int:
    shape = value.type.shape if value.type is not None else None
    if shape is None or len(shape) != 3:
        raise b.fail(f"{name} must be [batch, rows, hidden] (3-D), got {'unknown' if shape is None else list(shape)}"
                     " (packed QKV or KV and 4-D keys and values are not supported)")
    if not isinstance(shape[2], int):
        raise b.fail(f"{name}'s hidden size must be static, got {shape[2]!r}")
    return shape[2]


def _heads(b: Builder, x, heads: int, size: int, perm: list[int]):
    """x [batch, rows, heads · size] as [batch, heads, rows, size] (perm [0, 2, 1, 3]) or Kᵀ ([0, 2, 3, 1])."""
    split = b.const("heads", np.array([0, 0, heads, size], np.int64))
    return b.emit("Transpose", b.emit("Reshape", [x, split]), {"perm": perm})[0]


def _axis_size(b: Builder, x, axis: int):
    """dim `axis` of x as an int64 scalar."""
    shape = b.emit("Shape", [x])[0]
    return b.emit("Gather", [shape, b.const("axis", np.array(axis, np.int64))], {"axis": 0})[0]


def _causal(b: Builder, query, key):
    """[rows, keys]: whether row i sees key j, as ONNX Runtime's kernel decides without past keys: j <= i, and
    the last row sees every key (so one row sees all keys, also where there are more keys than rows)."""
    zero, one = b.const("zero", np.array(0, np.int64)), b.const("one", np.array(1, np.int64))
    count = _axis_size(b, query, 1)
    rows = b.emit("Range", [zero, count, one])[0]
    rows = b.emit("Unsqueeze", [rows, b.const("axes", np.array([1], np.int64))])[0]
    seen = b.emit("LessOrEqual", [b.emit("Range", [zero, _axis_size(b, key, 1), one])[0], rows])[0]
    last = b.emit("Equal", [rows, b.emit("Sub", [count, one])[0]])[0]
    return b.emit("Or", [seen, last])[0]


def _padding(b: Builder, mask):
    """The keys the padding mask keeps, in 4 dims: [batch, 1, 1, keys] or [batch, 1, rows, keys]."""
    shape = mask.type.shape if mask.type is not None else None
    if shape is None or len(shape) not in (2, 3) or mask.type.dtype.np.kind not in "iu":
        raise b.fail("key_padding_mask must be an integer [batch, keys] or [batch, rows, keys] mask (sequence "
                     f"lengths are not supported), got {mask.type}")
    axes = [1, 2] if len(shape) == 2 else [1]
    kept = b.emit("Greater", [mask, b.const("zero", np.zeros((), mask.type.dtype.np))])[0]
    return b.emit("Unsqueeze", [kept, b.const("axes", np.array(axes, np.int64))])[0]


def multi_head_attention(node: OnnxNode, b: Builder) -> None:
    ins = node.inputs + [None] * (10 - len(node.inputs))
    query, key, value, bias, padding, attention_bias = ins[:6]
    if any(x is not None for x in ins[6:]) or any(name for name in node.outputs[1:]):
        raise b.fail("past and present keys and values (a KV cache) and the qk output are not supported")
    if key is None or value is None:
        raise b.fail("a query without key and value (packed QKV) is not supported" if key is None else
                     "a key without a value (packed KV) is not supported")
    heads = node.attrs.get("num_heads")
    hidden, key_hidden, value_hidden = (_static_width(b, n, x) for n, x in
                                        (("query", query), ("key", key), ("value", value)))
    if key_hidden != hidden:
        raise b.fail(f"the key's hidden size {key_hidden} must equal the query's {hidden}")
    if not isinstance(heads, int) or heads < 1 or hidden % heads or value_hidden % heads:
        raise b.fail(f"num_heads {heads!r} must divide the query's hidden size {hidden} and the value's "
                     f"{value_hidden}")
    dtype = query.type.dtype.np   # (the constants below: f16 models stay f16)
    if dtype.kind != "f":
        raise b.fail(f"query must be floating point, got {query.type.dtype}")
    size, value_size = hidden // heads, value_hidden // heads
    scale = node.attrs.get("scale") or 1 / math.sqrt(size)
    fill = float(node.attrs.get("mask_filter_value", -10000.0))
    if bias is not None:
        starts = np.cumsum([0, hidden, hidden, value_hidden])
        if bias.type is None or bias.type.shape is None or tuple(bias.type.shape) != (starts[-1],):
            raise b.fail(f"bias must be [{starts[-1]}] (query, key and value parts), got {bias.type}")
        query, key, value = (b.emit("Add", [x, b.emit("Slice", [bias, b.const("start", starts[i:i + 1]),
                                                                 b.const("end", starts[i + 1:i + 2])])[0]])[0]
                             for i, x in enumerate((query, key, value)))
    scores = b.emit("MatMul", [_heads(b, query, heads, size, [0, 2, 1, 3]), _heads(b, key, heads, size, [0, 2, 3, 1])])
    scores = b.emit("Mul", [scores[0], b.const("scale", np.array(scale, dtype))])[0]
    if attention_bias is not None:
        scores = b.emit("Add", [scores, attention_bias])[0]
    if padding is not None:
        zero, filled = b.const("zero", np.array(0, dtype)), b.const("fill", np.array(fill, dtype))
        scores = b.emit("Add", [scores, b.emit("Where", [_padding(b, padding), zero, filled])[0]])[0]
    if node.attrs.get("unidirectional", 0):   # (ONNX Runtime leaves the keys past a row out: -inf, not the fill)
        scores = b.emit("Where", [_causal(b, query, key), scores, b.const("hidden", np.array(-np.inf, dtype))])[0]
    probabilities = b.emit("Softmax", [scores], {"axis": -1})[0]
    context = b.emit("MatMul", [probabilities, _heads(b, value, heads, value_size, [0, 2, 1, 3])])[0]
    merged = b.emit("Transpose", [context], {"perm": [0, 2, 1, 3]})[0]
    b.emit("Reshape", [merged, b.const("merge", np.array([0, 0, value_hidden], np.int64))], outputs=node.outputs[:1])


RULES = {"MultiHeadAttention": multi_head_attention}


def decompose(node: OnnxNode, b: Builder) -> OnnxNode | None:
    """A `com.microsoft` node written as standard ops (None: emitted), or the node itself when no rule
    has it (the registry then names it unsupported)."""
    rule = RULES.get(node.op)
    if rule is None:
        return node
    rule(node, b)
    return None
