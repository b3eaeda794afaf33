"""One generated f32 kernel for channels-last (NHWC) sliding windows: depthwise convolution, max and
average pooling, global pooling — the same loops, told apart by how a tap combines into an accumulator.

- `madd`: acc += w[kh, kw, c] · x (depthwise convolution; FMA where the ISA level has one), starting at
  the bias, then the `activation` (SiLU, HardSwish: a math-library function) and a clamp to [lo, hi]
  before the store (Relu, Relu6, Clip);
- `max`: acc = max(acc, x), NaN where either is (`max_with_nan`), starting at -inf; padding counts as -inf;
- `mean`: acc += x, scaled by 1 / (taps): every tap of the window with `include_pad`, else the taps
  inside the input.

`grouped` (madd, reusing inputs): a grouped convolution whose groups are each `grouped` vectors (L = grouped·lanes
channels) in and out (`window_reuse`).

A global pool is the window covering the whole image (one output pixel). The ABI is the GEMM's (`KernelFunction`):
`fn(ptrs, dims, begin, end, scratch)` computes work items [begin, end) on the native pool. A work item is one output
row (or two, `rows`) of one chunk of channels of one image, chunks fastest, then rows: a thread's share of the
items is a run of rows, whose consecutive items reuse the input rows they share, and a row is split between two
threads by channels only where the launch cuts it into chunks to even the threads' shares.

- ptrs: x [N, H, W, C]; w [cp / lanes, KH·KW, lanes] (depthwise weights channel-blocked: each channel vector's
  tap vectors side by side, zero-padded to cp, a multiple of the vector width); bias [cp] (zero-padded); out
  [N, OH, OW, C], its pixels OC elements apart (C, or more: a slice of the channels of a Concat's output); params
  f32 [lo, hi, .., the padding from ZEROS on (madd: zeros; max: -inf), at least a vector and as many as the
  channels]; taps i64 [KH·KW] (each tap's offset in x from the window's origin: kh·dh·W·C + kw·dw·C).
- dims: see `DIMS`; `ow_lo`/`ow_hi` bound the output columns whose windows lie inside the input's width.

Register blocking: `pixels` output pixels × `vectors` channel vectors accumulate in registers through the tap loops,
so each weight vector loaded serves every pixel of the block. For madd and max at column dilation 1 with the kernel
width and column stride known when generating (`kw` up to 7, `sw` 1 or 2), the blocks also share inputs between
pixels (`window_reuse`). Each register block is a function of its own, never inlined, whose tap loop reads the tap's
offset from `taps`: with the offsets computed, or the blocks inlined into the row loops, LLVM strength-reduces every
pixel's address into an induction variable and spills them (measured 2-3× slower). So are a row's blocks of one
width (in the kernel's body, the rows of every width were most of its compile time). Without reuse, blocks of
`pixels` and of half as many run over the interior columns (all taps inside the row, no checks); the columns left
over and the edge columns run one pixel at a time with their kw range clipped to the input, never branching per tap;
a row's kh range is clipped the same way. Channels go `vectors` at a time, then one vector at a time, then the tail
of C under a lane mask — the only masked loads and stores, since the weights and bias are padded (AVX2's vmaskmov is
slow: it stays out of every loop over whole vectors).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from llvmlite import ir

from . import vmath
from .counted_loop import I64, CountedLoop, i64 as _c
from .vector_builder import F32
from .window_builder import DIMS, PTRS, BlockArgs, WindowBuilder  # noqa: F401 (DIMS, PTRS: the ABI)
from .window_reuse import ZEROS, accumulate_rows

COMBINES = ("madd", "max", "mean")


@dataclass(frozen=True)
class WindowKernel:
    """The shape of one generated kernel."""
    combine: str    # one of COMBINES
    pixels: int     # output pixels of the widest register block
    vectors: int    # channel vectors of the widest register block
    lanes: int      # f32 lanes per vector (the ISA level's width)
    fused: bool = True   # FMA instructions (else a multiply and an add)
    activation: str = ""   # madd: a math-library function applied before the clamp
    kw: int = 0     # madd or max at column dilation 1: the kernel width, its blocks reuse inputs (0: none)
    sw: int = 1     # with kw: the column stride
    rows: int = 1   # with kw: output rows of a work item, 2: computed together at row stride `sh`, dilation 1
    registers: int = 16   # vector registers of the ISA level
    grouped: int = 0   # with kw: vectors per group of a grouped convolution (see above; 0: depthwise)
    kh: int = 0     # with kw, depthwise or max (and only then): the kernel height, its rows unrolled
    sh: int = 1     # with rows 2: the row stride at which the two rows are computed together

    def __post_init__(self):
        if self.combine not in COMBINES:
            raise ValueError(f"window combine {self.combine!r} is not one of {COMBINES}")
        if self.kw and self.combine == "mean":
            raise ValueError(f"mean does not reuse inputs across pixels (kw={self.kw}, combine {self.combine!r})")
        if self.kw and self.combine == "max" and (self.rows != 1 or self.grouped or self.activation):
            raise ValueError("max reuses inputs one output row at a time, without groups or activation")
        if self.rows not in (1, 2) or (self.rows == 2 and not self.kw):
            raise ValueError(f"a work item is 1 output row, or 2 with kw (rows={self.rows}, kw={self.kw})")
        if self.sh not in (1, 2) or (self.sh != 1 and self.rows != 2):
            raise ValueError(f"two rows are computed together at row stride 1 or 2 (sh={self.sh}, rows={self.rows})")
        if bool(self.kh) != bool(self.kw and not self.grouped):
            raise ValueError(f"a depthwise kernel reusing inputs unrolls its kernel rows and needs their count, no "
                             f"other takes one (kh={self.kh}, kw={self.kw}, grouped={self.grouped})")
        if self.grouped and (not self.kw or self.rows != 1):
            raise ValueError("a grouped convolution's kernel reuses inputs across pixels, one output row at a time")

    @property
    def step_vectors(self) -> int:
        """Vectors of one pass of the reuse path's channel loop: one, or a grouped convolution's group's."""
        return max(1, self.grouped)

    @property
    def step(self) -> int:
        """Channels of one pass of the reuse path's channel loop."""
        return self.lanes * self.step_vectors

    @property
    def name(self) -> str:
        return (f"snipjit_window_{self.combine}_{self.pixels}x{self.vectors}x{self.lanes}"
                f"{'' if self.fused else '_mul_add'}{'_' + self.activation if self.activation else ''}"
                f"{f'_kw{self.kw}' if self.kw else ''}{f'_s{self.sw}' if self.sw != 1 else ''}"
                f"{f'_r{self.rows}' if self.rows != 1 else ''}{f'_grouped{self.grouped}' if self.grouped else ''}"
                f"{f'_kh{self.kh}' if self.kh else ''}{f'_sh{self.sh}' if self.sh != 1 else ''}_v{self.registers}")


def window_blocks(registers: int, kw: int = 0, rows: int = 1, grouped: int = 0,
                  fused: bool = True, sw: int = 1) -> tuple[int, int]:
    """(pixels, vectors) of the widest register block for a register file. On the tap loop: pixels × vectors
    accumulators plus a register per weight vector, leaving room for the input operands and the tail's mask. Reusing
    inputs (`kw`, `rows` output rows, column stride `sw`): one vector at a time, up to 8 pixels per row whose
    accumulators, a kernel row's kw weight vectors per output row and an input column fit the registers (AVX2 at kw
    7: 8 + 7 + 1 of 16) — at most 4 pixels would leave the FMAs bound by their latency (each accumulator takes one
    FMA per input column); on 32 registers up to 16 at kernel widths of 5 and more and column stride 1 (Xeon,
    AVX-512, 2 threads: EfficientNet's 5×5 layers 1.02-1.32×, ConvNeXt's 7×7 0.98-1.11× faster; 3×3 blocks of 12
    were 0.52-1.35×, 5×5 of stride 2 of 16 0.78×; on 16 registers, 10 at kw 5 measured 0.98-1.06×, so 8 stays); two
    rows at column stride 2 up to 7 (5×5 on 32 registers: LLVM spilled the 4-pixel block of the 8-pixel kernel; maps
    of 7·2^k columns take blocks of 7). A grouped convolution's (`grouped` vectors per group): up to 8 pixels per
    row whose accumulators (`grouped` each) fit beside an input channel's kw weight vectors per group vector and a
    broadcast input; without FMA (`fused`), 4 registers more (x86-64-v2 spilled with fewer: its two-operand
    multiplies need copies)."""
    if grouped:
        return max(1, min(8, (registers - rows * kw * grouped - (1 if fused else 5)) // (rows * grouped))), 1
    if not kw:
        return (8, 2) if registers >= 32 else (4, 2)
    widest = 16 if kw >= 5 and sw == 1 and registers >= 32 else 7 if rows == 2 and sw == 2 else 8
    return max(1, min(widest, (registers - rows * kw - 1) // rows)), 1



def _accumulate(g: WindowBuilder, blk: BlockArgs, pixels: int, vectors: int, mask) -> list:
    """The accumulators [pixel][vector] of the block over its taps."""
    b, d, lanes, combine = g.b, g.d, g.shape.lanes, g.shape.combine
    if combine == "madd":
        initial = [g.load(g.at(blk.bias, _c(v * lanes))) for v in range(vectors)]
    else:
        initial = [g.constant(float("-inf") if combine == "max" else 0.0)] * vectors
    pixel_step = b.mul(d["sw"], d["C"])
    offsets = [b.mul(pixel_step, _c(p)) for p in range(pixels)]
    kh_loop = CountedLoop(b, "kh", blk.kh_lo, blk.kh_hi, 1)
    outer = [[kh_loop.phi(g.vec, initial[v]) for v in range(vectors)] for _ in range(pixels)]
    kh_loop.enter()
    first = b.mul(kh_loop.index, d["KW"])
    tap = CountedLoop(b, "tap", b.add(first, blk.kw_lo), b.add(first, blk.kw_hi), 1)
    inner = [[tap.phi(g.vec, outer[p][v]) for v in range(vectors)] for p in range(pixels)]
    tap.enter()
    # the tap's input offset is loaded, not computed: LLVM then cannot strength-reduce every pixel's
    # address into an induction variable of its own (it spills them, and sets them up at every call)
    x_tap = g.at(blk.x, b.load(b.gep(g.p["taps"], [tap.index], source_etype=I64), typ=I64))
    if combine == "madd":
        w_tap, taps = g.at(blk.w, b.mul(tap.index, _c(lanes))), b.mul(d["KH"], d["KW"])
        weights = [g.load(g.at(w_tap, b.mul(taps, _c(v * lanes)))) for v in range(vectors)]
    else:
        weights = [None] * vectors
    updated = [[g.combine(inner[p][v], g.load(g.at(x_tap, b.add(offsets[p], _c(v * lanes))), mask), weights[v])
                for v in range(vectors)] for p in range(pixels)]
    tap.leave([(inner[p][v], updated[p][v]) for p in range(pixels) for v in range(vectors)])
    kh_loop.leave([(outer[p][v], inner[p][v]) for p in range(pixels) for v in range(vectors)])
    return outer


def _bounds(g: WindowBuilder):
    """madd: the clamp's (lo, hi) vectors, loaded first (later, stores that may alias `params` force reloads)."""
    if g.shape.combine != "madd":
        return None
    return tuple(g.splat(g.b.load(g.b.gep(g.p["params"], [_c(i)], source_etype=F32), typ=F32)) for i in range(2))


def _finish(g: WindowBuilder, acc: list, scale, bounds) -> list:
    b = g.b
    if g.shape.combine == "madd":
        lo, hi = bounds
        out = []
        for a in acc:   # ordered compares: NaN passes through, as NumPy's clip lets it
            if g.shape.activation:
                a = vmath.emit(b, g.shape.activation, a, fused_multiply_add=g.shape.fused)
            a = b.select(b.fcmp_ordered("<", a, lo), lo, a)
            out.append(b.select(b.fcmp_ordered(">", a, hi), hi, a))
        return out
    if g.shape.combine == "mean":
        return [b.fmul(a, scale) for a in acc]
    return acc


def _block_function(g: WindowBuilder, pixels: int, vectors: int, masked: bool, mode: str = "taps") -> ir.Function:
    """The function computing a register block: `pixels` neighbouring output pixels × `vectors` channel
    vectors (`masked`: one vector, its lanes below `left`) on the tap loop (`mode` "taps"); or, `mode`
    "reuse" (inside the input's width) and "clipped" (not), `pixels` output pixels over the whole vectors
    of the `left` channels, one vector at a time, reusing inputs across pixels (`accumulate_rows`): one
    call per block of a row's chunk ("reuse": per run of `count` neighbouring blocks), its setup shared by
    the chunk's vectors; "reuse2" and "clipped2" the same on two neighbouring output rows."""
    name = f"{g.shape.name}_{pixels}x{vectors}{'_masked' if masked else ''}{'' if mode == 'taps' else '_' + mode}"
    fn = g.function(name, [g.ptr] * 6 + [I64] * 6, internal=True)
    b, d, lanes = g.b, g.d, g.shape.lanes
    blk = BlockArgs(*fn.args[2:])
    mask = b.icmp_signed("<", g.lane_ids, g.splat(blk.left, I64)) if masked else None
    bounds = _bounds(g)
    scale = None
    if g.shape.combine == "mean":
        taps = b.mul(g.maximum(b.sub(blk.kh_hi, blk.kh_lo), _c(0)), g.maximum(b.sub(blk.kw_hi, blk.kw_lo), _c(0)))
        every = b.icmp_signed("!=", d["include_pad"], _c(0))
        divisor = b.select(every, b.mul(d["KH"], d["KW"]), g.maximum(taps, _c(1)))
        scale = g.splat(b.fdiv(ir.Constant(F32, 1.0), b.sitofp(divisor, F32)))
    if mode != "taps":
        # one vector at a time, stored before the next: in one loop, or with another vector's results
        # live, or unrolled, LLVM's scheduler loads more inputs up front than registers hold, and spills
        fn.attributes.add("optsize")
        step, vectors = g.shape.step, g.shape.step_vectors
        whole = b.mul(b.sdiv(blk.left, _c(step)), _c(step))
        run = CountedLoop(b, "block", _c(0), blk.count, 1)
        run.enter()
        columns = b.mul(run.index, _c(pixels * g.shape.sw))
        at = replace(blk, x=g.at(blk.x, b.mul(columns, d["C"])), kw_lo=b.add(blk.kw_lo, columns),
                     out=g.at(blk.out, b.mul(b.mul(run.index, _c(pixels)), d["OC"])))
        loop = CountedLoop(b, "cv", _c(0), whole, step)
        loop.enter()
        rows = 2 if mode.endswith("2") else 1
        acc = accumulate_rows(g, at, pixels, loop.index, mode.startswith("clipped"), rows)
        for r in range(rows):
            out_row = g.at(at.out, b.add(b.mul(_c(r), b.mul(d["OW"], d["OC"])), loop.index))
            for k, value in enumerate(_finish(g, acc[r], scale, bounds)):
                p, v = divmod(k, vectors)
                g.store(value, g.at(out_row, b.add(b.mul(d["OC"], _c(p)), _c(v * lanes))))
        loop.leave()
        run.leave()
        b.ret_void()
        return fn
    acc = _accumulate(g, blk, pixels, vectors, mask)
    for p in range(pixels):
        values = _finish(g, acc[p], scale, bounds)
        out_p = g.at(blk.out, b.mul(d["OC"], _c(p)))
        for v in range(vectors):
            g.store(values[v], g.at(out_p, _c(v * lanes)), mask)
    b.ret_void()
    return fn


@dataclass
class _Row:
    """What the pixel blocks of one work item (an output row of a channel chunk) share."""
    args: tuple         # the kernel's ptrs and dims
    x_row: ir.Value     # x at the image and the row's first input row (ih0), column 0
    out_row: ir.Value   # out at the image and output row
    kh_lo: ir.Value
    kh_hi: ir.Value
    c_begin: ir.Value
    c_end: ir.Value


def _columns(g: WindowBuilder, row: _Row, blocks: dict, start, stop, pixels: int, clip: bool):
    """Blocks of `pixels` output columns from `start` while they fit before `stop`, each over the chunk's
    channels (`vectors` at a time, then one, then the masked tail); the first column not done. `clip`:
    each column's kw taps are clipped to the input's width (edges)."""
    b, d = g.b, g.d
    loop = CountedLoop(b, f"ow{pixels}", start, b.sub(stop, _c(pixels - 1)), pixels)
    loop.enter()
    iw0 = b.sub(b.mul(loop.index, d["sw"]), d["pl"])
    kw_lo, kw_hi = g.clipped_range(iw0, d["W"], d["dw"], d["KW"]) if clip else (_c(0), d["KW"])
    x_pixel = g.at(row.x_row, b.mul(iw0, d["C"]))
    out_pixel = g.at(row.out_row, b.mul(loop.index, d["OC"]))

    def call(c, count: int) -> None:
        w = g.at(g.p["w"], b.mul(c, b.mul(d["KH"], d["KW"])))   # channel c's weights: c·KH·KW floats in
        b.call(blocks[pixels, max(count, 1), count == 0, "taps"],
               [*row.args, g.at(x_pixel, c), w, g.at(g.p["bias"], c), g.at(out_pixel, c),
                row.kh_lo, row.kh_hi, kw_lo, kw_hi, b.sub(row.c_end, c), _c(1)])

    _channels(g, row, call)
    loop.leave()
    return loop.index


def _channels(g: WindowBuilder, row: _Row, call) -> None:
    """`call(c, count)` over the chunk's channels, `vectors` at a time, then one at a time; `call(c, 0)`
    for the tail of C left (if any)."""
    b, lanes = g.b, g.shape.lanes
    c = row.c_begin
    for count in sorted({g.shape.vectors, 1}, reverse=True):
        channels = CountedLoop(b, f"c{count}", c, b.sub(row.c_end, _c(count * lanes - 1)), count * lanes)
        channels.enter()
        call(channels.index, count)
        channels.leave()
        c = channels.index
    g.when(b.icmp_signed("<", c, row.c_end), lambda: call(c, 0))


def _reuse_block(g: WindowBuilder, row: _Row, blocks: dict, ow0, pixels: int, rows: int, run=None) -> None:
    """Output columns [ow0, ow0 + pixels) of `rows` output rows (2: row stride 1) of a kernel reusing inputs,
    over the chunk's whole vectors: inside the input's width without checks, else clipped; the channel tail
    of each row on the tap loop under a mask (at the edges one pixel at a time). With `run` (a count): that
    many neighbouring blocks from ow0, all inside the input's width, in one call; their tails block by block."""
    b, d, lanes, sw = g.b, g.d, g.shape.lanes, g.shape.sw
    suffix = "2" if rows == 2 else ""
    iw0 = b.sub(b.mul(ow0, _c(sw)), d["pl"])
    x_pixel, out_pixel = g.at(row.x_row, b.mul(iw0, d["C"])), g.at(row.out_row, b.mul(ow0, d["OC"]))
    step = g.shape.step
    whole = b.add(row.c_begin, b.mul(b.sdiv(b.sub(row.c_end, row.c_begin), _c(step)), _c(step)))

    def call(key, x, out, c, kw_lo, kw_hi, count=_c(1)) -> None:
        taps = b.mul(d["KH"], d["KW"])   # channel c's weights: c·KH·KW floats in (a group's: c·KH·KW·L)
        w = g.at(g.p["w"], b.mul(c, b.mul(taps, _c(step)) if g.shape.grouped else taps))
        b.call(blocks[key], [*row.args, g.at(x, c), w, g.at(g.p["bias"], c), g.at(out, c),
                             row.kh_lo, row.kh_hi, kw_lo, kw_hi, b.sub(row.c_end, c), count])

    def per_row(emit, x0=x_pixel, out0=out_pixel) -> None:   # emit(x, out) for each row at the block's first pixel
        for r in range(rows):
            emit(g.at(x0, b.mul(_c(r * g.shape.sh), b.mul(d["W"], d["C"]))),
                 g.at(out0, b.mul(_c(r), b.mul(d["OW"], d["OC"]))))

    def clipped_tail(x, out) -> None:
        loop = CountedLoop(b, "edge", _c(0), _c(pixels), 1)
        loop.enter()
        iw = b.add(iw0, b.mul(loop.index, _c(sw)))
        kw_lo, kw_hi = g.clipped_range(iw, d["W"], d["dw"], d["KW"])
        step = b.mul(loop.index, b.mul(_c(sw), d["C"]))
        call((1, 1, True, "taps"), g.at(x, step), g.at(out, b.mul(loop.index, d["OC"])), whole, kw_lo, kw_hi)
        loop.leave()

    def inside_tail(x, out) -> None:
        call((pixels, 1, True, "taps"), x, out, whole, _c(0), d["KW"])

    def channels(mode: str, tail, count=_c(1)) -> None:
        g.when(b.icmp_signed("<", row.c_begin, whole),
               lambda: call((pixels, 1, False, mode + suffix), x_pixel, out_pixel, row.c_begin, iw0, d["KW"], count))
        if not g.shape.grouped:   # (a grouped convolution's channels are whole groups)
            g.when(b.icmp_signed("<", whole, row.c_end), lambda: per_row(tail))

    if run is not None:
        def tails(x, out) -> None:
            loop = CountedLoop(b, "tail", _c(0), run, 1)
            loop.enter()
            inside_tail(g.at(x, b.mul(loop.index, b.mul(_c(pixels * sw), d["C"]))),
                        g.at(out, b.mul(loop.index, b.mul(_c(pixels), d["OC"]))))
            loop.leave()
        channels("reuse", tails, run)
        return
    inside = b.and_(b.icmp_signed(">=", ow0, d["ow_lo"]), b.icmp_signed("<=", b.add(ow0, _c(pixels)), d["ow_hi"]))
    fn = b.function
    interior, edge, done = (fn.append_basic_block(name) for name in ("interior", "edge", "block.done"))
    b.cbranch(inside, interior, edge)
    b.position_at_end(interior)
    channels("reuse", inside_tail)
    b.branch(done)
    b.position_at_end(edge)
    channels("clipped", clipped_tail)
    b.branch(done)
    b.position_at_end(done)


def _reuse_row(g: WindowBuilder, row: _Row, row_functions: dict, rows: int = 1) -> None:
    """A row (or two, `rows`) of a kernel reusing inputs: blocks of width ceil(OW / ceil(OW / pixels)), by the
    `_row_function` of that width."""
    b, d, most = g.b, g.d, g.shape.pixels
    count = b.sdiv(b.add(d["OW"], _c(most - 1)), _c(most))
    width = b.sdiv(b.add(d["OW"], b.sub(count, _c(1))), g.maximum(count, _c(1)))
    done = b.function.append_basic_block("row.done")
    switch = b.switch(width, done)
    for pixels in range(1, most + 1):
        switch.add_case(_c(pixels), stage := b.function.append_basic_block(f"row{pixels}"))
        b.position_at_end(stage)
        b.call(row_functions[rows, pixels], [*row.args, row.x_row, row.out_row, row.kh_lo, row.kh_hi, row.c_begin,
                                             row.c_end])
        b.branch(done)
    b.position_at_end(done)


def _row_function(g: WindowBuilder, blocks: dict, pixels: int, rows: int) -> ir.Function:
    """The blocks of `pixels` columns of a row (or two), the last overlapping its neighbour when the row is no
    multiple of the width (it writes the same values again); those inside the input's width in one run."""
    fn = g.function(f"{g.shape.name}_row{rows}x{pixels}", [g.ptr] * 4 + [I64] * 4, internal=True)
    b, d = g.b, g.d
    row = _Row(tuple(fn.args[:2]), *fn.args[2:])

    def each(start, stop) -> None:   # the blocks [start, stop) one by one
        loop = CountedLoop(b, f"ob{pixels}", start, stop, 1)
        loop.enter()
        _reuse_block(g, row, blocks, b.mul(loop.index, _c(pixels)), pixels, rows)
        loop.leave()

    full = b.sdiv(d["OW"], _c(pixels))
    lo = g.minimum(full, b.sdiv(b.add(d["ow_lo"], _c(pixels - 1)), _c(pixels)))   # the first inside
    hi = g.maximum(lo, g.minimum(full, b.sdiv(d["ow_hi"], _c(pixels))))            # past the last inside
    each(_c(0), lo)
    g.when(b.icmp_signed("<", lo, hi),
           lambda: _reuse_block(g, row, blocks, b.mul(lo, _c(pixels)), pixels, rows, run=b.sub(hi, lo)))
    each(hi, full)
    g.when(b.icmp_signed("<", b.mul(full, _c(pixels)), d["OW"]),
           lambda: _reuse_block(g, row, blocks, b.sub(d["OW"], _c(pixels)), pixels, rows))
    b.ret_void()
    return fn


def window_module(shape: WindowKernel) -> ir.Module:
    """The module defining kernel `shape.name`."""
    g = WindowBuilder(shape)
    sizes = sorted({shape.pixels, max(1, shape.pixels // 2), 1}, reverse=True)
    kinds = [(shape.vectors, False, "taps"), (1, False, "taps"), (1, True, "taps")]
    keys = [(pixels, *kind) for pixels in sizes for kind in dict.fromkeys(kinds)]
    if shape.kw:   # every width of block reusing inputs, inside the input or clipped, with its masked tail
        modes = ("reuse", "clipped", "taps") + (("reuse2", "clipped2") if shape.rows == 2 else ())
        modes = modes[:2] + modes[3:] if shape.grouped else modes
        keys = [(pixels, 1, mode == "taps", mode) for pixels in range(shape.pixels, 0, -1) for mode in modes]
    blocks = {key: _block_function(g, *key) for key in dict.fromkeys(keys)}
    row_functions = {(rows, pixels): _row_function(g, blocks, pixels, rows) for rows in {1, shape.rows}
                     for pixels in range(1, shape.pixels + 1)} if shape.kw else {}
    fn = g.function(shape.name, [g.ptr, g.ptr, I64, I64, g.ptr], internal=False)
    b, d = g.b, g.d
    begin, end = fn.args[2:4]
    work = CountedLoop(b, "work", begin, end, 1)
    work.enter()
    items = b.sdiv(b.add(d["OH"], _c(shape.rows - 1)), _c(shape.rows))   # an image's rows of work items
    row_item = b.sdiv(work.index, d["chunks"])
    n = b.sdiv(row_item, items)
    chunk = b.srem(work.index, d["chunks"])
    oh0 = b.mul(b.srem(row_item, items), _c(shape.rows))
    c_begin = b.mul(chunk, d["chunk_c"])
    c_end = g.minimum(b.add(c_begin, d["chunk_c"]), d["C"])
    x_image = g.at(g.p["x"], b.mul(n, b.mul(d["H"], b.mul(d["W"], d["C"]))))

    def row_at(oh) -> _Row:
        ih0 = b.sub(b.mul(oh, d["sh"]), d["pt"])
        kh_lo, kh_hi = g.clipped_range(ih0, d["H"], d["dh"], d["KH"])
        out_row = g.at(g.p["out"], b.mul(b.add(b.mul(n, d["OH"]), oh), b.mul(d["OW"], d["OC"])))
        return _Row(tuple(fn.args[:2]), g.at(x_image, b.mul(ih0, b.mul(d["W"], d["C"]))), out_row, kh_lo, kh_hi,
                    c_begin, c_end)

    def one_row(row: _Row) -> None:
        if shape.kw:
            _reuse_row(g, row, row_functions)
            return
        ow = _columns(g, row, blocks, _c(0), d["ow_lo"], 1, clip=True)
        for pixels in sizes[:-1]:
            ow = _columns(g, row, blocks, ow, d["ow_hi"], pixels, clip=False)
        _columns(g, row, blocks, ow, d["OW"], 1, clip=True)

    if shape.rows == 1:
        one_row(row_at(oh0))
    else:   # two rows at once when both have every kernel row inside the input, at the row stride and dilation 1
        top, bottom = row_at(oh0), row_at(b.add(oh0, _c(1)))
        full = [b.and_(b.icmp_signed("==", r.kh_lo, _c(0)), b.icmp_signed("==", r.kh_hi, d["KH"]))
                for r in (top, bottom)]
        unit = b.and_(b.icmp_signed("==", d["sh"], _c(shape.sh)), b.icmp_signed("==", d["dh"], _c(1)))
        pair = b.and_(b.and_(b.icmp_signed("<", b.add(oh0, _c(1)), d["OH"]), unit), b.and_(*full))
        together, apart, done = (fn.append_basic_block(name) for name in ("pair", "apart", "pair.done"))
        b.cbranch(pair, together, apart)
        b.position_at_end(together)
        _reuse_row(g, top, row_functions, 2)
        b.branch(done)
        b.position_at_end(apart)
        loop = CountedLoop(b, "oh", oh0, g.minimum(b.add(oh0, _c(2)), d["OH"]), 1)
        loop.enter()
        one_row(row_at(loop.index))
        loop.leave()
        b.branch(done)
        b.position_at_end(done)
    work.leave()
    b.ret_void()
    return g.module
