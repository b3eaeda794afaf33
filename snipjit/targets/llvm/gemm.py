"""A register-blocked f32 GEMM microkernel for an ISA level: C = A @ B (+ bias), batched.

The register block is `mr` rows × `vectors` vectors of `lanes` floats (NR = vectors · lanes columns);
`register_blocks` derives it from the ISA description (`targets.isa`), `runtime.gemm` picks one per
product. The output is cut into panels of NR columns and chunks of rows; a work item is one panel of one
chunk of one batch entry, panels fastest: the native pool gives each thread a contiguous shard of the items,
so a thread computes whole rows of the output, and the next layer's thread reads the rows its own core just
wrote (chunks fastest had each thread compute some columns of every row: 2-core Xeon, AVX-512, DenseNet-121
1.13×, ResNet-50 1.04-1.08×, RegNetY and MobileNet-V2 1.04× faster; BERT and GPT-2 unchanged). Batch
entries that are column bands of the same rows (`interleaved`: a grouped convolution's groups) run chunk by
chunk instead, every entry of a chunk's rows together: entry by entry, the threads wrote the cache lines two
groups share at once (ShuffleNet 1.28× faster at 2 threads, AVX-512; 1.17× at AVX2). The kernel
follows the `KernelFunction` ABI and runs on the native pool like any snippet: `fn(ptrs, dims, begin, end,
scratch)` computes items [begin, end).

- ptrs: see `PTRS`. bias: null, or one value per column added before the store. Convolutions only:
  residual: null, or a tensor of C's rows and columns (row stride `ldr`) added to the final sums (a
  residual connection's Add); then the `activation`; then clamp: null, or [lo, hi] the stored values
  are clamped to (Relu, Clip; NaN stays NaN); zeros: what a tap in the padding reads (a convolution's
  `cg` channels, channel_stride apart; a kernel row of taps: a planar image's, (KW-1)·dil_w + 1 floats,
  and with `row_taps`, KW·cg). Plain products only: scale: null, or per batch entry (scale_batch apart) K
  factors row k of B is multiplied by (an image's channel scale, squeeze-excitation's, folded into the
  weights of the 1×1 convolution reading it: the panel is copied scaled, as `pack` copies it).
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
tap (`implicit_gemm.conv_taps`, `stepped`), or per kernel row where K blocks cover whole kernel rows and a kernel row's
taps are one run of A: a planar image's (per channel), an NHWC image's of one group without dilation
along the row (`row_taps` != 0; see `implicit_gemm.window_rows`).

Software prefetch: within a K block the K loop reads B and A's rows sequentially, which the hardware
prefetchers follow (prefetching B 8 or 16 rows ahead measured no gain on AVX-512 or AVX2; A is not packed:
the broadcasts read its rows in place at 95–100% of the FMA peak on one thread). But a work item's first
row block reads each K block's slice of B from L3 or memory, at the rate one core draws from there, and
the other row blocks reuse it from L2: where an item has few row blocks (small maps: 7×7 and 14×14 ones,
Winograd's tiles, a transformer's 128 rows), that first pass is much of its time. A kernel made with
`prefetch` lines has every K loop iteration of every row block ask for that many lines of the slice the
thread reads next (`_next_slice`) into L2, the row blocks one share after another, so the next slice
arrives while this one is computed (2-core Xeon, AVX-512: ResNet-50's convolutions on 7×7 maps 72–79% ->
79–90% of the FMA peak, the network 1.11×, BERT 1.08×, GPT-2 1.15× faster; bursts of the same
prefetches before each row block were slower than none). The lines go after the iteration's FMAs (placed
before them, LLVM hoisted the broadcasts of A and spilled them) and the stream advances by a constant.
A planar kernel (a first layer: K of 27 to 147, the network's largest output, written a line
per pixel and panel) asks for the next block's output lines for writing before its K loop: else the block's
stores wait on their lines' reads for ownership, and the stores behind them fill the store queue (the
samples of a profile gathered on the spills after the store; Zen 3, one thread: the 7×7/2 first layer of
ResNet, 224², 1.33× faster at two threads, median of 9 paired runs, ~85 GFLOP/s at one, ~90% of its peak;
the NHWC kernels measured within noise of it, so they do not).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from llvmlite import ir

from .counted_loop import I64, CountedLoop, i64 as _c
from .gemm_builder import (LINE_FLOATS, GemmBuilder, Panel, Prefetch, apply_activation, by_rows, clamp_to_bounds, flat,
                           k_loop)
from .implicit_gemm import conv_taps, first_pixel, interior, next_pixel, one_row, output_pixels, window_rows
from .vector_builder import F32, I1
DIMS = ("M", "K", "N", "lda", "ldb", "b_panel_stride", "ldc", "panels", "a_batch", "b_batch", "c_batch",
        "chunks", "chunk_rows", "pack", "padded", "kc", "bias_batch",
        # a convolution kernel's input geometry (see `MicroKernel.conv`)
        "cg", "H", "W", "OH", "OW", "KW", "stride_h", "stride_w", "pad_t", "pad_l", "dil_h", "dil_w",
        "image_stride", "pixel_stride", "channel_stride", "ldr", "c_image", "c_row", "row_taps",
        "interleaved", "batches", "scale_batch")
PTRS = ("A", "B", "C", "bias", "clamp", "zeros", "residual", "scale")


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
    prefetch: int = 0     # lines of B's next slice each K loop iteration asks for (B packed; see the docstring)

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
                f"{'_' + self.activation if self.activation else ''}{window}"
                f"{f'_pf{self.prefetch}' if self.prefetch else ''}")


def register_blocks(registers: int) -> tuple[tuple[int, int, int], ...]:
    """(wide, narrow, thin[, three]) register blocks (rows, vectors, unroll) for a register file. Each keeps
    rows × vectors accumulators plus a register per vector of B and one for the broadcast of A. `wide`
    loads the fewest bytes per FMA; `narrow`, two vectors wide, pads a narrow N less; `thin`, one vector, is
    for N of a vector or less (1×1 convolutions to 16 channels: 1.8× the narrow block's speed on
    AVX-512; 8×1 unrolled spills on both register files, and LLVM unrolls it twice itself); on 32
    registers, `three` vectors for N of 33-48 columns (ShuffleNet's groups of 34 channels) and multiples
    of 48 (one thread, Xeon with AVX-512, products of 7680 rows: 6×3 175-191 GFLOP/s at K = 34-272, 6×4
    155-187, 8×1 122-129, 7×2 156-160; 16 registers' wide block is 3 vectors already). Measured
    (one thread, the products of the benchmark `bench.gemm`): on 32 zmm, 6×4 reaches 95–100% of the FMA
    peak and 7×2 nearly as much; 12×2, 8×3 and 8×2 unrolled spill (LLVM hoists the broadcasts of A, and
    runs out of general registers for the rows of A; 7×2 unrolled by hand spills a register on some
    CPUs); on 16 ymm, 4×3 reaches ~100% on wide N, 6×2 ~97% (3×4 spills). LLVM unrolls an un-unrolled
    loop twice."""
    if registers >= 32:
        return (6, 4, 4), (7, 2, 1), (8, 1, 1), (6, 3, 4)
    return (4, 3, 4), (6, 2, 4), (8, 1, 1)


def _copy_panel(g: GemmBuilder, panel, masks, copy, scaled, scale) -> tuple:
    """When `copy` holds, copy the K × NR panel at `panel` (row stride ldb, lanes past N as 0) to the
    scratchpad, each row k times scale[k] where `scaled` (a channel scale of the input folded into the
    weights); returns where the FMA loop reads B and its row stride."""
    b, d, shape = g.b, g.d, g.shape

    def copied():
        rows = CountedLoop(b, "pack.k", _c(0), d["K"], 1)
        rows.enter()
        src = g.at(panel, b.mul(rows.index, d["ldb"]))
        dst = g.at(g.scratch, b.mul(rows.index, _c(shape.nr)))
        factor = g.branches(scaled, lambda: [b.load(g.at(scale, rows.index), typ=F32)],
                            lambda: [ir.Constant(F32, 1.0)])[0]   # (x · 1 is x, NaN and -0 too)
        for v, mask in enumerate(masks):
            value = b.fmul(g.load(g.at(src, _c(v * shape.lanes)), mask), g.splat(factor, F32))
            g.store(value, g.at(dst, _c(v * shape.lanes)))
        rows.leave()
        return [g.scratch, _c(shape.nr)]

    return tuple(g.branches(copy, copied, lambda: [panel, d["ldb"]]))


def _row_block(g: GemmBuilder, p: Panel, rows: list, consecutive: bool = False, first: tuple | None = None):
    """Accumulate the rows `rows` (row indices, mr or fewer) of the panel over the K block and store them.
    Whole blocks give rows r0 + j (`consecutive`), so the addresses of A's rows are one pointer plus
    multiples of lda; a convolution's start at output pixel `first`, if given. Returns a convolution's
    output pixel after the block's last."""
    b, d, shape = g.b, g.d, g.shape
    mr, vectors, lanes = len(rows), shape.vectors, shape.lanes
    pixels = None
    if shape.conv:   # an output pixel's row of C: image, row and column strides (C may be a strided view)
        pixels = output_pixels(g, rows, consecutive, first)
        c_rows = [g.at(p.c_base, b.add(b.add(b.mul(image, d["c_image"]), b.mul(y, d["c_row"])), b.mul(x, d["ldc"])))
                  for image, y, x in pixels]
    else:
        c_rows = [g.at(p.c_base, b.mul(r, d["ldc"])) for r in rows]
    if shape.planar and consecutive:   # the next block's output lines, for writing (see the module's docstring)
        for row in c_rows:
            for column in range(0, shape.nr, LINE_FLOATS):
                g.prefetch_for_write(g.at(row, b.add(b.mul(_c(mr), d["ldc"]), _c(column))))

    def reload():   # a later K block continues the sums the previous one stored
        return [g.load(g.at(c_rows[j], _c(v * lanes)), p.masks[v]) for j in range(mr) for v in range(vectors)]

    start = g.branches(b.icmp_signed("==", p.k0, _c(0)),
                       lambda: [p.initial[v] for _ in range(mr) for v in range(vectors)], reload)
    acc = by_rows(start, vectors)
    if shape.conv and consecutive:   # blocks inside the image's columns take a faster path
        def inside():
            if shape.planar:
                return flat(window_rows(g, p, pixels, acc))
            return g.branches(b.icmp_signed("!=", d["row_taps"], _c(0)),
                              lambda: flat(window_rows(g, p, pixels, acc)),
                              lambda: flat(conv_taps(g, p, pixels, acc, stepped=True)))

        def edge():   # a first layer's kernel of a fixed column stride copies a clipped block's lines
            if shape.planar and shape.column_stride:
                return g.branches(one_row(g, pixels), lambda: flat(window_rows(g, p, pixels, acc, clipped=True)),
                                  lambda: flat(conv_taps(g, p, pixels, acc)))
            return flat(conv_taps(g, p, pixels, acc))
        acc = by_rows(g.branches(interior(g, pixels), inside, edge), vectors)
    elif shape.conv:
        acc = conv_taps(g, p, pixels, acc)
    else:
        a_rows = [g.at(p.a_base, b.mul(r, d["lda"])) for r in rows]
        ahead = p.prefetch.moved(g, b.neg(p.k0)) if p.prefetch else None
        acc, k = k_loop(g, "k", p.k0, p.k1, shape.unroll, acc, a_rows, p.b_base, p.ldb, prefetch=ahead)
        if shape.unroll > 1:
            acc, _ = k_loop(g, "ktail", k, p.k1, 1, acc, a_rows, p.b_base, p.ldb)

    def store(masked: bool, final: bool = False):
        def emit():
            if not final:   # (earlier K blocks store partial sums)
                return write(masked, acc)()
            values = _with_residual(g, p, rows, acc, masked)
            if shape.activation:
                values = [[apply_activation(g, value) for value in row] for row in values]
            clamps = b.icmp_unsigned("!=", g.pointer("clamp"), g.null)
            return g.branches(clamps, write(masked, values, clamped=True), write(masked, values))
        return emit

    def write(masked: bool, values: list, clamped: bool = False):
        def emit():   # (the clamp's bounds are loaded here, in the branch where its pointer is not null)
            stored = clamp_to_bounds(g, values) if clamped else values
            for v in range(vectors):
                g.store_all([stored[j][v] for j in range(mr)], [g.at(c_rows[j], _c(v * lanes)) for j in range(mr)],
                            p.masks[v] if masked else None)
            return []
        return emit

    if shape.conv or shape.epilogue:
        final = b.icmp_signed(">=", p.k1, d["K"])
        g.branches(p.full, lambda: g.branches(final, store(False, True), store(False)),
                   lambda: g.branches(final, store(True, True), store(True)), likely=True)
    else:   # (the clamp's code after the K loop costs the 6x2 block on AVX2 a spilled loop bound)
        g.branches(p.full, store(False), store(True), likely=True)   # (a partial panel is one of many, if any)
    return pixels and next_pixel(g, pixels[-1])


def _with_residual(g: GemmBuilder, p: Panel, rows: list, values: list, masked: bool) -> list:
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

    return by_rows(g.branches(b.icmp_unsigned("!=", residual, g.null), added,
                               lambda: [v for row in values for v in row]), len(values[0]))


def prefetch_lines(shape: MicroKernel, blocks: int) -> int:
    """The lines each K loop iteration asks for (a power of two) so that `blocks` row blocks, one share of
    the next slice after another, ask for all of it: blocks · lines · LINE_FLOATS / unroll >= NR."""
    lines = -(-shape.unroll * -(-shape.nr // blocks) // LINE_FLOATS)
    return 1 << (lines - 1).bit_length()


def _next_slice(g: GemmBuilder, p: Panel, b_panel, panel, chunk, batch) -> Prefetch:
    """The slice of B the thread reads after this K block of this work item — the panel's next K block, else the next
    item's (panels fastest: the next panel, the next batch entry's first (batch entries are packed one after
    another), or the first at a new chunk of rows: the entry's, or with `interleaved` the first entry's) — as a
    stream the item's row blocks ask for one after another, `MicroKernel.prefetch` lines per K loop iteration (the
    launch makes that enough for its row blocks to cover a slice): without it, each K loop of the first row block
    reads its slice from L3 at the speed one core draws from it."""
    b, d, shape = g.b, g.d, g.shape
    interleaved = b.icmp_signed("!=", d["interleaved"], _c(0))
    last_batch = b.or_(b.icmp_signed("==", b.add(batch, _c(1)), d["batches"]), b.not_(interleaved))
    restart = b.and_(b.and_(b.icmp_signed("==", b.add(panel, _c(1)), d["panels"]), last_batch),
                     b.icmp_signed("<", b.add(chunk, _c(1)), d["chunks"]))
    panel_stride = d["b_panel_stride"]
    back = b.add(b.mul(panel, panel_stride), b.select(interleaved, b.mul(batch, d["b_batch"]), _c(0)))
    next_panel = g.at(b_panel, b.select(restart, b.neg(back), panel_stride))
    same_panel = b.icmp_signed("<", p.k1, d["K"])
    start = b.select(same_panel, g.at(b_panel, b.mul(p.k1, _c(shape.nr))), next_panel)
    return Prefetch(start, _c(shape.prefetch * LINE_FLOATS // shape.unroll), shape.prefetch)


def gemm_module(shape: MicroKernel) -> ir.Module:
    """The module defining kernel `shape.name`."""
    g = GemmBuilder(shape, DIMS, PTRS)
    g.A, g.B, g.C, g.bias = (g.pointer(name) for name in PTRS[:4])
    b, d, mr, vectors, lanes, nr = g.b, g.d, shape.mr, shape.vectors, shape.lanes, shape.nr
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    has_bias = b.icmp_unsigned("!=", g.bias, g.null)

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    # batch entry, chunk, panel (panels fastest); `interleaved`: chunk, batch entry, panel
    per_batch, interleaved = b.mul(d["panels"], d["chunks"]), b.icmp_signed("!=", d["interleaved"], _c(0))
    panel, panel_item = b.srem(work.index, d["panels"]), b.sdiv(work.index, d["panels"])
    batches = b.select(interleaved, d["batches"], _c(1))   # (a divisor: never the 0 of launches without it)
    batch = b.select(interleaved, b.srem(panel_item, batches), b.sdiv(work.index, per_batch))
    chunk = b.select(interleaved, b.sdiv(panel_item, batches), b.srem(panel_item, d["chunks"]))
    first_row = b.mul(chunk, d["chunk_rows"])
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
        scale = g.pointer("scale")
        scaled = b.icmp_unsigned("!=", scale, g.null)
        copy = b.or_(b.or_(b.icmp_signed("!=", d["pack"], _c(0)), scaled),
                     b.and_(b.icmp_signed("==", d["padded"], _c(0)), b.not_(full)))
        b_base, ldb = _copy_panel(g, b_panel, masks, copy, scaled, g.at(scale, b.mul(batch, d["scale_batch"])))
    bias_masks = [b.and_(m, g.splat(has_bias, I1)) for m in masks]
    bias = g.at(g.bias, b.add(b.mul(batch, d["bias_batch"]), n0))
    initial = [g.load(g.at(bias, _c(v * lanes)), bias_masks[v]) for v in range(vectors)]

    blocks = CountedLoop(b, "kblock", _c(0), d["K"], d["kc"])
    blocks.enter()
    k0 = blocks.index
    k_end = b.add(k0, d["kc"])
    k1 = b.select(b.icmp_signed("<", k_end, d["K"]), k_end, d["K"])

    panel_state = Panel(k0, k1, a_base, b_base, ldb, c_base, c_offset, initial, masks, full)
    # a convolution's blocks carry their first output pixel along (a division per block cost more than a first
    # layer's FMAs)
    start = first_pixel(g, first_row) if shape.conv else ()
    ahead = _next_slice(g, panel_state, b_panel, panel, chunk, batch) if shape.prefetch else None
    rows = CountedLoop(b, "rows", first_row, b.sub(rows_end, _c(mr - 1)), mr)   # whole row blocks
    first = [rows.phi(I64, value) for value in start] or None
    shares = ahead and replace(ahead, base=rows.phi(ahead.base.type, ahead.base))   # (this block's share)
    rows.enter()
    block = replace(panel_state, prefetch=shares)
    after = _row_block(g, block, [b.add(rows.index, _c(j)) for j in range(mr)], consecutive=True, first=first)
    carried = list(zip(first, after)) if shape.conv else []
    if shares:   # the next row block asks for the next share
        carried.append((shares.base, g.at(shares.base, b.mul(b.sub(k1, k0), shares.step))))
    rows.leave(carried)
    last_row = b.sub(d["M"], _c(1))

    def last_block(height: int):   # fewer than mr rows left: the rows past M repeat row M-1
        def emit():
            rows_left = [b.add(rows.index, _c(j)) for j in range(height)]
            clamped = [b.select(b.icmp_signed("<", r, d["M"]), r, last_row) for r in rows_left]
            _row_block(g, replace(panel_state, prefetch=shares), clamped)
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
