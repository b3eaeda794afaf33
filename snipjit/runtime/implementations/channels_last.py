"""The `nhwc` implementation: generated kernels for the channels-last convolutions, pools and LRN.

The `ChannelsLast` pass puts convolution regions on [N, H, W, C] (`snipjit.nhwc::Conv`, pools). Here
a Conv runs as an implicit GEMM over its packed weights (`conv_launch`) — a 3×3 one of stride 1 on a map
large enough as Winograd's F(m×m, 3×3) (`winograd_launch`; option `winograd=False`: not) —, a depthwise
Conv and the pools as sliding-window vector kernels (`window_launch`), a ConvTranspose as stride²
convolutions (`conv_transpose_launch`); weights are packed (transformed) once, when the step is built.
A Conv's residual input and activation (which the `ChannelsLast` pass gave it) are computed in its
kernel's store; so is the epilogue the markup pass left to it: a per-channel bias Add joins the Conv's
bias and Relu/Clip become a clamp. Another activation is applied in place on the output afterwards.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...ir.graph import Node
from ...ops import get_op
from ...ops.channels_last import DOMAIN, POOLS, is_depthwise
from ...ops.windows import place_window, window_from_attrs
from ...ops.nn import conv_transpose_geometry
from . import (conv_launch, conv_transpose_launch, gemm_launch, global_pool_launch, held_weights, lrn_launch,
               window_launch, winograd_launch)
from .base import Implementation, Kernel, NativeStep, NotApplicable, PreparedLaunch, ReferenceKernel
from .held_weights import HeldWeight
from .blas import EPILOGUES
from .gemm_launch import available


def _clip_bounds(node: Node) -> tuple[float, float] | None:
    """Clip's (min, max) when both are absent or scalar constants."""
    lo, hi = (node.inputs + [None, None])[1:3]
    if any(v is not None and (not v.is_constant or v.data.size != 1) for v in (lo, hi)):
        return None
    return (-np.inf if lo is None else float(lo.data), np.inf if hi is None else float(hi.data))


class WindowKernel(Kernel):
    """A channels-last Conv or pool; `prepare(x, y, repeats)` makes the native launch for its arrays."""

    def __init__(self, node: Node):
        self.node = node
        self.reference = ReferenceKernel(node)
        self.ctx = self.reference.ctx
        self.attrs = get_op(node.op, node.domain).resolve_attrs(node)

    def spatial(self, x: np.ndarray) -> tuple[int, int]:
        return tuple(x.shape[1:3])

    def window(self, x: np.ndarray):
        return self.window_on(self.kernel_size(x), self.spatial(x))

    def window_on(self, kernel: tuple[int, ...], spatial: tuple[int, int] | None):
        """The attributes' window for `kernel`, clipped to an input of `spatial` size (if known)."""
        win = window_from_attrs(self.ctx, kernel)
        return win if spatial is None else win.clipped(spatial)

    def _placement(self, x: np.ndarray):
        return place_window(self.ctx, self.window(x), self.spatial(x))

    def geometry(self, x: np.ndarray) -> conv_launch.ConvGeometry:
        """The window on this input: pads before, and after as far as the last window reaches."""
        return self.geometry_on(self.kernel_size(x), self.spatial(x))

    def geometry_on(self, kernel: tuple[int, ...], spatial: tuple[int, int]) -> conv_launch.ConvGeometry:
        """The window of `kernel` on an input of `spatial` size (see `geometry`)."""
        win = self.window_on(kernel, spatial)
        placed = place_window(self.ctx, win, spatial)
        after = tuple(max(0, r) for r in placed.reach)   # (an unread tail is shorter than a stride)
        return conv_launch.ConvGeometry(win.kernel, win.strides, (*placed.begin, *after), win.dilations)

    def kernel_size(self, x: np.ndarray) -> tuple[int, ...]:
        raise NotImplementedError

    @property
    def writes_channel_slices(self) -> bool:
        """Every window kernel writes an output whose pixels are farther apart than its channels."""
        return True

    def takes(self, x: np.ndarray, y: np.ndarray) -> bool:
        """Whether the native kernel takes these arrays (else the reference computes the step)."""
        y_fits = conv_launch.pixel_rows(y) if self.writes_channel_slices else y.flags.c_contiguous
        return x.dtype == np.float32 and x.flags.c_contiguous and y_fits

    def prepare(self, inputs: Sequence[np.ndarray], y: np.ndarray, repeats: bool):
        raise NotImplementedError

    def after(self, y: np.ndarray) -> None:
        """What runs on the output after the kernel (epilogues it could not take)."""

    @property
    def has_after(self) -> bool:
        return False

    def __call__(self, inputs):
        shape = self.node.outputs[0].type.shape
        y = np.empty(shape if all(isinstance(d, int) for d in shape) else self.reference(inputs)[0].shape,
                     np.float32)
        self.run_into(inputs, [y])
        return [y]

    def run_into(self, inputs, outputs) -> None:
        launch = self.prepare(inputs, outputs[0], False)
        if launch is None:
            np.copyto(outputs[0], self.reference(inputs)[0])
            self.reference_epilogue(outputs[0])
        else:
            launch.run()
            self.after(outputs[0])

    def reference_epilogue(self, y: np.ndarray) -> None:
        """The absorbed epilogue, where the reference kernel computed the op itself."""
        self.after(y)

    def bind(self, in_shapes, fixed, n_outputs) -> PreparedLaunch | None:
        def prepare(arrays: list):
            launch = self.prepare(arrays[:-1], arrays[-1], True)
            if launch is None:
                return None
            if not self.has_after:
                return NativeStep(*getattr(launch, "native_launches", (launch,)))

            def call(arrays: list) -> None:
                launch.run()
                self.after(arrays[-1])
            return call

        return self.prepared_launch(prepare, in_shapes, fixed, n_outputs)


class WeightedKernel(WindowKernel):
    """A Conv or ConvTranspose: constant weights [.., .., KH, KW] (packed by the subclass, which keeps
    them: the program releases the graph's copy) and an optional bias."""

    def __init__(self, node: Node):
        super().__init__(node)
        b = node.inputs[2].data if len(node.inputs) > 2 and node.inputs[2] is not None else None
        self.bias = None if b is None else np.ascontiguousarray(b, dtype=np.float32)

    def kernel_size(self, x):
        return tuple(self.node.inputs[1].data.shape[2:])

    def holds_input(self, index: int) -> bool:
        return index == 1

    def held(self, index: int) -> HeldWeight:
        if index != 1:
            return super().held(index)
        return HeldWeight(self.packed, kernel_size=tuple(self.kernel_size(None)))


class ConvKernel(WeightedKernel):
    """A channels-last Conv: depthwise on the window kernel, and grouped where `window_launch.grouped_width`
    gives it a group width and it adds no residual; a 3×3 one of stride 1 as Winograd's (where `winograd`
    and `winograd_launch.choose_tile` give it tiles); any other on the implicit GEMM."""

    def __init__(self, node: Node, winograd: bool = True):
        super().__init__(node)
        w = node.inputs[1].data
        group = self.attrs["group"]
        self.out_channels = w.shape[0]
        self.planar = self.attrs["input_layout"] == "NCHW"   # (a network's image, read in place)
        self.activation = self.attrs["activation"]            # (before any absorbed epilogue)
        self.depthwise = is_depthwise(w.shape, group) and not self.planar
        geometry = conv_launch.ConvGeometry(tuple(w.shape[2:]), tuple(self.attrs["strides"] or (1, 1)),
                                            dilations=tuple(self.attrs["dilations"] or (1, 1)))
        residual = len(node.inputs) > 3 and node.inputs[3] is not None
        window = window_launch.Window(geometry.kernel, geometry.strides, dilations=geometry.dilations)
        self.group_width = window_launch.grouped_width(w.shape, group, window) \
            if group > 1 and not (self.depthwise or self.planar or residual) and available() else 0
        output = node.outputs[0].type.shape
        self.tile = winograd_launch.choose_tile(w.shape, group, geometry, self.planar, tuple(output[1:3])) \
            if winograd and not self.group_width and output is not None and len(output) == 4 else 0
        self.packed = self._packed_weights(node)
        self.added: np.ndarray | None = None              # absorbed bias Adds, summed
        self.clamp: tuple[float, float] | None = None
        self.epilogue: list[tuple[str, np.ndarray | None, dict]] = []   # applied after the kernel

    def _packed_weights(self, node: Node):
        """The weights in the kernel's form: the one offered (a saved model's), else packed here."""
        kind = (winograd_launch.PackedWinograd if self.tile else window_launch.PackedDepthwise if self.depthwise
                else window_launch.PackedGrouped if self.group_width else conv_launch.PackedConv)
        w = node.inputs[1]
        offered = held_weights.offered(w, kind)
        if offered is not None and (not self.tile or offered.tile == self.tile):
            return offered
        if self.tile:
            return winograd_launch.pack_winograd(w.data, self.tile)
        if self.depthwise:
            return window_launch.pack_depthwise(w.data)
        if self.group_width:
            return window_launch.pack_grouped(w.data)
        return conv_launch.pack_conv(w.data, self.attrs["group"])

    def spatial(self, x):
        return tuple(x.shape[2:4]) if self.planar else tuple(x.shape[1:3])

    def absorb(self, node: Node, data_index: int) -> bool:
        other = [v for i, v in enumerate(node.inputs) if i != data_index and v is not None]
        if node.domain or any(not v.is_constant for v in other):
            return False
        if (node.op == "Add" and self.clamp is None and not self.epilogue and not self.activation
                and self._per_channel(other[0].data)):
            add = other[0].data.reshape(-1).astype(np.float32)
            self.added = add if self.added is None else self.added + add
            return True
        bounds = (0.0, np.inf) if node.op == "Relu" else _clip_bounds(node) if node.op == "Clip" else None
        if bounds is not None and not self.epilogue:
            lo, hi = self.clamp or (-np.inf, np.inf)
            self.clamp = (max(lo, bounds[0]), min(hi, bounds[1]))
            return True
        if node.op in EPILOGUES and node.op != "Clip":
            self.epilogue.append((node.op, other[0].data if other else None, get_op(node.op).resolve_attrs(node)))
            return True
        return False

    def native_jobs(self) -> list:
        """Its kernel for the window the attributes give (pads as declared: they only tell a 1×1 product)."""
        if not available():
            return []
        kernel = tuple(self.node.inputs[1].data.shape[2:])
        strides, dilations = tuple(self.attrs["strides"] or (1, 1)), tuple(self.attrs["dilations"] or (1, 1))
        shape = self.node.outputs[0].type.shape if self.node.outputs[0].type else None
        output = tuple(shape[:3]) if shape and all(isinstance(n, int) for n in shape[:3]) else None
        if self.depthwise or self.group_width:
            window = window_launch.Window(kernel, strides, dilations=dilations)
            rows, threads = None, 1
            if output is not None and isinstance(shape[3], int):   # (its rows and threads tell whether it pairs rows)
                rows = output[0] * output[1]
                threads = window_launch.launch_threads(math.prod(shape) * math.prod(kernel))
            return [window_launch.window_kernel("madd", window, self.activation, self.group_width, output_rows=rows,
                                                threads=threads).job]
        if self.tile:
            return winograd_launch.jobs(self.packed, self.activation, output)
        pads = tuple(self.attrs["pads"] or (0, 0, 0, 0))
        geometry = conv_launch.ConvGeometry(kernel, strides, pads, dilations)
        chosen = conv_launch.conv_kernel(self.packed, geometry, self.planar, self.activation)
        if output is not None:   # (its work items' rows tell whether it asks for B ahead)
            chosen = gemm_launch.launch_kernel(chosen, self.packed.groups, math.prod(output), self.packed.n,
                                               self.packed.k, conv_launch.input_row_bytes(self.packed.cg, geometry),
                                               self.packed.groups > 1)
        return [chosen.job]

    def _per_channel(self, b: np.ndarray) -> bool:
        return b.size == self.out_channels and (b.ndim == 0 or b.shape[-1] == self.out_channels)

    def _total_bias(self) -> np.ndarray | None:
        if self.added is None:
            return self.bias
        return np.ascontiguousarray(self.added if self.bias is None else self.bias + self.added, dtype=np.float32)

    def prepare(self, inputs, y, repeats):
        x = inputs[0]
        if not self.takes(x, y):
            return None
        geometry, bias = self.geometry(x), self._total_bias()
        residual = inputs[3] if len(inputs) > 3 else None
        scale = inputs[4] if len(inputs) > 4 else None
        windowed = self.depthwise or self.group_width
        if (windowed and residual is not None) or (scale is not None and (windowed or self.tile)):
            return None   # (the window kernels add no residual, Winograd's takes no scale: the reference does)
        if scale is not None and not (scale.dtype == np.float32 and scale.flags.c_contiguous):
            return None
        if windowed:
            window = window_launch.Window(geometry.kernel, geometry.strides, geometry.pads, geometry.dilations)
            prepare = window_launch.prepare_grouped if self.group_width else window_launch.prepare_depthwise
            return prepare(x, self.packed, bias, self.clamp, y, window, repeats, self.activation)
        if residual is not None and (residual.dtype != np.float32 or not conv_launch.pixel_rows(residual)):
            return None
        if self.tile:
            return winograd_launch.prepare_winograd(x, self.packed, y, geometry, bias, self.clamp, repeats,
                                                    self.activation, residual)
        return conv_launch.prepare_conv(x, self.packed, y, geometry, bias, self.clamp, repeats, self.planar,
                                        self.activation, residual, scale)

    def reference_epilogue(self, y):
        if self.added is not None:
            y += self.added
        if self.clamp is not None:
            np.clip(y, *self.clamp, out=y)
        self.after(y)

    def after(self, y):
        for op, b, attrs in self.epilogue:
            EPILOGUES[op](y, b, attrs)

    @property
    def has_after(self) -> bool:
        return bool(self.epilogue)


class PoolKernel(WindowKernel):
    """A channels-last MaxPool, AveragePool or global pool."""

    def __init__(self, node: Node):
        super().__init__(node)
        self.kind = "max" if "Max" in node.op else "avg"
        self.is_global = node.op.startswith("Global")

    def kernel_size(self, x):
        return tuple(x.shape[1:3]) if self.is_global else tuple(self.attrs["kernel_shape"])

    def native_jobs(self) -> list:
        """Its kernel: a global pool's (`global_pool_launch`); a max pool's for the window on the input's static size
        (clipped as at run time; a dynamic size: the declared window); an average pool's tap loop."""
        if not available():
            return []
        shape = self.node.inputs[0].type.shape
        spatial = tuple(shape[1:3]) if shape is not None and len(shape) == 4 else None
        static = spatial if spatial and all(isinstance(n, int) for n in spatial) else None
        if self.is_global or (static and self._one_window(static)):
            return [global_pool_launch.kernel_for(self.kind).job]
        if self.kind == "avg":
            return [window_launch.kernel_for("mean").job]
        win = self.window_on(tuple(self.attrs["kernel_shape"]), static)
        window = window_launch.Window(win.kernel, win.strides, dilations=win.dilations)
        return [window_launch.window_kernel("max", window).job]

    def _one_window(self, spatial: tuple[int, int]) -> bool:
        """Whether the pool is one window over all of an unpadded input of `spatial` size (EfficientNet's last
        pool, a kernel larger than its 7x7 input): the mean (count_include_pad then counting no pad) or maximum
        of each channel, a global pool."""
        geometry = self.geometry_on(tuple(self.attrs["kernel_shape"]), spatial)
        counted_pads = self.attrs.get("count_include_pad", 0) and any(self.attrs.get("pads") or ())
        return (geometry.kernel == tuple(spatial) and not any(geometry.pads) and geometry.dilations == (1, 1)
                and not counted_pads)

    def prepare(self, inputs, y, repeats):
        x = inputs[0]
        if not self.takes(x, y):
            return None
        if self.is_global or self._one_window(self.spatial(x)):
            return global_pool_launch.prepare_global_pool(self.kind, x, y, repeats)
        geometry = self.geometry(x)
        include_pad = bool(self.attrs.get("count_include_pad", 0))
        if include_pad and geometry.pads[2:] != tuple(self._placement(x).end):
            return None   # (the divisor counts declared pads, not how far a ceil_mode window reaches)
        window = window_launch.Window(geometry.kernel, geometry.strides, geometry.pads, geometry.dilations)
        return window_launch.prepare_pool(self.kind, x, y, window, include_pad, repeats)


class ConvTransposeKernel(WeightedKernel):
    """A channels-last ConvTranspose: a convolution per sub-pixel phase (with dilation: a GEMM and col2im)."""

    @property
    def writes_channel_slices(self) -> bool:
        return False   # (its phases write strided views of a dense output)

    def __init__(self, node: Node):
        super().__init__(node)
        w = node.inputs[1].data
        win = window_from_attrs(self.ctx, tuple(w.shape[2:]))
        self.packed = held_weights.offered(node.inputs[1], conv_transpose_launch.PackedTranspose) or \
            conv_transpose_launch.pack_conv_transpose(w, win.strides, win.dilations)

    def prepare(self, inputs, y, repeats):
        x = inputs[0]
        if not self.takes(x, y):
            return None
        win = window_from_attrs(self.ctx, self.kernel_size(x))
        out, begin = conv_transpose_geometry(self.ctx, self.spatial(x), win.kernel)
        if begin is None or tuple(out) != tuple(y.shape[1:3]):
            return None
        geometry = conv_transpose_launch.TransposeGeometry(win.kernel, win.strides, win.dilations, tuple(begin))
        return conv_transpose_launch.prepare_conv_transpose(x, self.packed, y, geometry, self.bias, repeats)


class LrnKernel(Kernel):
    """A channels-last LRN: its generated kernel (`lrn_launch`), one pass over the tensor."""

    def __init__(self, node: Node):
        self.reference = ReferenceKernel(node)
        a = get_op(node.op, node.domain).resolve_attrs(node)
        self.size, self.alpha, self.beta, self.bias = int(a["size"]), float(a["alpha"]), float(a["beta"]), \
            float(a["bias"])

    def prepare(self, x: np.ndarray, y: np.ndarray):
        takes = x.dtype == y.dtype == np.float32 and x.flags.c_contiguous and y.flags.c_contiguous
        return lrn_launch.prepare_lrn(x, y, self.size, self.alpha, self.beta, self.bias) if takes else None

    def __call__(self, inputs):
        y = np.empty(inputs[0].shape, np.float32)
        self.run_into(inputs, [y])
        return [y]

    def run_into(self, inputs, outputs) -> None:
        launch = self.prepare(inputs[0], outputs[0])
        if launch is None:
            np.copyto(outputs[0], self.reference(inputs)[0])
        else:
            launch.run()

    def bind(self, in_shapes, fixed, n_outputs) -> PreparedLaunch:
        def prepare(arrays: list):
            launch = self.prepare(arrays[0], arrays[-1])
            return None if launch is None else NativeStep(launch)

        return self.prepared_launch(prepare, in_shapes, fixed, n_outputs)


def accepts(node: Node, options: dict) -> bool:
    return (node.domain == DOMAIN and available() and node.inputs[0].type.dtype.np == np.float32
            and (node.op not in ("Conv", "ConvTranspose") or node.inputs[1].is_constant))


def build(node: Node, options: dict) -> Kernel:
    if node.op == "Conv":
        return ConvKernel(node, winograd=bool(options.get("winograd", True)))
    if node.op == "ConvTranspose":
        return ConvTransposeKernel(node)
    if node.op in POOLS:
        return PoolKernel(node)
    if node.op == "LRN":
        return LrnKernel(node)
    raise NotApplicable


NHWC = Implementation("nhwc", accepts, build)
