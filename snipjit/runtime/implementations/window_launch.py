"""Channels-last (NHWC) sliding windows on snipjit's generated window kernel (`targets.llvm.window`),
run on the native pool: depthwise convolution (with bias and a clamp fused), grouped convolution of
as many channels per group (in and out) as 4 to the level's vector lanes, or two vectors (`grouped_width`),
MaxPool and AveragePool (the global pools have a kernel of their own: `global_pool_launch`).

One kernel per way of combining taps (`madd`, `max`, `mean`) and ISA level, compiled on first use, once per
process and level; its register block follows the level (`targets.isa`). Depthwise weights are packed once
(`pack_depthwise`): channel-blocked [cp / lanes, KH·KW, lanes] with cp a multiple of the vector width, zeros
past C, so the kernel loads whole weight vectors without masks, a channel vector's taps at offsets from one
pointer. Work items are output rows (pairs of them for a 3×3 kernel at row stride 1 and a 5×5 at row stride 2 on
32 registers, computed together: `pairs`) × chunks of channels × images, each thread's share in one piece
(`WindowLaunch.grain`). Images split by rows, so each thread reads and writes memory of its own; a row is cut
into chunks of channels only where the rows do not spread evenly over the threads (`channel_chunks`), and a
thread's share stays a run of rows but for a chunk at its ends (split by channels throughout, over 2 threads,
the pixels' cache lines alternating between cores, the 14×14 and 7×7 layers ran 1.4-1.8× slower than split by
rows, Zen 4). A small job runs on the calling thread.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ...memory.solver import aligned_empty
from ...targets.llvm.window import DIMS, PTRS, ZEROS, WindowKernel, window_blocks
from ..parallel.native_threads import get_native_pool, native_call, native_pool_threads, runner
from ..caches.object_cache import NativeJob
from .conv_launch import pixel_rows
from .gemm_launch import BALANCE_GAIN, available
from .kernel_arguments import dim_array, pointer_array

PARALLEL_MIN_TAPS = 1 << 16   # smaller jobs (output elements × kernel taps) run on the calling thread
REUSE_WIDTHS = range(2, 8)    # kernel widths with a depthwise kernel reusing inputs across pixels
REUSE_STRIDES = (1, 2)        # and its column strides
PAIRED = ((3, 1), (5, 2))     # (kernel width, row stride) of depthwise kernels computing two rows at once
MIN_PAIRED_PIXELS = 4         # ... where their blocks of two rows still have this many pixels per row
MIN_PAIRS_PER_THREAD = 4      # ... and, at row stride 1, each thread has this many pairs of rows (`pairs`)
MIN_GROUPED_PIXELS = 4        # the fewest pixels per block of a grouped convolution of two vectors per group
TWO_VECTOR_WIDTHS = range(2, 6)   # and its kernel widths (7: 14 weight vectors, spilled on AVX-512's 32 registers)


@dataclass(frozen=True)
class Window:
    """2-D window geometry."""
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)   # top, left, bottom, right
    dilations: tuple[int, int] = (1, 1)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        """(OH, OW) for an input of h × w (no ceil mode)."""
        top, left, bottom, right = self.pads
        return tuple((size + lo + hi - (k - 1) * dil - 1) // s + 1 for size, lo, hi, k, s, dil in
                     ((h, top, bottom, self.kernel[0], self.strides[0], self.dilations[0]),
                      (w, left, right, self.kernel[1], self.strides[1], self.dilations[1])))

    def check(self) -> None:
        if min(self.kernel + self.strides + self.dilations) < 1 or min(self.pads) < 0:
            raise ValueError(f"window {self}: kernel, strides and dilations must be positive, pads >= 0")


@dataclass(frozen=True)
class CompiledWindow:
    """One kernel a `WindowLaunch` runs, for one ISA level (compiled on first use): a window kernel, or
    another of the same ABI (`generator`: Winograd's transforms)."""
    shape: object   # WindowKernel, or the generator's shape
    cpu: str
    features: str
    generator: str = "window:window_module"

    @property
    def job(self) -> NativeJob:
        return NativeJob(self.generator, self.shape, self.cpu, self.features)


def kernel_for(combine: str, activation: str = "", kw: int = 0, sw: int = 1, rows: int = 1,
               group: int = 0, kh: int = 0, sh: int = 1) -> CompiledWindow:
    """The window kernel combining taps with `combine` (and for `madd`, applying `activation`; with `kw`, the variant
    for that kernel width, column stride `sw` and column dilation 1, computing `rows` output rows at once where it
    can, at row stride `sh`; with `group` too, a grouped convolution's of `group` channels per group: one vector
    that wide, or whole vectors; a depthwise convolution's, without `group`, unrolls its `kh` kernel rows) at the
    current ISA level."""
    from ...targets.llvm import jit
    host = jit.host()
    level = host.level
    kw, rows = (kw, rows) if kw else (0, 1)
    lanes = min(group, level.f32_lanes) if group else level.f32_lanes
    per_group = group // lanes
    pixels, vectors = window_blocks(level.vector_registers, kw, rows, per_group, level.fused_multiply_add, sw)
    shape = WindowKernel(combine, pixels, vectors, lanes, level.fused_multiply_add, activation, kw, sw if kw else 1,
                         rows, level.vector_registers, per_group, kh if kw and not per_group else 0,
                         sh if rows == 2 else 1)
    return CompiledWindow(shape, host.cpu, host.features)


def _compiled(kernel: CompiledWindow) -> tuple[int, object]:
    return kernel.job.kernel()


def _padded(c: int, lanes: int) -> int:
    return -(-c // lanes) * lanes


@dataclass(frozen=True)
class PackedDepthwise:
    """Depthwise weights [C, 1, KH, KW] channel-blocked for vectors of `lanes`: data[c // lanes, kh·KW + kw,
    c % lanes], zeros past C (a channel vector's tap vectors side by side)."""
    data: np.ndarray    # [cp / lanes, KH·KW, lanes]
    channels: int
    kernel: tuple[int, int]

    @property
    def lanes(self) -> int:
        return self.data.shape[2]

    def unpack(self) -> np.ndarray:
        kh, kw = self.kernel
        taps = self.data.transpose(1, 0, 2).reshape(kh * kw, -1)[:, :self.channels]   # [KH·KW, C]
        return np.ascontiguousarray(taps.T.reshape(self.channels, 1, kh, kw))


def pack_depthwise(w: np.ndarray) -> PackedDepthwise:
    """Pack ONNX depthwise weights [C, 1, KH, KW] (float32) for the current ISA level."""
    if w.ndim != 4 or w.shape[1] != 1:
        raise ValueError(f"depthwise weights must be [C, 1, KH, KW], got {list(w.shape)}")
    c, _, kh, kw = w.shape
    from ...targets.llvm import jit
    lanes = jit.host().level.f32_lanes
    cp = _padded(c, lanes)
    padded = np.zeros((cp, kh * kw), np.float32)
    padded[:c] = np.asarray(w, np.float32).reshape(c, kh * kw)
    data = aligned_empty(kh * kw * cp * 4).view(np.float32).reshape(cp // lanes, kh * kw, lanes)
    data[:] = padded.reshape(cp // lanes, lanes, kh * kw).transpose(0, 2, 1)
    return PackedDepthwise(data, c, (kh, kw))


def _reuses(window: "Window") -> bool:
    """Whether a kernel reusing inputs across pixels takes the window: its kernel width, column stride and
    column dilation 1, a kernel height no larger than the widths (a depthwise or max pool kernel unrolls
    its kernel rows: a global max pool over 64×5 pixels took 30 s to compile), and left and right pads
    narrower than the window (its blocks at the edges check only their first and last KW - 1 columns)."""
    _, left, _, right = window.pads
    return (window.kernel[1] in REUSE_WIDTHS and window.kernel[0] <= max(REUSE_WIDTHS)
            and window.strides[1] in REUSE_STRIDES and window.dilations[1] == 1 and max(left, right) < window.kernel[1])


def grouped_width(w_shape: tuple[int, ...], groups: int, window: "Window") -> int:
    """The channels per group with which the window kernel computes a grouped convolution of weights
    `w_shape` [O, C/groups, KH, KW] (as many outputs as inputs per group: a power of two from 4 to the ISA
    level's vector width, or two vectors where blocks of at least `MIN_GROUPED_PIXELS` pixels still fit the
    registers (`TWO_VECTOR_WIDTHS`); a kernel width and column stride that reuse inputs, column dilation 1);
    else 0."""
    from ...targets.llvm import jit
    o, cg, _, kw = w_shape
    level = jit.host().level
    lanes = level.f32_lanes
    if cg == 2 * lanes:   # two vectors per group: their accumulators and 2·kw weight vectors must leave room
        wide = kw in TWO_VECTOR_WIDTHS and \
            window_blocks(level.vector_registers, kw, 1, 2, level.fused_multiply_add)[0] >= MIN_GROUPED_PIXELS
    else:
        wide = cg in (4, 8, 16) and cg <= lanes
    return cg if wide and o == cg * groups and _reuses(window) else 0


@dataclass(frozen=True)
class PackedGrouped:
    """Grouped convolution weights [C, L, KH, KW] (L channels per group, as many in as out) laid out group
    by group: data[g, (kh·KW + kw)·L + i, o], per tap and input channel i its L outputs' weights (within a
    group, every weight vector at an offset the kernel knows when generated)."""
    data: np.ndarray    # [C / L, KH·KW·L, L]
    kernel: tuple[int, int]

    @property
    def group(self) -> int:
        return self.data.shape[2]

    @property
    def channels(self) -> int:
        return self.data.shape[0] * self.group

    def unpack(self) -> np.ndarray:
        (kh, kw), group, groups = self.kernel, self.group, self.data.shape[0]
        w = self.data.reshape(groups, kh, kw, group, group).transpose(0, 4, 3, 1, 2)
        return np.ascontiguousarray(w.reshape(groups * group, group, kh, kw))


def pack_grouped(w: np.ndarray) -> PackedGrouped:
    """Pack ONNX grouped convolution weights [C, L, KH, KW] (C / L groups of L channels in and out)."""
    if w.ndim != 4 or w.shape[1] < 1 or w.shape[0] % w.shape[1]:
        raise ValueError(f"grouped weights must be [C, L, KH, KW] with C a multiple of L, got {list(w.shape)}")
    c, group, kh, kw = w.shape
    per_group = np.asarray(w, np.float32).reshape(c // group, group, group, kh, kw)   # [g, o, i, kh, kw]
    data = aligned_empty(kh * kw * group * c * 4).view(np.float32).reshape(c // group, kh * kw * group, group)
    data[:] = per_group.transpose(0, 3, 4, 2, 1).reshape(c // group, kh * kw * group, group)
    return PackedGrouped(data, (kh, kw))


@dataclass
class WindowLaunch:
    """One window operation with its kernel arguments prepared: `run()` computes it again into the same
    memory (x and out must stay alive; the packed weights, bias, clamp and tap offsets are held here). A
    launch made to `repeat` runs as one prepared native call (`NativePool.prepare`)."""
    kernel: CompiledWindow
    ptrs: ctypes.Array
    dims: ctypes.Array
    items: int
    threads: int
    held: tuple          # arrays the pointers point into
    repeats: bool = False

    @property
    def grain(self) -> int:
        """Work items per claim: a thread's share (its shard of the pool's items) in one piece, so its
        consecutive rows share their input rows in its caches, and a launch run again finds its share there
        (measured 1.06-1.11× faster than claims of items / 16 at 2 threads on MobileNet-V2's 112×112 and 56×56
        3×3 layers, Zen 4); a worker waking late finds its share claimed by the threads already working."""
        return -(-self.items // max(1, self.threads))

    def __post_init__(self):
        address, fn = _compiled(self.kernel)
        pool = get_native_pool()
        self.native_call = None if self.items == 0 else native_call(
            pool, address, ctypes.addressof(self.ptrs), ctypes.addressof(self.dims), self.items, self.grain,
            parallel=self.threads > 1)
        self._call = (lambda: None) if self.native_call is None else runner(pool, self.native_call, fn, self.repeats)

    def run(self) -> None:
        """Compute the operation into `out` (a method, so `prepare_...(...).run()` keeps the arguments
        alive while it runs)."""
        self._call()


def _check_nhwc(name: str, a: np.ndarray, channel_slice: bool = False) -> None:
    """`a` is a float32 NHWC array, C-contiguous (`channel_slice`: or a slice of the channels of one)."""
    contiguous = isinstance(a, np.ndarray) and (a.flags.c_contiguous or channel_slice and pixel_rows(a))
    if not isinstance(a, np.ndarray) or a.ndim != 4 or a.dtype != np.float32 or not contiguous:
        layout = "a C-contiguous float32 NHWC array [N, H, W, C]" + (" or its channels' slice" if channel_slice else "")
        shape = list(getattr(a, "shape", ()))
        laid_out = "" if len(shape) != 4 or contiguous else " (not contiguous)"
        raise ValueError(f"{name} must be {layout}, got {getattr(a, 'dtype', type(a).__name__)} {shape}{laid_out}")


def window_kernel(combine: str, window: Window, activation: str = "", group: int = 0,
                  single: bool = False, output_rows: int | None = None, threads: int = 1) -> CompiledWindow:
    """The kernel a window op runs on: for a depthwise convolution or a max pool whose kernel width, column
    stride and dilation have one, the variant reusing inputs across pixels (two output rows at once where `pairs`
    says so, at row dilation 1, for `output_rows` rows of all images (None: not known) on `threads`), unless a
    pool's images each have a `single` output pixel (one window over a padded image: nothing to reuse, and the
    variant's many block widths cost seconds to compile); a grouped convolution's (`group` channels per group,
    which `grouped_width` gave) reuses them too."""
    (sh, sw), dh, kw = window.strides, window.dilations[0], window.kernel[1]
    reuse = combine in ("madd", "max") and _reuses(window) and not single
    if group and not reuse:
        raise ValueError(f"no grouped window kernel for window {window}")
    paired = reuse and combine == "madd" and not group and dh == 1 and pairs(kw, sh, output_rows, threads)
    return kernel_for(combine, activation, kw if reuse else 0, sw, 2 if paired else 1, group, window.kernel[0], sh)


def launch_threads(work: int) -> int:
    """The threads a window launch of `work` taps (output elements × kernel taps) runs on: the native pool's, as
    the launch and the kernel named ahead of it (`native_jobs`) both see it."""
    return native_pool_threads() if work >= PARALLEL_MIN_TAPS else 1


def pairs(kw: int, sh: int, output_rows: int | None = None, threads: int = 1) -> bool:
    """Whether a depthwise kernel of width `kw` at row stride `sh` computes two output rows at once at the
    current ISA level: widths and strides in `PAIRED`, where blocks of two rows keep `MIN_PAIRED_PIXELS` per row
    (a 5×5 on 32 registers, not 16), and at row stride 1 only where each of the `threads` has
    `MIN_PAIRS_PER_THREAD` pairs of the `output_rows` (when known). Two rows at row stride s read KH + s input
    rows, against 2·KH apart. (Xeon, AVX-512, 2 threads, in one process: 5×5 stride 2 layers 1.07-1.25× faster
    paired; 3×3 stride 2 ones 0.75-1.19×, 5×5 and 7×7 stride 1 ones 0.83-1.13×: not paired. Pairs halve the work
    items, which then spread less evenly over the threads: on Zen 4, 2 threads, 11 alternating rounds, MobileNet-V2's
    3×3 layers on 14×14 and 7×7 maps (7 and 4 pairs) ran 1.11-1.24× faster unpaired forced to AVX2, 0.98-1.11×
    on AVX-512, those on 28×28 and 56×56 maps 0.87-0.94×; at one thread, paired 1.1-1.15× faster on every one.
    EfficientNet-B0's 5×5 stride-2 layer on a 7×7 output, 4 pairs, stays paired: 1.1× faster, AVX-512.)"""
    if output_rows is not None and sh == 1 and -(-output_rows // 2) < MIN_PAIRS_PER_THREAD * threads:
        return False
    from ...targets.llvm import jit
    level = jit.host().level
    return (kw, sh) in PAIRED and window_blocks(level.vector_registers, kw, 2)[0] >= MIN_PAIRED_PIXELS


def channel_chunks(c: int, block: int, row_items: int, threads: int) -> int:
    """How many chunks of channels (whole `block`s) each of `row_items` output rows (or pairs) is cut into: one,
    or more where the threads' contiguous shares of the items would be uneven (7 rows over 2 threads: 4 and 3;
    in two chunks each, 7 and 7 halves; by `BALANCE_GAIN`, as products' rows are), up to twice the threads.
    (Xeon, 2 threads, AVX-512: 14×14 3×3 layers (7 row pairs) 1.10-1.17×, 7×7 5×5 and 7×7 ones (7 rows)
    1.08-1.22× faster; forced AVX2 1.05-1.15×; within noise on whole networks, where these layers are small.)"""
    if threads < 2 or c < 1:
        return 1

    def busiest(chunks: int) -> int:   # the channel rows the busiest thread computes
        chunk_c = _padded(-(-c // chunks), block)
        items = [min(chunk_c, c - start) for start in range(0, c, chunk_c)] * row_items
        grain = -(-len(items) // threads)
        return max(sum(items[i:i + grain]) for i in range(0, len(items), grain))

    best = min(range(1, min(-(-c // block), 2 * threads) + 1), key=lambda chunks: (busiest(chunks), chunks))
    return best if busiest(best) < BALANCE_GAIN * busiest(1) else 1


def _launch(combine: str, x: np.ndarray, out: np.ndarray, window: Window, weights: np.ndarray | None,
            bias: np.ndarray | None, clamp: tuple[float, float] | None, include_pad: bool,
            repeats: bool, activation: str = "", group: int = 0) -> WindowLaunch | None:
    _check_nhwc("x", x)
    _check_nhwc("out", out, channel_slice=True)
    window.check()
    n, h, w, c = x.shape
    oh, ow = window.output_size(h, w)
    if oh < 1 or ow < 1:
        raise ValueError(f"window {window} does not fit an input of {h}×{w} (even padded)")
    if out.shape != (n, oh, ow, c):
        raise ValueError(f"out is {list(out.shape)}, but the window on x {list(x.shape)} gives "
                         f"{[n, oh, ow, c]}")
    if not available():
        return None
    kh, kw = window.kernel
    (sh, sw), (dh, dw), (top, left, _, _) = window.strides, window.dilations, window.pads
    threads = launch_threads(n * oh * ow * c * kh * kw)
    kernel = window_kernel(combine, window, activation, group, single=combine != "madd" and (oh, ow) == (1, 1),
                           output_rows=n * oh, threads=threads)
    lanes, vectors, rows = kernel.shape.lanes, kernel.shape.vectors, kernel.shape.rows
    ow_lo = min(ow, -(-left // sw))                                  # first column with iw >= 0
    ow_hi = max(ow_lo, min(ow, (w - 1 + left - (kw - 1) * dw) // sw + 1))   # past the last inside the row
    block = kernel.shape.step if kernel.shape.grouped else vectors * lanes
    chunk_c = _padded(-(-c // channel_chunks(c, block, n * -(-oh // rows), threads)), block) if c else block
    chunks = -(-c // chunk_c) if c else 0
    cp = _padded(c, lanes)
    if combine == "madd":
        full_bias = np.zeros(cp, np.float32)
        if bias is not None:
            full_bias[:c] = np.asarray(bias, np.float32).reshape(c)
        lo, hi = clamp if clamp is not None else (-np.inf, np.inf)
        params = np.zeros(ZEROS + _padded(max(c, 1), block), np.float32)   # the clamp; zeros the edges read
        params[:2] = lo, hi
        held = (weights, full_bias, params)   # (not x and out: a step's output buffer held here would never
    elif combine == "max":                    # be recycled, and a new one costs a new launch each run)
        full_bias = None
        params = np.full(ZEROS + _padded(max(c, 1), block), -np.inf, np.float32)   # -inf the edges read
        held = (params,)
    else:
        full_bias = params = None
        held = ()
    taps = ((np.arange(kh)[:, None] * dh * w + np.arange(kw)[None, :] * dw) * c).astype(np.int64).reshape(-1)
    held += (taps,)
    ptrs = pointer_array(PTRS, x=x, w=weights, bias=full_bias, out=out, params=params, taps=taps)
    values = dict(H=h, W=w, C=c, OH=oh, OW=ow, KH=kh, KW=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=top, pl=left,
                  ow_lo=ow_lo, ow_hi=ow_hi, chunks=chunks, chunk_c=chunk_c, include_pad=int(include_pad),
                  OC=out.strides[2] // out.itemsize)
    dims = dim_array(DIMS, **values)
    return WindowLaunch(kernel, ptrs, dims, n * chunks * -(-oh // rows), threads, held, repeats)


def _check_weights(packed, kind: type, pack: str, x: np.ndarray, window: Window, bias: np.ndarray | None,
                   clamp: tuple[float, float] | None) -> None:
    """Packed weights of `kind` (made by `pack`) fit x, the window, the bias and the clamp."""
    if not isinstance(packed, kind):
        raise ValueError(f"these weights must be packed by {pack}, got {type(packed).__name__}")
    if packed.kernel != tuple(window.kernel):
        raise ValueError(f"the packed weights are {packed.kernel[0]}×{packed.kernel[1]}, the window's kernel "
                         f"{window.kernel[0]}×{window.kernel[1]}")
    if x.ndim == 4 and packed.channels != x.shape[3]:
        raise ValueError(f"the weights have {packed.channels} channels, x has {x.shape[3]}")
    if bias is not None and np.size(bias) != packed.channels:
        raise ValueError(f"bias has {np.size(bias)} values for {packed.channels} channels")
    if clamp is not None and len(clamp) != 2:
        raise ValueError(f"clamp must be (lo, hi), got {clamp!r}")


def prepare_depthwise(x: np.ndarray, packed: PackedDepthwise, bias: np.ndarray | None,
                      clamp: tuple[float, float] | None, out: np.ndarray, window: Window,
                      repeats: bool = False, activation: str = "") -> WindowLaunch | None:
    """out = clamp(activation(depthwise_conv(x, packed) + bias)) in NHWC (`activation`: a math-library
    function, or none); None when the native JIT is unavailable."""
    _check_weights(packed, PackedDepthwise, "pack_depthwise", x, window, bias, clamp)
    if available() and packed.lanes != kernel_for("madd").shape.lanes:
        raise ValueError("the weights were packed for another ISA level than SNIPJIT_ISA now selects")
    return _launch("madd", x, out, window, packed.data, bias, clamp, False, repeats, activation)


def prepare_grouped(x: np.ndarray, packed: PackedGrouped, bias: np.ndarray | None,
                    clamp: tuple[float, float] | None, out: np.ndarray, window: Window,
                    repeats: bool = False, activation: str = "") -> WindowLaunch | None:
    """out = clamp(activation(grouped_conv(x, packed) + bias)) in NHWC, for weights `grouped_width` takes;
    None when the native JIT is unavailable."""
    _check_weights(packed, PackedGrouped, "pack_grouped", x, window, bias, clamp)
    w_shape = (packed.channels, packed.group, *packed.kernel)
    if available() and not grouped_width(w_shape, packed.channels // packed.group, window):
        raise ValueError(f"no grouped window kernel for weights {list(w_shape)} on window {window} at this ISA level")
    return _launch("madd", x, out, window, packed.data, bias, clamp, False, repeats, activation, packed.group)


def prepare_pool(kind: str, x: np.ndarray, out: np.ndarray, window: Window, count_include_pad: bool = False,
                 repeats: bool = False) -> WindowLaunch | None:
    """MaxPool (`kind` "max") or AveragePool ("avg") in NHWC; None when the native JIT is unavailable."""
    if kind not in ("max", "avg"):
        raise ValueError(f"pool kind must be 'max' or 'avg', got {kind!r}")
    return _launch("max" if kind == "max" else "mean", x, out, window, None, None, None,
                   bool(count_include_pad), repeats)
