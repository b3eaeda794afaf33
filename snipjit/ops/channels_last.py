"""Channels-last (NHWC) twins of the 2-D convolution, pooling and LRN ops, in domain `snipjit.nhwc`.

The `ChannelsLast` graph pass moves regions of convolutions onto the layout [N, H, W, C], where the
channel axis is contiguous: the convolution kernels put output channels along the vector lanes, and
the elementwise ops between convolutions broadcast per-channel operands along the last axis. Each op
here has the attributes and meaning of its ONNX namesake, with the input and output transposed from
NCHW to NHWC (the weights and bias of Conv and ConvTranspose keep their ONNX layout): its shape
inference and reference kernel are the ONNX op's, wrapped in the two transposes. Conv's
`input_layout = "NCHW"` reads an NCHW input (a network's image) and still gives an NHWC output; an
optional fourth input, `residual` (NHWC, the output's shape), is added to it and then its `activation`
(see `ACTIVATIONS`) applied, so the kernel can compute both before the store; an optional fifth, `scale`
([N, 1, 1, C], an NHWC input only), multiplies the input's channels per image first (squeeze-excitation's
gate, which a 1×1 convolution's kernel folds into its weights).
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import TensorType
from .nn import conv as _registers_the_onnx_ops_wrapped_here  # noqa: F401
from .common import evaluate
from .registry import OpContext, get_op, register

DOMAIN = "snipjit.nhwc"
TO_NHWC = (0, 2, 3, 1)     # an NCHW tensor's axes, permuted to NHWC
TO_NCHW = (0, 3, 1, 2)
POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
OPS = ("Conv", "ConvTranspose", *POOLS, "LRN")


def is_depthwise(weights_shape: tuple, group: int) -> bool:
    """A Conv of one input channel per group and one group per output channel (the window kernel's)."""
    return weights_shape[1] == 1 and group == weights_shape[0] and group > 1


def _permuted(t: TensorType | None, perm: tuple[int, ...]) -> TensorType | None:
    if t is None or t.shape is None or len(t.shape) != 4:
        return t
    return TensorType(t.dtype, tuple(t.shape[p] for p in perm))


# Conv's `activation`: a math-library function applied to its output, the ONNX ops it stands for
ACTIVATIONS = {
    "silu": lambda y: evaluate("Mul", [y, evaluate("Sigmoid", [y])[0]])[0],
    "hard_swish": lambda y: evaluate("HardSwish", [y])[0],
    "sigmoid": lambda y: evaluate("Sigmoid", [y])[0],
}


def _reads_nchw(ctx: OpContext) -> bool:
    layout = ctx.attrs.get("input_layout", "NHWC")
    if layout not in ("NHWC", "NCHW"):
        raise ctx.fail(f"input_layout must be NHWC or NCHW, got {layout!r}")
    return layout == "NCHW"


def _nchw_context(ctx: OpContext) -> OpContext:
    """The ONNX op's view of a node: its data input and outputs as NCHW."""
    x = ctx.in_types[0] if ctx.in_types else None
    if x is not None and x.shape is not None and len(x.shape) != 4:
        raise ctx.fail(f"channels-last input must have rank 4 [N, H, W, C], got {list(x.shape)}")
    if ctx.attrs.get("activation", "") not in ("", *ACTIVATIONS):
        raise ctx.fail(f"activation must be one of {sorted(ACTIVATIONS)} or empty, got {ctx.attrs['activation']!r}")
    attrs = {k: v for k, v in ctx.attrs.items() if k not in ("input_layout", "activation")}
    x = x if _reads_nchw(ctx) else _permuted(x, TO_NCHW)
    rest = ctx.in_types[1:3] if ctx.op == "Conv" else ctx.in_types[1:]   # (without Conv's residual and scale)
    if ctx.op == "Conv" and len(ctx.in_types) > 4 and ctx.in_types[4] is not None:
        _check_scale(ctx, ctx.in_types[0], ctx.in_types[4])
    if ctx.op == "Conv" and len(ctx.in_types) > 3 and ctx.in_types[3] is not None and ctx.out_types:
        out = ctx.out_types[0]
        residual = ctx.in_types[3].shape
        if (out is not None and out.shape is not None and residual is not None and len(residual) == len(out.shape)
                and any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(residual, out.shape))):
            raise ctx.fail(f"the residual {list(residual)} must have the output's shape {list(out.shape)}")
    return OpContext(ctx.node, attrs, [x, *rest], ctx.in_values[:len(rest) + 1],
                     [_permuted(t, TO_NCHW) for t in ctx.out_types])


def _check_scale(ctx: OpContext, x: TensorType | None, scale: TensorType) -> None:
    """A Conv's input scale: [N, 1, 1, C] of its NHWC input [N, H, W, C], as far as the shapes are known."""
    if _reads_nchw(ctx):
        raise ctx.fail("an input scale needs an NHWC input (input_layout NHWC)")
    if scale.shape is None or x is None or x.shape is None:
        return
    expected = (x.shape[0], 1, 1, x.shape[3])
    if len(scale.shape) != 4 or any(isinstance(a, int) and isinstance(b, int) and a != b
                                    for a, b in zip(scale.shape, expected)):
        raise ctx.fail(f"the input scale {list(scale.shape)} must be [N, 1, 1, C] of the input "
                       f"{list(x.shape)}")


def _register(name: str) -> None:
    onnx_op = get_op(name)

    def infer(ctx: OpContext) -> list[TensorType]:
        return [_permuted(t, TO_NHWC) for t in onnx_op.infer(_nchw_context(ctx))][:1]

    def reference(ctx: OpContext, x, *rest):
        residual = rest[2] if name == "Conv" and len(rest) > 2 else None
        if name == "Conv" and len(rest) > 3 and rest[3] is not None:
            x = evaluate("Mul", [x, rest[3]])[0]
        rest = rest[:2] if name == "Conv" else rest
        (y, *_) = onnx_op.run(_nchw_context(ctx), [x if _reads_nchw(ctx) else np.transpose(x, TO_NCHW), *rest])
        if residual is not None:
            y = evaluate("Add", [y, np.transpose(residual, TO_NCHW)])[0]
        activation = ctx.attrs.get("activation", "")
        if activation:
            y = ACTIVATIONS[activation](y)
        return np.ascontiguousarray(np.transpose(y, TO_NHWC))

    reference.__doc__ = f"ONNX {name} on an NHWC input, giving an NHWC output."
    attrs = {**onnx_op.attrs, "input_layout": "NHWC", "activation": ""} if name == "Conv" else onnx_op.attrs
    inputs = (2, 5) if name == "Conv" else onnx_op.inputs   # Conv: x, w, bias, residual, scale
    register(name, onnx_op.category, infer=infer, attrs=attrs, inputs=inputs, outputs=1,
             domain=DOMAIN)(reference)


for _name in OPS:
    _register(_name)
