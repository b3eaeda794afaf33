"""Opset upgrade rules: rewrite older ONNX node forms into the form the op registry defines.

The registry defines every op in its latest opset form. An ONNX node from an older opset goes through each
`Rule` that matches its op type and opset (in table order) before it is added to the graph. A rule is one
function `rewrite(node, b)`: it may change `node` (attributes that became inputs, renamed ops, defaults
that changed) and return it, or emit the replacement nodes itself through the builder `b` and return None.
Older forms whose meaning is the current default need no rule (Reshape before `allowzero` is allowzero=0,
AveragePool before `count_include_pad` is 0, ArgMax before `select_last_index` is 0, ...).

The builder (see `snipjit.frontend.onnx`) offers:
    b.opset                      the node's opset version
    b.const(hint, array) -> Value        a new constant
    b.emit(op, inputs, attrs, outputs=None, n_outputs=1) -> list[Value]
                                 a new node, typed at once; `outputs` names its outputs (else fresh names)
    b.fail(msg) -> FrontendError  an error naming the node being imported
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np
import onnx

from ..ir.graph import Value

ANY_OP = "*"


@dataclass
class OnnxNode:
    """A node on its way from ONNX into the graph: inputs resolved to Values (None = missing optional),
    outputs still names ("" = an omitted optional output)."""
    op: str
    inputs: list[Value | None]
    outputs: list[str]
    attrs: dict[str, Any]
    name: str = ""
    domain: str = ""


class Builder(Protocol):
    opset: int

    def const(self, hint: str, array: np.ndarray) -> Value: ...

    def emit(self, op: str, inputs: list[Value | None], attrs: dict[str, Any] | None = None,
             outputs: list[str] | None = None, n_outputs: int = 1) -> list[Value]: ...

    def fail(self, msg: str) -> Exception: ...


Rewrite = Callable[[OnnxNode, Builder], "OnnxNode | None"]


@dataclass(frozen=True)
class Rule:
    """Apply `rewrite` to default-domain nodes of the given op types (ANY_OP: all) whose opset is below
    `below`, the version that introduced the current form."""
    ops: tuple[str, ...]
    below: int
    rewrite: Rewrite

    def matches(self, op: str, opset: int) -> bool:
        return (ANY_OP in self.ops or op in self.ops) and opset < self.below


# ---- helpers ---------------------------------------------------------------------------------------
def _set_input(node: OnnxNode, pos: int, value: Value | None) -> None:
    while len(node.inputs) <= pos:
        node.inputs.append(None)
    node.inputs[pos] = value


def _rank(v: Value | None) -> int | None:
    return None if v is None or v.type is None else v.type.rank


def _i64(value: Any, node: OnnxNode, b: Builder) -> np.ndarray:
    return np.asarray(value, dtype=np.int64)


def _i64_vector(value: Any, node: OnnxNode, b: Builder) -> np.ndarray:
    return np.asarray(value, dtype=np.int64).reshape(-1)


def _f32(value: Any, node: OnnxNode, b: Builder) -> np.ndarray:
    return np.asarray(value, dtype=np.float32)


def _like_input0(value: Any, node: OnnxNode, b: Builder) -> np.ndarray:
    x = node.inputs[0]
    if x is None or x.type is None:
        raise b.fail("cannot tell the element type of input 0")
    return np.asarray(value, dtype=x.type.dtype.np)


def attrs_to_inputs(*specs: tuple[str, int, Callable[[Any, OnnxNode, Builder], np.ndarray]]) -> Rewrite:
    """A rule moving attributes into constant inputs: each spec is (attribute, input position, how to
    make the array). An absent attribute leaves its input missing."""
    def rewrite(node: OnnxNode, b: Builder) -> OnnxNode:
        for attr, pos, make in specs:
            if attr in node.attrs:
                _set_input(node, pos, b.const(f"{node.name or node.op}_{attr}", make(node.attrs.pop(attr), node, b)))
        return node
    return rewrite


def drop_attrs(*names: str) -> Rewrite:
    """A rule dropping attributes that no longer exist and carried no meaning at inference."""
    def rewrite(node: OnnxNode, b: Builder) -> OnnxNode:
        for n in names:
            node.attrs.pop(n, None)
        return node
    return rewrite


# ---- rules -----------------------------------------------------------------------------------------
def split_num_outputs(node: OnnxNode, b: Builder) -> OnnxNode:
    """Split < 18 without `split` cut into as many equal parts as it has outputs; opset 18 asks for
    `num_outputs` then."""
    if (len(node.inputs) < 2 or node.inputs[1] is None) and "num_outputs" not in node.attrs:
        node.attrs["num_outputs"] = len(node.outputs)
    return node


def flatten_softmax(node: OnnxNode, b: Builder) -> OnnxNode | None:
    """Softmax, LogSoftmax and Hardmax < 13 coerce the input to 2-D at `axis` (default 1) and normalise
    each row; since 13 they normalise along `axis` alone. The two agree when `axis` is the last axis;
    otherwise rewrite into Flatten -> op(axis=-1) -> Reshape back to the input's shape (a constant when
    static, else Shape(x))."""
    x = node.inputs[0]
    axis = node.attrs.pop("axis", 1)
    rank = _rank(x)
    if rank is not None and rank > 0 and (axis == -1 or axis == rank - 1):
        node.attrs["axis"] = -1
        return node
    flat = b.emit("Flatten", [x], {"axis": axis})[0]
    rows = b.emit(node.op, [flat], {"axis": -1})[0]
    static = x.type is not None and x.type.is_static
    shape = b.const(f"{node.name or node.op}_shape", np.array(x.type.shape, np.int64)) if static else \
        b.emit("Shape", [x])[0]
    b.emit("Reshape", [rows, shape], {}, outputs=node.outputs)
    return None


def asymmetric_resize(node: OnnxNode, b: Builder) -> OnnxNode:
    """Resize-10 (and Upsample) take (X, scales) and map output coordinates as x_out / scale, flooring
    for nearest; Resize-11+ takes (X, roi, scales, sizes) and says so with attributes."""
    x, scales = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    node.inputs = [x, None, scales]
    node.attrs["coordinate_transformation_mode"] = "asymmetric"
    if node.attrs.get("mode", "nearest") == "nearest":
        node.attrs["nearest_mode"] = "floor"
    return node


def upsample_to_resize(node: OnnxNode, b: Builder) -> OnnxNode:
    """Upsample (deprecated in 10) is Resize-10 under another name (the Resize < 11 rule follows);
    before opset 9 its scales are an attribute."""
    if "height_scale" in node.attrs or "width_scale" in node.attrs:
        raise b.fail("the experimental Upsample-1 form is not supported")
    node = attrs_to_inputs(("scales", 1, _f32))(node, b)
    node.op = "Resize"
    return node


def scatter_to_scatter_elements(node: OnnxNode, b: Builder) -> OnnxNode:
    """Scatter (deprecated in 11) is ScatterElements under another name."""
    node.op = "ScatterElements"
    return node


def batchnorm_spatial(node: OnnxNode, b: Builder) -> OnnxNode:
    """BatchNormalization < 9 has `spatial`; 1 (the default) is the only form that survived."""
    if node.attrs.pop("spatial", 1) != 1:
        raise b.fail("BatchNormalization with spatial=0 (per-element statistics) is not supported")
    return node


def cast_to_enum(node: OnnxNode, b: Builder) -> OnnxNode:
    """Cast < 6 names its target type with a string ("FLOAT"); later with the TensorProto enum."""
    to = node.attrs.get("to")
    if isinstance(to, str):
        try:
            node.attrs["to"] = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise b.fail(f"unknown Cast target type {to!r}") from None
    return node


def legacy_broadcast(node: OnnxNode, b: Builder) -> OnnxNode:
    """Binary ops < 7 broadcast only with broadcast=1, aligning B's dims at `axis` of A (default: the
    trailing dims, as NumPy does). Unsqueeze B at the end to make NumPy broadcasting agree."""
    broadcast = node.attrs.pop("broadcast", 0)
    axis = node.attrs.pop("axis", None)
    if not broadcast or axis is None:
        return node
    a, bv = node.inputs[0], node.inputs[1]
    ra, rb = _rank(a), _rank(bv)
    if ra is None or rb is None:
        raise b.fail("legacy broadcast with an axis needs the ranks of both inputs")
    if not -ra <= axis < ra:
        raise b.fail(f"broadcast axis {axis} is out of range for rank {ra}")
    trailing = ra - axis % ra - rb
    if trailing < 0:
        raise b.fail(f"input B of rank {rb} does not fit at axis {axis} of input A of rank {ra}")
    if trailing:
        axes = b.const(f"{node.name or node.op}_axes", np.arange(rb, rb + trailing, dtype=np.int64))
        node.inputs[1] = b.emit("Unsqueeze", [bv, axes])[0]
    return node


def prelu_channel_slope(node: OnnxNode, b: Builder) -> OnnxNode:
    """PRelu < 7 applies a 1-D slope of C values along the channel axis 1; since 7 the slope broadcasts
    NumPy-style (from the trailing dims). Unsqueeze such a slope to [C, 1, ..., 1]."""
    x, slope = node.inputs[0], node.inputs[1]
    rx, rs = _rank(x), _rank(slope)
    if rx is None or rs is None:
        raise b.fail("PRelu before opset 7 needs the ranks of X and slope")
    if rs == 1 and rx > 2 and slope.type.shape[0] != 1:
        axes = b.const(f"{node.name or node.op}_axes", np.arange(1, rx - 1, dtype=np.int64))
        node.inputs[1] = b.emit("Unsqueeze", [slope, axes])[0]
    return node


def concat_default_axis(node: OnnxNode, b: Builder) -> OnnxNode:
    """Concat < 4 has an optional `axis` defaulting to 1; later it is required."""
    node.attrs.setdefault("axis", 1)
    return node


def pad_paddings_name(node: OnnxNode, b: Builder) -> OnnxNode:
    """Pad-1 calls its pads `paddings`."""
    if "paddings" in node.attrs:
        node.attrs["pads"] = node.attrs.pop("paddings")
    return node


def grid_sample_mode_names(node: OnnxNode, b: Builder) -> OnnxNode:
    """GridSample-16 calls its interpolation modes "bilinear" and "bicubic"; since 20 "linear" and
    "cubic" (the default stays linear interpolation)."""
    renamed = {"bilinear": "linear", "bicubic": "cubic"}
    mode = node.attrs.get("mode")
    if mode in renamed:
        node.attrs["mode"] = renamed[mode]
    return node


def roi_align_output_half_pixel(node: OnnxNode, b: Builder) -> OnnxNode:
    """RoiAlign-10 maps roi coordinates without the half-pixel shift, which RoiAlign-16 calls
    coordinate_transformation_mode="output_half_pixel" (its default became "half_pixel")."""
    node.attrs["coordinate_transformation_mode"] = "output_half_pixel"
    return node


_REDUCE_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
              "ReduceMin", "ReduceProd", "ReduceSumSquare")
_LEGACY_BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less",
                     "Gemm")

RULES: list[Rule] = [
    Rule((ANY_OP,), 7, drop_attrs("consumed_inputs", "is_test")),
    Rule(_LEGACY_BROADCAST, 7, legacy_broadcast),
    Rule(("PRelu",), 7, prelu_channel_slope),
    Rule(("Cast",), 6, cast_to_enum),
    Rule(("Concat",), 4, concat_default_axis),
    Rule(("Reshape",), 5, attrs_to_inputs(("shape", 1, _i64))),
    Rule(("BatchNormalization",), 9, batchnorm_spatial),
    Rule(("Squeeze", "Unsqueeze", "ReduceSum"), 13, attrs_to_inputs(("axes", 1, _i64))),
    Rule(_REDUCE_18, 18, attrs_to_inputs(("axes", 1, _i64))),
    Rule(("Split",), 13, attrs_to_inputs(("split", 1, _i64))),
    Rule(("Split",), 18, split_num_outputs),
    Rule(("Slice",), 10, attrs_to_inputs(("starts", 1, _i64), ("ends", 2, _i64), ("axes", 3, _i64))),
    Rule(("Clip",), 11, attrs_to_inputs(("min", 1, _like_input0), ("max", 2, _like_input0))),
    Rule(("Pad",), 2, pad_paddings_name),
    Rule(("Pad",), 11, attrs_to_inputs(("pads", 1, _i64), ("value", 2, _like_input0))),
    Rule(("TopK",), 10, attrs_to_inputs(("k", 1, _i64_vector))),
    Rule(("Dropout",), 12, attrs_to_inputs(("ratio", 1, _f32))),
    Rule(("Softmax", "LogSoftmax", "Hardmax"), 13, flatten_softmax),
    Rule(("Upsample",), 10, upsample_to_resize),  # must come before the Resize rule
    Rule(("Resize",), 11, asymmetric_resize),
    Rule(("Scatter",), 12, scatter_to_scatter_elements),
    Rule(("GridSample",), 20, grid_sample_mode_names),
    Rule(("RoiAlign",), 16, roi_align_output_half_pixel),
]


def upgrade(node: OnnxNode, opset: int, b: Builder) -> OnnxNode | None:
    """Run every matching rule on a default-domain node; None when a rule emitted the replacement."""
    for rule in RULES:
        if rule.matches(node.op, opset):
            result = rule.rewrite(node, b)
            if result is None:
                return None
            node = result
    return node
