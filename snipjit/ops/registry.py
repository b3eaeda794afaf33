"""The op registry: what each op is (category, attributes, arity), how its output types follow from its
inputs, and a NumPy reference kernel that defines its meaning.

An op is registered by decorating its reference kernel:

    @register("Transpose", Category.MOVEMENT, infer=infer_transpose, attrs={"perm": None})
    def transpose(ctx, x):
        return np.transpose(x, ctx.attrs["perm"])

The kernel receives an `OpContext` and the input arrays (None for a missing optional input) and returns
one array or a tuple of arrays. `infer` receives the same context, where `in_types` are set and
`in_values` hold the data of inputs known at compile time, and returns the output `TensorType`s.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..ir.graph import Node, TensorType
from ..ir.shape import ShapeError


class Category(str, enum.Enum):
    UNARY = "elementwise_unary"
    BINARY = "elementwise_binary"
    TERNARY = "elementwise_ternary"
    REDUCTION = "reduction"          # reduces (or normalises) along axes: ReduceSum, Softmax, LayerNorm
    MOVEMENT = "data_movement"       # moves elements without math: Transpose, Concat, Gather, Slice
    SHAPE = "shape_computation"      # computes shapes/indices: Shape, Range, ConstantOfShape
    HEAVY = "heavy_compute"          # MatMul, Gemm, Conv and pools
    FUSED = "fused"                  # snipjit's own Subgraph node

    @property
    def is_elementwise(self) -> bool:
        return self in (Category.UNARY, Category.BINARY, Category.TERNARY)


class OpError(ValueError):
    """An op was used wrongly: bad attribute, arity, dtype or shape. The message names the node."""


REQUIRED = object()  # attribute default meaning "must be given"


@dataclass
class OpContext:
    """What an op's inference and reference kernel know about one node."""
    node: Node | None
    attrs: dict[str, Any]
    in_types: Sequence[TensorType | None] = ()
    in_values: Sequence[np.ndarray | None] = ()
    out_types: Sequence[TensorType | None] = ()

    @property
    def op(self) -> str:
        return self.node.op if self.node is not None else "?"

    def fail(self, msg: str) -> OpError:
        where = self.node.label() if self.node is not None else "op"
        return OpError(f"{where}: {msg}")

    def value(self, i: int) -> np.ndarray | None:
        """The compile-time data of input i, if known."""
        return self.in_values[i] if i < len(self.in_values) else None

    def has_input(self, i: int) -> bool:
        return i < len(self.in_types) and self.in_types[i] is not None


@dataclass
class OpDef:
    name: str
    category: Category
    reference: Callable[..., Any]
    infer: Callable[[OpContext], list[TensorType]]
    attrs: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[int, int] = (1, 1)     # min, max (-1: variadic)
    outputs: tuple[int, int] = (1, 1)
    domain: str = ""
    doc: str = ""
    view: Callable[..., np.ndarray] | None = None   # the result as a view of the input (no copy)

    def resolve_attrs(self, node: Node) -> dict[str, Any]:
        """The node's attributes with defaults filled in; unknown or missing ones raise OpError."""
        unknown = set(node.attrs) - set(self.attrs)
        if unknown:
            raise OpError(f"{node.label()}: unknown attribute(s) {sorted(unknown)}; {self.name} takes "
                          f"{sorted(self.attrs) or 'none'}")
        out = {}
        for k, default in self.attrs.items():
            if k in node.attrs:
                out[k] = node.attrs[k]
            elif default is REQUIRED:
                raise OpError(f"{node.label()}: required attribute '{k}' is missing")
            else:
                out[k] = default
        return out

    def check_arity(self, node: Node) -> None:
        def bad(n: int, lo: int, hi: int) -> bool:
            return n < lo or (hi >= 0 and n > hi)
        if bad(len(node.inputs), *self.inputs):
            raise OpError(f"{node.label()}: takes {_arity(self.inputs)} inputs, got {len(node.inputs)}")
        if bad(len(node.outputs), *self.outputs):
            raise OpError(f"{node.label()}: has {_arity(self.outputs)} outputs, got {len(node.outputs)}")
        for i in range(self.inputs[0]):
            if node.inputs[i] is None:
                raise OpError(f"{node.label()}: input {i} is required")

    def context(self, node: Node, with_values: bool = True) -> OpContext:
        self.check_arity(node)
        return OpContext(node, self.resolve_attrs(node),
                         [None if v is None else v.type for v in node.inputs],
                         [None if v is None or not with_values else v.data for v in node.inputs],
                         [o.type for o in node.outputs])

    def run(self, ctx: OpContext, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        """Run the reference kernel; the outputs are NumPy arrays with the inferred dtypes."""
        out = self.reference(ctx, *inputs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return [np.asarray(o) for o in outs]


def _arity(r: tuple[int, int]) -> str:
    lo, hi = r
    return str(lo) if lo == hi else (f"{lo} or more" if hi < 0 else f"{lo} to {hi}")


_REGISTRY: dict[tuple[str, str], OpDef] = {}


def _copies(views):
    """A view kernel's result as arrays of their own (each output's, for several)."""
    if isinstance(views, tuple):
        return tuple(np.array(v, order="C") for v in views)
    return np.array(views, order="C")


def register(name: str, category: Category, *, infer: Callable[[OpContext], list[TensorType]],
             attrs: dict[str, Any] | None = None, inputs: tuple[int, int] | int = 1,
             outputs: tuple[int, int] | int = 1, domain: str = "", returns_view: bool = False) -> Callable:
    """Decorator registering a reference kernel as op `name` (see the module docstring). With
    `returns_view`, the kernel returns a NumPy view of its input: the op's reference kernel copies it
    (kernels never return views), and `OpDef.view` keeps it for runtimes that copy into their own memory. An
    op of several outputs returns a tuple of views."""
    def deco(fn: Callable) -> Callable:
        key = (domain, name)
        if key in _REGISTRY:
            raise ValueError(f"op {name} is registered twice")
        reference = (lambda ctx, *args: _copies(fn(ctx, *args))) if returns_view else fn
        _REGISTRY[key] = OpDef(name, category, reference, infer, dict(attrs or {}),
                               inputs if isinstance(inputs, tuple) else (inputs, inputs),
                               outputs if isinstance(outputs, tuple) else (outputs, outputs),
                               domain, (fn.__doc__ or "").strip(), fn if returns_view else None)
        return fn
    return deco


def get_op(name: str, domain: str = "") -> OpDef:
    try:
        return _REGISTRY[(_canonical_domain(domain), name)]
    except KeyError:
        raise OpError(f"unsupported op {name!r}" + (f" in domain {domain!r}" if domain else "")) from None


def has_op(name: str, domain: str = "") -> bool:
    return (_canonical_domain(domain), name) in _REGISTRY


def all_ops() -> list[OpDef]:
    return sorted(_REGISTRY.values(), key=lambda d: (d.domain, d.name))


def _canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def infer_node(node: Node) -> list[TensorType]:
    """Infer a node's output types (raises OpError naming the node when inputs do not fit)."""
    opdef = get_op(node.op, node.domain)
    ctx = opdef.context(node)
    for i, t in enumerate(ctx.in_types):
        if t is None and i < len(node.inputs) and node.inputs[i] is not None:
            raise OpError(f"{node.label()}: input {i} '{node.inputs[i].name}' has no type yet")
    try:
        types = opdef.infer(ctx)
    except ShapeError as e:
        raise ctx.fail(str(e)) from None
    if len(types) < len(node.outputs):
        raise ctx.fail(f"inference gave {len(types)} output types for {len(node.outputs)} outputs")
    return list(types[:len(node.outputs)])
