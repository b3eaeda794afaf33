"""A register-blocked f32 GEMM microkernel for an ISA level: C = A @ B (+ bias), batched.

The register block is `mr` rows × `vectors` vectors of `lanes` floats (NR = vectors · lanes columns);
`register_blocks` derives it from the ISA description (`targets.isa`), `runtime.gemm` picks one per
product. The output is cut into panels of NR columns and chunks of rows; a work item is one chunk of one
panel of one batch entry (chunks fastest, so neighbouring items share B's panel), so the kernel follows
the `KernelFunction` ABI and runs on the native pool like any snippet: `fn(ptrs, dims, begin, end,
scratch)` computes items [begin, end).

- ptrs: see `PTRS`. bias: null, or one value per column added before the store. Convolutions only:
  residual: null, or a tensor of C's rows and columns (row stride `ldr`) added to the final sums (a
  residual connection's Add); then the `activation`; then clamp: null, or [lo, hi] the stored values
  are clamped to (Relu, Clip; NaN stays NaN); zeros: what a tap in the padding reads (a convolution's
  `cg` channels, channel_stride apart; a kernel row of taps: a planar image's, (KW-1)·dil_w + 1 floats,
  and with `row_taps`, KW·cg).
- dims: see `DIMS`. Strides are in elements. b_panel_stride is NR for a row-major B, K·NR for B packed
  panel by panel (then ldb = NR and `padded` != 0: every panel is NR wide, zeros past N; a convolution's
  B always is, and its kernel reads ldb as the constant NR). `pack` != 0:
  each work item first copies its K × NR panel into the thread's scratchpad (zeros past N), so the FMA
  loop streams it; a row-major B's last, partial panel is always copied that way. `kc`: the depth of a
  K block — the rows of a block accumulate over kc steps of K, store, and the next block reloads them,
  so the kc × NR slice of B being read stays in cache (kc ≥ K: no blocking).

The hot K loop therefore only ever reads full, contiguous B rows: no masked loads (which AVX2 turns into
slow vmaskmov and whose masks would occupy vector registers). It is unrolled `unroll` times. Per k:
`vectors` loads of B, `mr` broadcasts of A, mr × vectors FMAs. Edges: a partial last panel stores (and,
when K is blocked, reloads) under a lane mask, outside the K loop; a last row block shorter than mr
clamps its rows to M-1 — the duplicated rows compute the same values and store them to the same place;
when at most half a block is left, a block of half the height does it (M=128: 5% faster with 6-row blocks).

A convolution kernel (`conv`) computes a convolution as this product without an im2col copy (an
"implicit GEMM"): A is the image [images, H, W, C] (`planar`: [images, C, H, W], an NCHW input, such
as a network's 3-channel first layer reads) and its rows are the output pixels
(M = images·OH·OW); K runs over the window's taps, `cg` input channels each (B is the weights packed as
[taps·cg, N], tap-major); for each tap and row the K loop reads `cg` contiguous channels of the input
pixel under the tap, or the zero row where the tap falls into the padding. The batch index is the group:
a_batch offsets A's channels, c_batch C's columns. An output pixel's row of C lies at image · c_image +
row · c_row + column · ldc (a dense output: ldc = all its channels; a strided view of a wider output
too: the phases of a ConvTranspose). K blocks cover whole taps. A block of consecutive rows inside the
image's columns (most blocks) finds its rows' pixels a stride from the first's, with one bounds check per
tap (`_conv_taps`, `stepped`), or per kernel row where K blocks cover whole kernel rows and a kernel row's
taps are one run of A: a planar image's (per channel), an NHWC image's of one group without dilation
along the row (`row_taps` != 0; see `_window_rows`).

No software prefetch: prefetching B 8 or 16 rows ahead measured no gain on AVX-512 or AVX2 (the K loop
reads B and A's rows sequentially, which the hardware prefetchers follow), and A is not packed (the
broadcasts read its rows in place at 95–100% of the FMA peak on one thread).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import I64, CountedLoop, i64 as _c, pin

F32 = ir.FloatType()
I32 = ir.IntType(32)
I1 = ir.IntType(1)
DIMS = ("M", "K", "N", "lda", "ldb", "b_panel_stride", "ldc", "panels", "a_batch", "b_batch", "c_batch",
        "chunks", "chunk_rows", "pack", "padded", "kc", "bias_batch",
        # a convolution kernel's input geometry (see `MicroKernel.conv`)
        "cg", "H", "W", "OH", "OW", "KW", "stride_h", "stride_w", "pad_t", "pad_l", "dil_h", "dil_w",
        "image_stride", "pixel_stride", "channel_stride", "ldr", "c_image", "c_row", "row_taps")
PTRS = ("A", "B", "C", "bias", "clamp", "zeros", "residual")


@dataclass(frozen=True)
class MicroKernel:
    """The shape of one generated kernel."""
    mr: int         # rows of the register block
    vectors: int    # vectors per row of the block
    lanes: int      # f32 lanes per vector (the ISA level's width)
    unroll: int     # K steps per iteration of the hot loop
    fused: bool = True   # FMA instructions (else a multiply and an add)
    conv: bool = False   # A is an image read through a convolution's window (below)
    planar: bool = False  # ... an NCHW image: its channels are planes (else contiguous: NHWC)
    kernel_width: int = 0  # a planar kernel's window width, if fixed: its K loop along kernel rows unrolled
    channels: int = 0      # ... and its channels, if fixed too (with the width): a kernel row's channels unrolled
    column_stride: int = 0  # ... and its column stride, if fixed too (column dilation 1): rows at constant offsets
    activation: str = ""  # a convolution's activation before the store: a math-library function
    epilogue: bool = False   # a plain product that applies the residual, activation and clamp (a conv always does)

    @property
    def nr(self) -> int:
        return self.vectors * self.lanes

    @property
    def name(self) -> str:
        plain = "gemm_epilogue" if self.epilogue else "gemm"
        kind = ("planar_conv" if self.planar else "conv") if self.conv else plain
        fixed = (("w", self.kernel_width), ("c", self.channels), ("s", self.column_stride))
        window = "".join(f"_{key}{value}" for key, value in fixed if value and self.kernel_width)
        return (f"snipjit_{kind}_{self.mr}x{self.vectors}x{self.lanes}_u{self.unroll}{'' if self.fused else '_mul_add'}"
                f"{'_' + self.activation if self.activation else ''}{window}")


def register_blocks(registers: int) -> tuple[tuple[int, int, int], ...]:
    """(wide, narrow, thin) register blocks (rows, vectors, unroll) for a register file. Each keeps rows ×
    vectors accumulators plus a register per vector of B and one for the broadcast of A. `wide` loads
    the fewest bytes per FMA; `narrow`, two vectors wide, pads a narrow N less; `thin`, one vector, is
    for N of a vector or less (1×1 convolutions to 16 channels: 1.8× the narrow block's speed on
    AVX-512; 8×1 unrolled spills on both register files, and LLVM unrolls it twice itself). Measured
    (one thread, the products of the benchmark `bench.gemm`): on 32 zmm, 6×4 reaches 95–100% of the FMA
    peak and 7×2 nearly as much; 12×2, 8×3 and 8×2 unrolled spill (LLVM hoists the broadcasts of A, and
    runs out of general registers for the rows of A; 7×2 unrolled by hand spills a register on some
    CPUs); on 16 ymm, 4×3 reaches ~100% on wide N, 6×2 ~97% (3×4 spills). LLVM unrolls an un-unrolled
    loop twice."""
    if registers >= 32:
        return (6, 4, 4), (7, 2, 1), (8, 1, 1)
    return (4, 3, 4), (6, 2, 4), (8, 1, 1)


class _Builder:
    """The IR builder of one kernel with its types, intrinsics and loaded arguments."""

    def __init__(self, shape: MicroKernel, dim_names: tuple[str, ...] = DIMS, ptr_names: tuple[str, ...] = PTRS,
                 name: str | None = None):
        self.shape = shape
        name = name or shape.name
        self.ptr_names = ptr_names
        lanes = shape.lanes
        self.vec, self.mask_t = ir.VectorType(F32, lanes), ir.VectorType(I1, lanes)
        self.module = module = ir.Module(name)
        ptr = ir.PointerType()
        self.fn = fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64, I64, ptr]), name)
        self.b = b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._declare()
        ptrs, dims, self.begin, self.end, self.scratch = fn.args
        self.ptrs = ptrs
        self.d = {n: b.load(b.gep(dims, [_c(i)], source_etype=I64), typ=I64) for i, n in enumerate(dim_names)}

    @classmethod
    def inside(cls, builder: ir.IRBuilder, shape: MicroKernel) -> "_Builder":
        """The same helpers for code emitted into another kernel's function (the Snippets Brgemm)."""
        g = cls.__new__(cls)
        g.shape, g.b, g.module = shape, builder, builder.module
        g.vec, g.mask_t = ir.VectorType(F32, shape.lanes), ir.VectorType(I1, shape.lanes)
        g._declare()
        return g

    def _declare(self) -> None:
        """The intrinsics the kernel calls (declared once per module), and its constants."""
        vec, mask_t, ptr, lanes = self.vec, self.mask_t, ir.PointerType(), self.shape.lanes

        def declare(name: str, typ: ir.FunctionType) -> ir.Function:
            return self.module.globals.get(name) or ir.Function(self.module, typ, name)

        self.fma = declare(f"llvm.fma.v{lanes}f32", ir.FunctionType(vec, [vec, vec, vec]))
        self.masked_load = declare(f"llvm.masked.load.v{lanes}f32.p0", ir.FunctionType(vec, [ptr, I32, mask_t, vec]))
        self.masked_store = declare(f"llvm.masked.store.v{lanes}f32.p0",
                                    ir.FunctionType(ir.VoidType(), [vec, ptr, I32, mask_t]))
        self.zero = ir.Constant(vec, None)
        self.null = ir.Constant(ptr, None)

    def pointer(self, name: str):
        """Argument pointer `name`, loaded here (the rarely used ones where they are used: a pointer
        loaded at the entry would occupy a register through the K loop)."""
        return self.b.load(self.b.gep(self.ptrs, [_c(self.ptr_names.index(name))], source_etype=ir.PointerType()),
                           typ=ir.PointerType())

    def at(self, base, index):
        return self.b.gep(base, [index], source_etype=F32)

    def multiply_add(self, a, b, c):
        if self.shape.fused:
            return self.b.call(self.fma, [a, b, c])
        return self.b.fadd(self.b.fmul(a, b), c)

    def splat(self, value, typ):
        b, lanes = self.b, self.shape.lanes
        v = b.insert_element(ir.Constant(ir.VectorType(typ, lanes), None), value, ir.Constant(I32, 0))
        return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def load(self, address, mask=None):
        if mask is None:
            return self.b.load(address, typ=self.vec, align=4)
        return self.b.call(self.masked_load, [address, ir.Constant(I32, 4), mask, self.zero])

    def store(self, value, address, mask=None):
        if mask is None:
            self.b.store(value, address, align=4)
        else:
            self.b.call(self.masked_store, [value, address, ir.Constant(I32, 4), mask])

    def branches(self, condition, then, otherwise) -> list:
        """Emit `then()` if condition else `otherwise()`; each returns a list of values, merged by phis."""
        b, fn = self.b, self.b.function
        yes, no, done = (fn.append_basic_block(n) for n in ("then", "else", "merge"))
        b.cbranch(condition, yes, no)
        results = []
        for block, emit in ((yes, then), (no, otherwise)):
            b.position_at_end(block)
            results.append((emit(), b.block))
            b.branch(done)
        b.position_at_end(done)
        merged = []
        for i, value in enumerate(results[0][0]):
            phi = b.phi(value.type)
            for values, block in results:
                phi.add_incoming(values[i], block)
            merged.append(phi)
        return merged


def _copy_panel(g: _Builder, panel, masks, copy) -> tuple:
    """When `copy` holds, copy the K × NR panel at `panel` (row stride ldb, lanes past N as 0) to the
    scratchpad; returns where the FMA loop reads B and its row stride."""
    b, d, shape = g.b, g.d, g.shape

    def copied():
        rows = CountedLoop(b, "pack.k", _c(0), d["K"], 1)
        rows.enter()
        src = g.at(panel, b.mul(rows.index, d["ldb"]))
        dst = g.at(g.scratch, b.mul(rows.index, _c(shape.nr)))
        for v, mask in enumerate(masks):
            g.store(g.load(g.at(src, _c(v * shape.lanes)), mask), g.at(dst, _c(v * shape.lanes)))
        rows.leave()
        return [g.scratch, _c(shape.nr)]

    return tuple(g.branches(copy, copied, lambda: [panel, d["ldb"]]))


def _k_loop(g: _Builder, name: str, start, stop, step: int, acc, a_rows, b_base, ldb, a_stride=None):
    """Accumulate k in [start, stop) stepping `step` (the body repeated `step` times); the new accumulators
    (rows × vectors: a block as wide as `acc`). A's rows are contiguous along k, or `a_stride` elements
    apart."""
    b, shape, vectors = g.b, g.shape, len(acc[0])
    loop = CountedLoop(b, name, start, b.sub(stop, _c(step - 1)), step)
    carried = [[loop.phi(g.vec, acc[j][v]) for v in range(vectors)] for j in range(len(a_rows))]
    loop.enter()
    current = carried
    for u in range(step):
        k = b.add(loop.index, _c(u)) if u else loop.index
        b_row = g.at(b_base, b.mul(k, ldb))
        a_k = None if a_stride is None else b.mul(k, a_stride)
        bv = [g.load(g.at(b_row, _c(v * shape.lanes))) for v in range(vectors)]
        updated = []
        for j in range(len(a_rows)):
            a = g.splat(b.load(g.at(a_rows[j], k if a_stride is None else a_k), typ=F32), F32)
            updated.append([g.multiply_add(a, bv[v], current[j][v]) for v in range(vectors)])
        current = updated
    loop.leave([(carried[j][v], current[j][v]) for j in range(len(a_rows)) for v in range(vectors)])
    return carried, loop.index


@dataclass
class _Panel:
    """What the row blocks of one K block of one panel share."""
    k0: ir.Value           # the K block [k0, k1)
    k1: ir.Value
    a_base: ir.Value       # A, B (panel) and C (panel) of the batch entry
    b_base: ir.Value
    ldb: ir.Value
    c_base: ir.Value
    c_offset: ir.Value     # C's panel and batch entry: where c_base lies in C (and the residual's same place)
    initial: list          # the accumulators' start (bias or zero), per vector
    masks: list            # the columns inside N, per vector
    full: ir.Value         # the panel lies inside N (no masks needed)


def _output_pixels(g: _Builder, rows: list, consecutive: bool) -> list:
    """(image, output row, output column) of each row of A. Consecutive rows (whole blocks) divide
    once and step along the columns, wrapping into the next row and image (divisions cost more than
    a short K loop's FMAs)."""
    b, d = g.b, g.d

    def divided(r):
        rest = b.sdiv(r, d["OW"])
        return b.sdiv(rest, d["OH"]), b.srem(rest, d["OH"]), b.srem(r, d["OW"])

    if not consecutive:
        return [divided(r) for r in rows]
    pixels = [divided(rows[0])]
    for _ in rows[1:]:
        image, y, x = pixels[-1]
        x = b.add(x, _c(1))
        next_row = b.icmp_signed("==", x, d["OW"])
        x, y = b.select(next_row, _c(0), x), b.add(y, b.zext(next_row, I64))
        next_image = b.icmp_signed("==", y, d["OH"])
        y, image = b.select(next_image, _c(0), y), b.add(image, b.zext(next_image, I64))
        pixels.append((image, y, x))
    return pixels


def _conv_taps(g: _Builder, p: _Panel, output_pixels: list, acc: list, stepped: bool = False) -> list:
    """Accumulate the taps of the K block for the rows' output pixels: per tap, the K loop over `cg`
    channels of each row's input pixel under the tap (the zero row in the padding). `stepped`: the rows
    are consecutive pixels of one output row whose windows lie inside the image's columns, so per tap
    one bounds check and the first row's address, the others a stride apart, find their pixels —
    grouped convolutions of 8 channels per group (RegNet) spent more on the rows' addresses than on
    their FMAs (measured 1.1-1.25x faster on Zen 3 AVX2; neutral at 64-512 channels)."""
    b, d, unroll = g.b, g.d, g.shape.unroll
    pixels = [(b.mul(image, d["image_stride"]), b.sub(b.mul(y, d["stride_h"]), d["pad_t"]),
               b.sub(b.mul(x, d["stride_w"]), d["pad_l"]))   # (image offset, window's top row, left column)
              for image, y, x in output_pixels]
    first, last = b.sdiv(p.k0, d["cg"]), b.sdiv(p.k1, d["cg"])
    first_kh = b.sdiv(first, d["KW"])
    first_kw = b.sub(first, b.mul(first_kh, d["KW"]))
    taps = CountedLoop(b, "tap", first, last, 1)
    kh, kw = taps.phi(I64, first_kh), taps.phi(I64, first_kw)   # (counted along: no division per tap)
    carried = [[taps.phi(g.vec, value) for value in row] for row in acc]
    taps.enter()
    dy, dx = b.mul(kh, d["dil_h"]), b.mul(kw, d["dil_w"])
    a_rows, zeros = [], g.pointer("zeros")
    if stepped:
        image, top, left = pixels[0]
        y, x = b.add(top, dy), b.add(left, dx)
        inside = b.icmp_unsigned("<", y, d["H"])
        pixel = b.add(image, b.mul(b.add(b.mul(y, d["W"]), x), d["pixel_stride"]))
        a_rows.append(b.select(inside, g.at(p.a_base, pixel), zeros))
        step = b.select(inside, b.mul(d["stride_w"], d["pixel_stride"]), _c(0))
        while len(a_rows) < len(pixels):
            a_rows.append(g.at(a_rows[-1], step))
    for image, top, left in pixels[len(a_rows):]:
        y, x = b.add(top, dy), b.add(left, dx)
        inside = b.and_(b.icmp_unsigned("<", y, d["H"]), b.icmp_unsigned("<", x, d["W"]))
        pixel = b.add(image, b.mul(b.add(b.mul(y, d["W"]), x), d["pixel_stride"]))
        a_rows.append(b.select(inside, g.at(p.a_base, pixel), zeros))
    b_tap = g.at(p.b_base, b.mul(b.mul(taps.index, d["cg"]), p.ldb))
    a_stride = d["channel_stride"] if g.shape.planar else None
    summed, k = _k_loop(g, "k", _c(0), d["cg"], unroll, carried, a_rows, b_tap, p.ldb, a_stride)
    if unroll > 1:
        summed, _ = _k_loop(g, "ktail", k, d["cg"], 1, summed, a_rows, b_tap, p.ldb, a_stride)
    taps.leave(_next_position(b, kh, kw, b.add(kw, _c(1)), d["KW"]) + list(zip(_flat(carried), _flat(summed))))
    return carried


def _window_rows(g: _Builder, p: _Panel, output_pixels: list, acc: list) -> list:
    """`_conv_taps` for a block of consecutive output pixels of one output row whose windows lie inside
    the image's columns, where K blocks cover whole kernel rows: per line — a kernel row of an NHWC
    image whose taps' channels are contiguous (one group, no dilation along the row: `row_taps`), or a
    kernel row and channel of a planar image — one bounds check for all rows, then one K loop along the
    line. A 3×3 NHWC window of 16 channels is 3 loops of 48 steps instead of 9 of 16; a planar image's
    line is a kernel row of one plane (tap by tap, a 3-channel image would cost more addresses than
    FMAs): its loop runs along the kernel's columns, unrolled with the channels for a kernel of fixed
    width and channels."""
    b, d, shape = g.b, g.d, g.shape
    image, y, x = output_pixels[0]
    top = b.sub(b.mul(y, d["stride_h"]), d["pad_t"])
    left = b.sub(b.mul(x, d["stride_w"]), d["pad_l"])
    first = b.add(b.mul(image, d["image_stride"]), b.mul(left, d["pixel_stride"]))
    width = _c(shape.kernel_width) if shape.kernel_width else d["KW"]
    run = b.mul(width, d["cg"])                        # K per kernel row
    per_row = d["cg"] if shape.planar else _c(1)      # lines per kernel row
    first_kh = b.sdiv(p.k0, run)
    start, stop = b.mul(first_kh, per_row), b.mul(b.sdiv(p.k1, run), per_row)
    zeros = g.pointer("zeros")
    lines = CountedLoop(b, "kernel_row", start, stop, shape.channels or 1)   # (kernel row, channel) pairs
    kh, c = lines.phi(I64, first_kh), lines.phi(I64, _c(0))
    carried = [[lines.phi(g.vec, value) for value in row] for row in acc]
    lines.enter()
    y = b.add(top, b.mul(kh, d["dil_h"]))
    inside = b.icmp_unsigned("<", y, d["H"])
    pixel = b.add(b.add(first, b.mul(c, d["channel_stride"])), b.mul(b.mul(y, d["W"]), d["pixel_stride"]))
    a_rows = [b.select(inside, g.at(p.a_base, pixel), zeros)]
    # a fixed column stride: rows at known offsets (outside the image too: the zero row is as long as a line)
    row_step = _c(shape.column_stride) if shape.column_stride else \
        b.select(inside, b.mul(d["stride_w"], d["pixel_stride"]), _c(0))
    while len(a_rows) < len(output_pixels):
        a_rows.append(g.at(a_rows[-1], row_step))
    b_line = g.at(p.b_base, b.mul(b.add(b.mul(kh, run), c), p.ldb))
    if not shape.planar:   # the kernel row's taps, channel after channel: contiguous in A and B
        # k counts up from -run to 0 from the line's end: the loop's bound is no register (spilled, in
        # the 8-row block and the 4x3 one)
        ends = [g.at(row, run) for row in a_rows]
        b_end = g.at(b_line, b.mul(run, p.ldb))
        summed, k = _k_loop(g, "k", b.neg(run), _c(0), shape.unroll, carried, ends, b_end, p.ldb)
        if shape.unroll > 1:
            summed, _ = _k_loop(g, "ktail", k, _c(0), 1, summed, ends, b_end, p.ldb)
        next_c = b.add(c, _c(1))
    elif shape.channels:   # the kernel row's every channel, unrolled
        b_stride = b.mul(_c(shape.channels), p.ldb)    # from a tap's row of B to the next column's
        plane, summed = b.select(inside, d["channel_stride"], _c(0)), carried
        for ch in range(shape.channels):
            rows = [g.at(row, b.mul(_c(ch), plane)) for row in a_rows]
            if shape.column_stride:
                summed = _fixed_stride_line(g, summed, rows[0], g.at(b_line, b.mul(_c(ch), p.ldb)), b_stride)
            else:
                summed, _ = _k_loop(g, f"kw{ch}", _c(0), width, shape.kernel_width, summed, rows,
                                    g.at(b_line, b.mul(_c(ch), p.ldb)), b_stride, d["dil_w"])
        next_c = _c(shape.channels)
    else:
        summed, _ = _k_loop(g, "kw", _c(0), width, shape.kernel_width or 1, carried, a_rows, b_line,
                            b.mul(d["cg"], p.ldb), d["dil_w"])
        next_c = b.add(c, _c(1))
    lines.leave(_next_position(b, kh, c, next_c, per_row) + list(zip(_flat(carried), _flat(summed))))
    return carried


def _fixed_stride_line(g: _Builder, acc: list, first, b_line, b_stride) -> list:
    """One channel's taps of a planar line of fixed width and column stride: row j of tap t at `first` + t +
    j·stride, offsets known when generating from each tap's first address, which passes `pin` (unpinned, LLVM
    keeps row j's broadcast of tap t + stride for row j + 1's tap t, and spills them); each row's FMAs pass
    `pin` before the next row's broadcast (else a tap's broadcasts are loaded up front, and spilled)."""
    b, shape, acc = g.b, g.shape, list(acc)
    for t in range(shape.kernel_width):
        base = pin(b, [g.at(first, _c(t))], barrier=False)[0]
        b_row = g.at(b_line, b.mul(_c(t), b_stride))
        bv = [g.load(g.at(b_row, _c(v * shape.lanes))) for v in range(len(acc[0]))]
        for j, row in enumerate(acc):
            a = g.splat(b.load(g.at(base, _c(j * shape.column_stride)), typ=F32), F32)
            acc[j] = pin(b, [g.multiply_add(a, bv[v], value) for v, value in enumerate(row)])
    return acc


def _next_position(b: ir.IRBuilder, outer, inner, next_inner, count) -> list:
    """The carried (outer, inner) counters of a loop over pairs, as `CountedLoop.leave` takes them: `inner`
    moves to `next_inner`, wrapping to 0 and `outer` to the next at `count`."""
    wrap = b.icmp_signed("==", next_inner, count)
    return [(outer, b.add(outer, b.zext(wrap, I64))), (inner, b.select(wrap, _c(0), next_inner))]


def _interior(g: _Builder, output_pixels: list):
    """Whether a block of consecutive output pixels lies in one output row with every tap of its windows
    inside the image's columns."""
    b, d = g.b, g.d
    rows = len(output_pixels)
    x = output_pixels[0][2]
    left = b.sub(b.mul(x, d["stride_w"]), d["pad_l"])
    right = b.add(b.add(left, b.mul(_c(rows - 1), d["stride_w"])), b.mul(b.sub(d["KW"], _c(1)), d["dil_w"]))
    one_row = b.icmp_signed("<", b.add(x, _c(rows - 1)), d["OW"])
    return b.and_(b.and_(one_row, b.icmp_signed(">=", left, _c(0))), b.icmp_signed("<", right, d["W"]))


def _clamp(g: _Builder, acc: list) -> list:
    """The accumulators clamped to the kernel's [lo, hi] (compare and select: NaN stays NaN)."""
    b, bounds = g.b, g.pointer("clamp")
    lo, hi = (g.splat(b.load(g.at(bounds, _c(i)), typ=F32), F32) for i in (0, 1))
    clamped = []
    for row in acc:
        row = [b.select(b.fcmp_ordered("<", value, lo), lo, value) for value in row]
        clamped.append([b.select(b.fcmp_ordered(">", value, hi), hi, value) for value in row])
    return clamped


def _row_block(g: _Builder, p: _Panel, rows: list, consecutive: bool = False) -> None:
    """Accumulate the rows `rows` (row indices, mr or fewer) of the panel over the K block and store them.
    Whole blocks give rows r0 + j (`consecutive`), so the addresses of A's rows are one pointer plus
    multiples of lda."""
    b, d, shape = g.b, g.d, g.shape
    mr, vectors, lanes = len(rows), shape.vectors, shape.lanes
    if shape.conv:   # an output pixel's row of C: image, row and column strides (C may be a strided view)
        pixels = _output_pixels(g, rows, consecutive)
        c_rows = [g.at(p.c_base, b.add(b.add(b.mul(image, d["c_image"]), b.mul(y, d["c_row"])), b.mul(x, d["ldc"])))
                  for image, y, x in pixels]
    else:
        c_rows = [g.at(p.c_base, b.mul(r, d["ldc"])) for r in rows]

    def reload():   # a later K block continues the sums the previous one stored
        return [g.load(g.at(c_rows[j], _c(v * lanes)), p.masks[v]) for j in range(mr) for v in range(vectors)]

    start = g.branches(b.icmp_signed("==", p.k0, _c(0)),
                       lambda: [p.initial[v] for _ in range(mr) for v in range(vectors)], reload)
    acc = _by_rows(start, vectors)
    if shape.conv and consecutive:   # blocks inside the image's columns take a faster path
        def inside():
            if shape.planar:
                return _flat(_window_rows(g, p, pixels, acc))
            return g.branches(b.icmp_signed("!=", d["row_taps"], _c(0)),
                              lambda: _flat(_window_rows(g, p, pixels, acc)),
                              lambda: _flat(_conv_taps(g, p, pixels, acc, stepped=True)))
        acc = _by_rows(g.branches(_interior(g, pixels), inside, lambda: _flat(_conv_taps(g, p, pixels, acc))),
                       vectors)
    elif shape.conv:
        acc = _conv_taps(g, p, pixels, acc)
    else:
        a_rows = [g.at(p.a_base, b.mul(r, d["lda"])) for r in rows]
        acc, k = _k_loop(g, "k", p.k0, p.k1, shape.unroll, acc, a_rows, p.b_base, p.ldb)
        if shape.unroll > 1:
            acc, _ = _k_loop(g, "ktail", k, p.k1, 1, acc, a_rows, p.b_base, p.ldb)

    def store(masked: bool, final: bool = False):
        def emit():
            if not final:   # (earlier K blocks store partial sums)
                return write(masked, acc)()
            values = _with_residual(g, p, rows, acc, masked)
            if shape.activation:
                values = [[_activation(g, value) for value in row] for row in values]
            clamps = b.icmp_unsigned("!=", g.pointer("clamp"), g.null)
            return g.branches(clamps, write(masked, values, clamped=True), write(masked, values))
        return emit

    def write(masked: bool, values: list, clamped: bool = False):
        def emit():   # (the clamp's bounds are loaded here, in the branch where its pointer is not null)
            stored = _clamp(g, values) if clamped else values
            for j in range(mr):
                for v in range(vectors):
                    g.store(stored[j][v], g.at(c_rows[j], _c(v * lanes)), p.masks[v] if masked else None)
            return []
        return emit

    if shape.conv or shape.epilogue:
        final = b.icmp_signed(">=", p.k1, d["K"])
        g.branches(p.full, lambda: g.branches(final, store(False, True), store(False)),
                   lambda: g.branches(final, store(True, True), store(True)))
    else:   # (the clamp's code after the K loop costs the 6x2 block on AVX2 a spilled loop bound)
        g.branches(p.full, store(False), store(True))


def _with_residual(g: _Builder, p: _Panel, rows: list, values: list, masked: bool) -> list:
    """The sums of `rows` plus the same rows and columns of the residual tensor, where there is one."""
    b, d, lanes = g.b, g.d, g.shape.lanes
    residual = g.pointer("residual")

    def added():
        base = g.at(residual, p.c_offset)
        out = []
        for j, r in enumerate(rows):
            row = g.at(base, b.mul(r, d["ldr"]))
            out += [b.fadd(value, g.load(g.at(row, _c(v * lanes)), p.masks[v] if masked else None))
                    for v, value in enumerate(values[j])]
        return out

    return _by_rows(g.branches(b.icmp_unsigned("!=", residual, g.null), added,
                               lambda: [v for row in values for v in row]), len(values[0]))


def _flat(rows: list) -> list:
    """Rows of accumulators as one row-major list (what `branches` merges)."""
    return [value for row in rows for value in row]


def _by_rows(flat: list, width: int) -> list:
    """A row-major list of accumulators (as `branches` merges them) as rows of `width`."""
    return [flat[j:j + width] for j in range(0, len(flat), width)]


def _activation(g: _Builder, value):
    """The kernel's activation (a function of the math library) of one accumulator vector."""
    return vmath.emit(g.b, g.shape.activation, value, fused_multiply_add=g.shape.fused)


def gemm_module(shape: MicroKernel) -> ir.Module:
    """The module defining kernel `shape.name`."""
    g = _Builder(shape)
    g.A, g.B, g.C, g.bias = (g.pointer(name) for name in PTRS[:4])
    b, d, mr, vectors, lanes, nr = g.b, g.d, shape.mr, shape.vectors, shape.lanes, shape.nr
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    has_bias = b.icmp_unsigned("!=", g.bias, g.null)

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    per_batch = b.mul(d["panels"], d["chunks"])
    batch = b.sdiv(work.index, per_batch)
    panel = b.sdiv(b.srem(work.index, per_batch), d["chunks"])
    first_row = b.mul(b.srem(work.index, d["chunks"]), d["chunk_rows"])
    chunk_end = b.add(first_row, d["chunk_rows"])
    rows_end = b.select(b.icmp_signed("<", chunk_end, d["M"]), chunk_end, d["M"])
    n0 = b.mul(panel, _c(nr))
    a_base = g.at(g.A, b.mul(batch, d["a_batch"]))
    b_panel = g.at(g.B, b.add(b.mul(batch, d["b_batch"]), b.mul(panel, d["b_panel_stride"])))
    c_offset = b.add(b.mul(batch, d["c_batch"]), n0)
    c_base = g.at(g.C, c_offset)
    left = b.sub(d["N"], n0)
    full = b.icmp_signed(">=", left, _c(nr))
    masks = [b.icmp_signed("<", lane_ids, g.splat(b.sub(left, _c(v * lanes)), I64)) for v in range(vectors)]
    if shape.conv:   # a convolution's weights are always packed (ldb = NR: a constant frees a register)
        b_base, ldb = b_panel, _c(nr)
    else:
        copy = b.or_(b.icmp_signed("!=", d["pack"], _c(0)),
                     b.and_(b.icmp_signed("==", d["padded"], _c(0)), b.not_(full)))
        b_base, ldb = _copy_panel(g, b_panel, masks, copy)
    bias_masks = [b.and_(m, g.splat(has_bias, I1)) for m in masks]
    bias = g.at(g.bias, b.add(b.mul(batch, d["bias_batch"]), n0))
    initial = [g.load(g.at(bias, _c(v * lanes)), bias_masks[v]) for v in range(vectors)]

    blocks = CountedLoop(b, "kblock", _c(0), d["K"], d["kc"])
    blocks.enter()
    k0 = blocks.index
    k_end = b.add(k0, d["kc"])
    k1 = b.select(b.icmp_signed("<", k_end, d["K"]), k_end, d["K"])

    panel_state = _Panel(k0, k1, a_base, b_base, ldb, c_base, c_offset, initial, masks, full)
    rows = CountedLoop(b, "rows", first_row, b.sub(rows_end, _c(mr - 1)), mr)   # whole row blocks
    rows.enter()
    _row_block(g, panel_state, [b.add(rows.index, _c(j)) for j in range(mr)], consecutive=True)
    rows.leave()
    last_row = b.sub(d["M"], _c(1))

    def last_block(height: int):   # fewer than mr rows left: the rows past M repeat row M-1
        def emit():
            rows_left = [b.add(rows.index, _c(j)) for j in range(height)]
            _row_block(g, panel_state, [b.select(b.icmp_signed("<", r, d["M"]), r, last_row) for r in rows_left])
            return []
        return emit

    half = mr // 2
    short = b.icmp_signed("<=", b.sub(rows_end, rows.index), _c(half))
    left_over = b.icmp_signed("<", rows.index, rows_end)
    if half:   # at most half a block left: a half-height block wastes less
        g.branches(left_over, lambda: g.branches(short, last_block(half), last_block(mr)), lambda: [])
    else:
        g.branches(left_over, last_block(mr), lambda: [])
    blocks.leave()
    work.leave()
    b.ret_void()
    return g.module
