"""The register blocks of the window kernel (`window`) that reuse inputs across pixels: a depthwise convolution's
(madd at column dilation 1, the kernel width and column stride known when generating: `kw` up to 7, `sw` 1 or 2),
a max pool's (the same loops without weights, one output row at a time: 1.2-1.5× faster than the tap loop on
3×3 pools, 2.5× on a 7×7 one; Zen 3, AVX2) and a grouped convolution's.

Per kernel row, a block's (pixels - 1)·sw + kw input columns are loaded once and feed the pixels × kw FMAs (against
the tap loop's pixels × kw loads); the kernel was load-bound, and this measured 1.1-1.4× faster at 3×3, about 3× at
7×7 on Zen 4 (AVX-512). A row runs in ceil(OW / pixels) blocks of equal width (14 columns: 7 + 7, not 8 and an
overlapping 8; the last block overlaps its neighbour when the row is no multiple of the width), each over the chunk's
whole vectors (measured 1.1-1.45× faster than blocks of 8, 4 and 1 called per channel block, on the 28×28 to 7×7
layers at one thread), the blocks inside the input's width in one call (a call per block took a tenth of the 112×112
layers of 16 and 32 channels, 2 threads); edge blocks read the columns outside the input from zeros as long as the
channel chunk, and only the channel tail keeps the tap loop. Where a row's input columns do not all fit the
registers beside the accumulators (AVX2), each column's FMAs are pinned before the next column's load, and a kernel
row's weights stay in registers if they fit beside the accumulators (`window_blocks` sizes the block so they do): on
Zen 3 (AVX2, one thread) 1.2-1.7× faster at 5×5 and 7×7 than 4-pixel blocks with the weights as FMA memory operands,
which issued more loads than the FMAs could hide.

A depthwise kernel knows its kernel height (`kh`) and unrolls the kernel rows: its weights, channel-blocked (a
channel vector's KH·KW tap vectors side by side), sit at offsets from one pointer known when generating, and every
input row's and column's address is the same for all channel vectors of a call (an edge block's column selects
made once per call, not per vector); one output row's kernel row i runs where it lies inside the input (a branch
per kernel row). Against a loop over the kernel rows reading each one's offset from `taps`, with tap-major weights
(a pointer per tap, spilled) and the selects made per vector: 1.0-1.9× faster over the 17 depthwise layers of
MobileNet-V2, EfficientNet-B0 and ConvNeXt-T (`bench.window`'s; Zen 3, AVX2, in one process, geometric mean 1.33× at
one thread and 1.39× at two; 5×5 and 7×7 layers on maps of 28×28 and less 1.4-1.9× at two).

With `rows` 2 (3×3 at row stride 1; 5×5 at row stride 2 on 32 registers: `sh`), a work item is two output rows and,
where both have every kernel row inside the input, its blocks compute them together: each of their KH + sh input
rows is loaded once for both (against KH per row), 2·pixels accumulators. The kernel was bound by those loads,
mostly from L2 (an input row of a 56×56×144 layer is 32 KB): measured 1.05-1.12× faster on MobileNet-V2's 3×3
stride-1 layers from 112×112 to 14×14×576 at one thread (Zen 4, AVX-512; AVX2 likewise), the same on 14×14×384 and
7×7×960; 5×5 at row stride 2 1.07-1.25× faster (Xeon, AVX-512, two threads).

A grouped convolution's groups are each `grouped` vectors (L = grouped·lanes channels) in and out: acc[o] +=
Σ_i w[g, kh, kw, i, o] · x[.., g·L + i], weights packed group by group [C/L, KH·KW·L, L]; a scalar broadcast per
input channel and column feeds the group's vectors (`grouped_input_row`). RegNetY's layers of 8 channels per group
(Zen 3, AVX2) ran 1.5-2.1× faster than on the implicit GEMM's 8-wide block (one thread), which loaded a broadcast
per FMA and reached ~30% of the FMA peak; layers of 16 channels per group (two vectors, blocks of 4 pixels) 1.0-1.3×
(one thread) and 1.0-1.9× (two) as fast as on the GEMM's 16-wide block, slower once (14×14×1024, one thread: 0.8×),
in two runs. Its kernel rows run in a loop (unrolled as a depthwise kernel's, they measured 0.76-1.04×, geometric
mean 0.90×, on RegNetY's grouped layers and four more; Zen 3, two threads).
"""
from __future__ import annotations

from .counted_loop import I64, CountedLoop, i64 as _c, pin, stack_buffer, update_when
from .vector_builder import F32
from .window_builder import BlockArgs, WindowBuilder

ZEROS = 16   # params [lo, hi, ...] holds the padding (madd: zeros; max: -inf) from this float on, as many as the
             # channels (at least a vector)
FEW_COLUMNS = 8   # up to this many input columns per row, a depthwise block leaves their addresses to LLVM


def column_addresses(g: WindowBuilder, first, columns: int) -> list:
    """The addresses of `columns` neighbouring input pixels from `first`, C floats apart, made where they are
    used (a depthwise block: in its loop over channel vectors): a base per 3 columns, each the last plus 3·C
    (pinned: LLVM neither hoists the bases out of that loop nor folds them into one another), the others 1 or
    2 C from one — the scaled index of an x86 address. Left to LLVM, the 10 to 19 column pointers of each of a
    depthwise block's input rows are computed once per call, spilled, and one reloaded before every load."""
    b = g.b
    step = pin(b, [g.d["C"]], barrier=False)[0]
    bases = [first]
    for _ in range(3, columns, 3):
        bases.append(pin(b, [g.at(bases[-1], b.mul(step, _c(3)))], barrier=False)[0])
    return [g.at(bases[j // 3], b.mul(step, _c(j % 3))) if j % 3 else bases[j // 3] for j in range(columns)]


def depthwise_input_row(g: WindowBuilder, blk: BlockArgs, pixels: int, cv, clipped: bool, x_row,
                         kernel_rows: list[int], acc: list, paired: bool = False) -> None:
    """The FMAs of one input row (at `x_row`, channel offset `cv` not included) of a block reusing inputs
    (stride `sw`, kernel width `kw` known) into the accumulators acc[t][pixel] of each output row t, which
    sees it through its kernel row kernel_rows[t]: each of the (pixels - 1)·sw + kw input columns is loaded
    once and feeds the (row, pixel, tap) triples it belongs to, against kw weight vectors per output row loaded
    once (a max pool's: no weights). `clipped`: the block's first input column is `blk.kw_lo` (maybe negative),
    columns outside [0, W) read the padding at `params` + ZEROS instead (zeros; a max pool's: -inf; a select
    of the column's address, the same for every channel vector: LLVM makes it once per call)."""
    b, d, kw, sw = g.b, g.d, g.shape.kw, g.shape.sw
    columns, registers = (pixels - 1) * sw + kw, g.shape.registers
    # when the accumulators, weights and every input column of a row exceed the registers, each column's FMAs
    # are pinned before the next column's load (`pin`), else LLVM loads the columns up front and spills; the
    # weights stay in registers if they fit beside the accumulators and an input column, else they are
    # loaded where used (FMA memory operands)
    madd = g.shape.combine == "madd"
    live = len(kernel_rows) * (pixels + (kw if madd else 0))
    barrier = live + columns > registers
    keep = live + 1 <= registers or not madd
    if madd:
        w_cv = g.at(blk.w, b.mul(cv, _c(g.shape.kh * kw)))   # the channel vector's taps, a vector each
        weight = [[g.at(w_cv, _c((k * kw + t) * g.shape.lanes)) for t in range(kw)] for k in kernel_rows]
        weights = [[g.load(address) for address in row] for row in weight] if keep else weight
    else:
        weights = [[None] * kw for _ in kernel_rows]
    zeros = g.at(g.p["params"], _c(ZEROS))
    # a block's columns are made (`column_addresses`) where there are more than a few, and not in a block of
    # two output rows (`paired`; made in the loop, AVX-512's blocks of two 8-pixel rows spilled two vectors):
    # LLVM's own addresses there. Clipped, only the first and last kw - 1 columns can lie outside the input
    # (the launch keeps the pads narrower than the window): the others are made too where they are more than
    # a few, else every column is checked (with LLVM's addresses for some, it loaded them early and spilled)
    edge = kw - 1 if clipped else 0
    middle = range(edge, max(edge, columns - edge))
    if clipped and (paired or len(middle) <= FEW_COLUMNS):
        middle = range(0)
    addresses = {}
    if len(middle) > FEW_COLUMNS and not paired:
        first = g.at(x_row, b.add(b.mul(d["C"], _c(middle.start)), cv))
        addresses = dict(zip(middle, column_addresses(g, first, len(middle))))
    for j in range(columns):
        if j in addresses:
            x = g.load(addresses[j])
        else:
            address = g.at(x_row, b.mul(d["C"], _c(j)))
            if j not in middle:
                address = b.select(b.icmp_unsigned("<", b.add(blk.kw_lo, _c(j)), d["W"]), address, zeros)
            x = g.load(g.at(address, cv))
        touched = []
        for t, row in enumerate(acc):
            for p in range(pixels):
                if 0 <= j - p * sw < kw:
                    w = weights[t][j - p * sw]
                    row[p] = g.combine(row[p], x, w if keep else g.load(w))
                    touched.append((row, p))
        if barrier and touched:
            for (row, p), value in zip(touched, pin(b, [row[p] for row, p in touched])):
                row[p] = value


def grouped_input_row(g: WindowBuilder, blk: BlockArgs, pixels: int, cv, clipped: bool, x_row, first,
                       acc: list) -> None:
    """The FMAs of one input row (at `x_row`, channel offset `cv` included) of a grouped convolution's block (L
    = `grouped`·lanes channels per group, from `cv`; acc[pixel·grouped + vector]) through the kernel row whose
    first tap is `first`: per input channel i of the group, its kw·grouped weight vectors W[tap, i] loaded once,
    then each of the (pixels - 1)·sw + kw input columns one broadcast feeding the (pixel, tap) pairs it belongs
    to, those accumulators pinned before the next column's load. Inside the input's width, the columns'
    addresses are one base pointer per 3 columns plus 0, 1 or 2 pixel steps (computed once, no arithmetic per
    channel); clipped, the columns are copied to a stack buffer first, zeros for those outside [0, W), and read
    there at offsets known when generating (an address select per column and channel measured 1.3× slower at 7
    output columns, stride 2)."""
    b, d, kw, sw, lanes, vectors = g.b, g.d, g.shape.kw, g.shape.sw, g.shape.lanes, g.shape.grouped
    group = lanes * vectors
    columns = (pixels - 1) * sw + kw
    group_w = g.at(blk.w, b.mul(cv, b.mul(b.mul(d["KH"], d["KW"]), _c(group))))   # the group's weights
    if clipped:   # the columns into a buffer, zeros for those outside [0, W): from there at known offsets
        zeros = g.at(g.p["params"], _c(ZEROS))
        buffer = stack_buffer(b, columns * group)
        for j in range(columns):
            inside = b.icmp_unsigned("<", b.add(blk.kw_lo, _c(j)), d["W"])
            column = b.select(inside, g.at(x_row, b.mul(d["C"], _c(j))), zeros)
            for v in range(vectors):
                g.store(g.load(g.at(column, _c(v * lanes))), g.at(buffer, _c(j * group + v * lanes)))
        buffer = pin(b, [buffer])[0]   # (its loads stay loads: not the stored vectors' lanes shuffled)
        addresses = [g.at(buffer, _c(j * group)) for j in range(columns)]
    else:   # a base pointer per 3 columns, each column 0, 1 or 2 C from one (no address arithmetic per channel)
        addresses = column_addresses(g, x_row, columns)
    row_w = g.at(group_w, b.mul(first, _c(group * group)))   # the kernel row's
    for i in range(group):
        weights = [[g.load(g.at(row_w, _c((t * group + i) * group + v * lanes))) for v in range(vectors)]
                   for t in range(kw)]
        for j, address in enumerate(addresses):
            x = g.splat(b.load(g.at(address, _c(i)), typ=F32))
            touched = [p * vectors + v for p in range(pixels) if 0 <= j - p * sw < kw for v in range(vectors)]
            for k in touched:
                acc[k] = g.combine(acc[k], x, weights[(j - k // vectors * sw)][k % vectors])
            for k, value in zip(touched, pin(b, [acc[k] for k in touched])):
                acc[k] = value


def accumulate_rows(g: WindowBuilder, blk: BlockArgs, pixels: int, cv, clipped: bool, rows: int) -> list:
    """The accumulators [row][pixel] of the channel vector at offset `cv` of a block reusing inputs (a grouped
    convolution's: [row][pixel·grouped + vector] of the group at `cv`), over the kernel rows [kh_lo, kh_hi) of
    one output row, or of two neighbouring rows (row stride `sh`, dilation 1, every kernel row inside the input)
    whose KH + sh input rows are each loaded once for both. A depthwise kernel's rows are unrolled (`kh`), a
    grouped convolution's run in a loop."""
    b, d, kw, lanes = g.b, g.d, g.shape.kw, g.shape.lanes
    if g.shape.combine == "madd":
        initial = [g.load(g.at(blk.bias, b.add(cv, _c(v * lanes)))) for v in range(g.shape.step_vectors)]
    else:
        initial = [g.constant(float("-inf"))]
    if g.shape.grouped:
        kh_loop = CountedLoop(b, "kh", blk.kh_lo, blk.kh_hi, 1)
        acc = [kh_loop.phi(g.vec, value) for _ in range(pixels) for value in initial]
        kh_loop.enter()
        first = b.mul(kh_loop.index, _c(kw))
        x_row = g.at(blk.x, b.load(b.gep(g.p["taps"], [first], source_etype=I64), typ=I64))   # (window._accumulate)
        updated = list(acc)
        grouped_input_row(g, blk, pixels, cv, clipped, g.at(x_row, cv), first, updated)
        kh_loop.leave(list(zip(acc, updated)))
        return [acc]
    row_step, sh = b.mul(b.mul(d["dh"], d["W"]), d["C"]), g.shape.sh
    acc = [initial * pixels for _ in range(rows)]
    for i in range(g.shape.kh + (rows - 1) * sh):   # input row i: kernel row i of the top row, i - sh of the bottom
        x_row = g.at(blk.x, b.mul(_c(i), row_step))
        if rows == 2:
            seen = [(t, i - t * sh) for t in range(2) if 0 <= i - t * sh < g.shape.kh]
            depthwise_input_row(g, blk, pixels, cv, clipped, x_row, [k for _, k in seen], [acc[t] for t, _ in seen],
                                paired=True)
            continue
        inside = b.and_(b.icmp_signed("<=", blk.kh_lo, _c(i)), b.icmp_signed(">", blk.kh_hi, _c(i)))
        acc[0] = update_when(b, inside, acc[0],
                             lambda new: depthwise_input_row(g, blk, pixels, cv, clipped, x_row, [i], [new]), "row")
    return acc
