"""How a convolution's GEMM kernel (`gemm`, `MicroKernel.conv`) finds a row block's rows of A through the window:
the output pixels of its rows, then per tap (`conv_taps`) or, for a block of one output row inside the image's
columns (a first layer's of a fixed column stride: any block of one output row), per kernel row (`window_rows`) the
rows' input pixels, the zero row where a tap falls into the padding."""
from __future__ import annotations

from llvmlite import ir

from .counted_loop import I64, CountedLoop, i64 as _c, pin, stack_buffer
from .gemm_builder import GemmBuilder, Panel, flat, k_loop
from .vector_builder import F32


def output_pixels(g: GemmBuilder, rows: list, consecutive: bool, first: tuple | None = None) -> list:
    """(image, output row, output column) of each row of A. Consecutive rows (whole blocks) start at `first`
    (the pixel after the previous block's, carried along the loop over blocks: `next_pixel`) or divide once,
    and step along the columns, wrapping into the next row and image (a division costs more than a short K
    loop's FMAs: ResNet's 7×7 first layer 1.2× as fast without the two per block)."""
    b, d = g.b, g.d

    def divided(r):
        rest = b.sdiv(r, d["OW"])
        return b.sdiv(rest, d["OH"]), b.srem(rest, d["OH"]), b.srem(r, d["OW"])

    if not consecutive:
        return [divided(r) for r in rows]
    pixels = [first or divided(rows[0])]
    while len(pixels) < len(rows):
        pixels.append(next_pixel(g, pixels[-1]))
    return pixels


def first_pixel(g: GemmBuilder, row) -> tuple:
    """(image, output row, output column) of row `row` of A."""
    return output_pixels(g, [row], False)[0]


def next_pixel(g: GemmBuilder, pixel: tuple) -> tuple:
    """The output pixel after `pixel` (image, output row, output column): the next column, row or image."""
    b, d = g.b, g.d
    image, y, x = pixel
    x = b.add(x, _c(1))
    next_row = b.icmp_signed("==", x, d["OW"])
    x, y = b.select(next_row, _c(0), x), b.add(y, b.zext(next_row, I64))
    next_image = b.icmp_signed("==", y, d["OH"])
    return b.add(image, b.zext(next_image, I64)), b.select(next_image, _c(0), y), x


def conv_taps(g: GemmBuilder, p: Panel, output_pixels: list, acc: list, stepped: bool = False) -> list:
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
    ahead = p.prefetch.moved(g, b.sub(b.mul(taps.index, d["cg"]), p.k0)) if p.prefetch else None
    summed, k = k_loop(g, "k", _c(0), d["cg"], unroll, carried, a_rows, b_tap, p.ldb, a_stride, ahead)
    if unroll > 1:
        summed, _ = k_loop(g, "ktail", k, d["cg"], 1, summed, a_rows, b_tap, p.ldb, a_stride)
    taps.leave(_next_position(b, kh, kw, b.add(kw, _c(1)), d["KW"]) + list(zip(flat(carried), flat(summed))))
    return carried


def window_rows(g: GemmBuilder, p: Panel, output_pixels: list, acc: list, clipped: bool = False) -> list:
    """`conv_taps` for a block of consecutive output pixels of one output row whose windows lie inside
    the image's columns, where K blocks cover whole kernel rows: per line — a kernel row of an NHWC
    image whose taps' channels are contiguous (one group, no dilation along the row: `row_taps`), or a
    kernel row and channel of a planar image — one bounds check for all rows, then one K loop along the
    line. A 3×3 NHWC window of 16 channels is 3 loops of 48 steps instead of 9 of 16; a planar image's
    line is a kernel row of one plane (tap by tap, a 3-channel image would cost more addresses than
    FMAs): its loop runs along the kernel's columns, unrolled with the channels for a kernel of fixed
    width and channels. `clipped` (such a kernel of a fixed column stride): the block's windows may reach
    past the image's columns; each line's columns are copied to a buffer first, zeros outside the image (the
    edge blocks ran tap by tap before: ResNet's 7×7 first layer 1.07-1.15× as fast on Zen 3, 3×3 ones unchanged)."""
    b, d, shape = g.b, g.d, g.shape
    image, y, x = output_pixels[0]
    top = b.sub(b.mul(y, d["stride_h"]), d["pad_t"])
    left = b.sub(b.mul(x, d["stride_w"]), d["pad_l"])
    first = b.add(b.mul(image, d["image_stride"]), b.mul(left, d["pixel_stride"]))
    width = _c(shape.kernel_width) if shape.kernel_width else d["KW"]
    cg = _c(shape.channels) if shape.channels else d["cg"]   # (known when generating: no division by it)
    run = b.mul(width, cg)                             # K per kernel row
    per_row = cg if shape.planar else _c(1)           # lines per kernel row
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
    if not shape.column_stride:   # (with one, `_fixed_stride_line` finds the rows from the first)
        row_step = b.select(inside, b.mul(d["stride_w"], d["pixel_stride"]), _c(0))
        while len(a_rows) < len(output_pixels):
            a_rows.append(g.at(a_rows[-1], row_step))
    b_line = g.at(p.b_base, b.mul(b.add(b.mul(kh, run), c), p.ldb))
    if not shape.planar:   # the kernel row's taps, channel after channel: contiguous in A and B
        # k counts up from -run to 0 from the line's end: the loop's bound is no register (spilled, in
        # the 8-row block and the 4x3 one)
        ends = [g.at(row, run) for row in a_rows]
        b_end = g.at(b_line, b.mul(run, p.ldb))
        ahead = p.prefetch.moved(g, b.sub(b.mul(b.add(kh, _c(1)), run), p.k0)) if p.prefetch else None
        summed, k = k_loop(g, "k", b.neg(run), _c(0), shape.unroll, carried, ends, b_end, p.ldb, prefetch=ahead)
        if shape.unroll > 1:
            summed, _ = k_loop(g, "ktail", k, _c(0), 1, summed, ends, b_end, p.ldb)
        next_c = b.add(c, _c(1))
    elif shape.channels:   # the kernel row's every channel, unrolled
        b_stride = b.mul(_c(shape.channels), p.ldb)    # from a tap's row of B to the next column's
        plane, summed = b.select(inside, d["channel_stride"], _c(0)), carried
        if clipped:
            a_rows[0], plane = _clipped_line(g, a_rows[0], plane, left, len(output_pixels))
        for ch in range(shape.channels):
            rows = [g.at(row, b.mul(_c(ch), plane)) for row in a_rows]
            b_channel = g.at(b_line, b.mul(_c(ch), p.ldb))
            if shape.column_stride:
                summed = _fixed_stride_line(g, summed, rows[0], b_channel, b_stride)
            else:
                summed, _ = k_loop(g, f"kw{ch}", _c(0), width, shape.kernel_width, summed, rows, b_channel, b_stride,
                                    d["dil_w"])
        next_c = _c(shape.channels)
    else:
        summed, _ = k_loop(g, "kw", _c(0), width, shape.kernel_width or 1, carried, a_rows, b_line,
                            b.mul(d["cg"], p.ldb), d["dil_w"])
        next_c = b.add(c, _c(1))
    lines.leave(_next_position(b, kh, c, next_c, per_row) + list(zip(flat(carried), flat(summed))))
    return carried


def _clipped_line(g: GemmBuilder, start, plane, left, pixels: int) -> tuple:
    """A planar line's columns [left, left + (pixels - 1)·stride + KW) of every channel (`plane` apart from
    `start`) copied to a stack buffer, zeros for those outside [0, W): (the buffer, its channels' distance)."""
    b, d, shape = g.b, g.d, g.shape
    columns = (pixels - 1) * shape.column_stride + shape.kernel_width
    buffer, zeros = stack_buffer(b, shape.channels * columns), g.pointer("zeros")
    for j in range(columns):
        inside = b.icmp_unsigned("<", b.add(left, _c(j)), d["W"])
        for ch in range(shape.channels):
            source = b.select(inside, g.at(start, b.add(b.mul(_c(ch), plane), _c(j))), zeros)
            b.store(b.load(source, typ=F32), g.at(buffer, _c(ch * columns + j)))
    return pin(b, [buffer])[0], _c(columns)   # (read back: not the stored values kept in registers)


def _fixed_stride_line(g: GemmBuilder, acc: list, first, b_line, b_stride) -> list:
    """One channel's taps of a planar line of fixed width and column stride: row j of tap t at `first` + j·stride
    + t, from row j's first address, which passes `pin`, at an offset known when generating (unpinned, LLVM keeps
    row j's broadcast of tap t + stride for row j + 1's tap t, and spills them; a pinned address per tap instead
    cost three instructions per FMA and spilled general registers); each row's FMAs pass `pin` before the next
    row's broadcast (else a tap's broadcasts are loaded up front, and spilled)."""
    b, shape, acc = g.b, g.shape, list(acc)
    rows = pin(b, [g.at(first, _c(j * shape.column_stride)) for j in range(len(acc))], barrier=False)
    for t in range(shape.kernel_width):
        b_row = g.at(b_line, b.mul(_c(t), b_stride))
        bv = [g.load(g.at(b_row, _c(v * shape.lanes))) for v in range(len(acc[0]))]
        for j, row in enumerate(acc):
            a = g.splat(b.load(g.at(rows[j], _c(t)), typ=F32), F32)
            acc[j] = pin(b, [g.multiply_add(a, bv[v], value) for v, value in enumerate(row)])
    return acc


def _next_position(b: ir.IRBuilder, outer, inner, next_inner, count) -> list:
    """The carried (outer, inner) counters of a loop over pairs, as `CountedLoop.leave` takes them: `inner`
    moves to `next_inner`, wrapping to 0 and `outer` to the next at `count`."""
    wrap = b.icmp_signed("==", next_inner, count)
    return [(outer, b.add(outer, b.zext(wrap, I64))), (inner, b.select(wrap, _c(0), next_inner))]


def one_row(g: GemmBuilder, output_pixels: list):
    """Whether a block of consecutive output pixels lies in one output row."""
    return g.b.icmp_signed("<", g.b.add(output_pixels[0][2], _c(len(output_pixels) - 1)), g.d["OW"])


def interior(g: GemmBuilder, output_pixels: list):
    """Whether a block of consecutive output pixels lies in one output row with every tap of its windows
    inside the image's columns."""
    b, d = g.b, g.d
    rows = len(output_pixels)
    x = output_pixels[0][2]
    left = b.sub(b.mul(x, d["stride_w"]), d["pad_l"])
    right = b.add(b.add(left, b.mul(_c(rows - 1), d["stride_w"])), b.mul(b.sub(d["KW"], _c(1)), d["dil_w"]))
    columns = b.and_(b.icmp_signed(">=", left, _c(0)), b.icmp_signed("<", right, d["W"]))
    return b.and_(one_row(g, output_pixels), columns)
