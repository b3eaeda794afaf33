"""The attention microkernel: O = softmax(masks(Q·Kᵀ·scale))·V, a block of query rows at a time, the
block of scores never leaving the thread's scratchpad (the Snippets MHA pattern: two block products
around a fused softmax). Both products are the GEMM generator's K loop (`gemm_builder.k_loop`) on register
blocks of its kind; nothing here multiplies matrices another way.

A work item is a chunk of query rows of one (batch entry, head); the kernel follows the `KernelFunction`
ABI of the native pool: `fn(ptrs, dims, begin, end, scratch)` computes items [begin, end). The keys are
taken `kb` at a time (all of them in one block for short sequences; for long ones an online softmax over
blocks keeps the scratchpad small), per key block:
1. The block's Kᵀ, times the scale, is packed into the scratchpad as panels of NR keys ([D, NR] each,
   zeros past the block), so the first product streams it like a packed GEMM operand. K is read through
   its strides: the head split (a Reshape and Transpose of the projection) costs no copy.
2. For each block of `mr` query rows of the chunk (a last short block repeats its last row): the scores
   [mr, kb] = Q rows · packed Kᵀ, panel by panel (the K loop runs over the head size D).
3. As the scores are stored: with `capped`, the soft cap s = cap · tanh(s) (Gemma 2's; the scale in the
   packed Kᵀ holds its 1 / cap); the masks, in the block's order — an additive mask (+ mask), a boolean one
   (where(keep, s, fill)), both broadcast through strides — then, `causal`, -inf for keys past the row's
   position (key j > row + Sk - Sq); the maximum per row. A causal row block computes only the keys its
   last row sees.
   With `trimmed` (one additive mask), a row block first scans its mask rows and computes only up to
   the last key some row needs (masked above -1e30 or NaN, in a row with a key at -1e20 or more; a row
   without one needs all): the keys past weigh exp(score - maximum) = 0 exactly for finite scores
   under 1e29 (capped ones are), and are not read (GPT-2's causal mask, BERT's padded keys).
4. Per row: the new maximum m' (with the row's maximum so far m), exp(s - m') in place and its sum; the
   row's accumulated output and sum are rescaled by exp(m - m') and P · V (the K loop over the block's
   keys; B is V's rows in place) and the sum added.
After the last key block, each output row is its accumulation over its sum, stored through O's strides:
straight into the merged-heads layout when the output transpose was absorbed. A row of -inf scores
(every key masked) gives NaN as Softmax does, or zeros when `safe`.

ptrs: see `PTRS` (mask, keep: null when there is none; params: the scale, the fill of a boolean mask, the cap).
dims: see `DIMS`, strides in elements: Q, V and O have unit stride along the head size, K any strides
(k_s between keys, k_d along the head size). The masks have unit stride along the keys (keep: bytes, 0 is
false). Dv is a multiple of the output block's width. `group` query heads share a head of K and V
(grouped-query attention; 1: each its own). kb is a multiple of NR.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from . import vmath
from .counted_loop import I64, CountedLoop, i64 as _c, memory_barrier
from .gemm_builder import GemmBuilder, k_loop
from .vector_builder import F32, I32

DIMS = ("B", "H", "Sq", "Sk", "D", "Dv", "q_b", "q_h", "q_s", "k_b", "k_h", "k_s", "k_d", "v_b", "v_h", "v_s",
        "o_b", "o_h", "o_s", "m_b", "m_h", "m_s", "m2_b", "m2_h", "m2_s", "keep_b", "keep_h", "keep_s", "group",
        "chunks", "chunk_rows", "kb")
PTRS = ("Q", "K", "V", "O", "mask", "params", "keep", "mask2")
I8 = ir.IntType(8)


@dataclass(frozen=True)
class AttentionKernel:
    """The shape of one generated attention kernel."""
    mr: int            # query rows per block
    score_vectors: int  # vectors per row of the first product's block (NR keys = score_vectors · lanes)
    out_vectors: int   # vectors per row of the second product's block (a divisor of Dv / lanes)
    lanes: int
    unroll: int
    fused: bool = True
    masked: int = 0        # additive masks read (0, 1 or 2: `mask`, then `mask2`)
    kept: bool = False     # a boolean mask is read: where(keep, s, fill) ...
    inverted: bool = False   # ... where(keep, fill, s)
    kept_first: bool = False   # the boolean mask comes before the additive one
    causal: bool = False
    safe: bool = False     # a row of -inf scores gives zeros (ONNX Attention), not NaN
    trimmed: bool = False  # (one additive mask) keys masked away for every row of a block are skipped
    capped: bool = False   # a soft cap before the masks: s = cap · tanh(s)

    @property
    def nr(self) -> int:
        return self.score_vectors * self.lanes

    @property
    def name(self) -> str:
        keep = ("_unkept" if self.inverted else "_kept") + ("_first" if self.kept_first else "") if self.kept else ""
        return (f"snipjit_attention_{self.mr}x{self.score_vectors}x{self.out_vectors}x{self.lanes}_u{self.unroll}"
                f"{'' if self.fused else '_mul_add'}{'_mask' * self.masked}{keep}"
                f"{'_causal' if self.causal else ''}{'_safe' if self.safe else ''}{'_trimmed' if self.trimmed else ''}"
                f"{'_capped' if self.capped else ''}")

    def scratch_floats(self, kb: int, d: int, dv: int, chunk_rows: int) -> int:
        """Floats of scratchpad one thread needs for key blocks of kb keys (a multiple of NR): the block's
        packed Kᵀ, its scores, each row's maximum vector, and the chunk's running output rows, maxima and
        sums."""
        return kb * d + self.mr * kb + self.mr * self.lanes + chunk_rows * (dv + 2)


def _transposed(g: GemmBuilder, rows: list) -> list:
    """The lanes × lanes block `rows` transposed: one exchange stage per bit of the lane index (in stage w,
    rows r and r^w swap the lanes whose bit w differs from r's), log2(lanes) · lanes shuffles."""
    b, lanes, w = g.b, g.shape.lanes, 1
    while w < lanes:
        swapped = []
        for r, row in enumerate(rows):
            keep = r & w
            picks = [c if (c & w) == keep else lanes + (c ^ w) for c in range(lanes)]
            swapped.append(b.shuffle_vector(row, rows[r ^ w], ir.Constant(ir.VectorType(I32, lanes), picks)))
        rows, w = swapped, w * 2
    return rows


def _pack_keys(g: GemmBuilder, k_base, packed, scale, count) -> None:
    """Keys [0, count) of `k_base` (the key block's first), transposed and times the scale, into `packed`:
    key j, depth t at (j // NR)·D·NR + t·NR + j % NR; zeros up to the next whole panel. Keys with
    contiguous depths are moved as lanes × lanes blocks transposed in registers; the last keys (and any
    other layout) one element at a time."""
    b, d, nr, lanes = g.b, g.d, g.shape.nr, g.shape.lanes
    panel_floats = b.mul(d["D"], _c(nr))

    def spot(j, t):   # where key j, depth t goes
        return g.at(packed, b.add(b.add(b.mul(b.sdiv(j, _c(nr)), panel_floats), b.srem(j, _c(nr))), b.mul(t, _c(nr))))

    blocked = b.and_(b.icmp_signed("==", d["k_d"], _c(1)), b.icmp_signed("==", b.srem(d["D"], _c(lanes)), _c(0)))
    whole = b.mul(b.sdiv(count, _c(lanes)), _c(lanes))

    def by_blocks():
        factor = g.splat(scale, F32)
        keys = CountedLoop(b, "pack.keys", _c(0), whole, lanes)
        keys.enter()
        depths = CountedLoop(b, "pack.depths", _c(0), d["D"], lanes)
        depths.enter()
        source = g.at(k_base, b.add(b.mul(keys.index, d["k_s"]), depths.index))
        rows = [b.fmul(g.load(g.at(source, b.mul(_c(i), d["k_s"]))), factor) for i in range(lanes)]
        for i, column in enumerate(_transposed(g, rows)):
            g.store(column, spot(keys.index, b.add(depths.index, _c(i))))
        depths.leave()
        keys.leave()
        return [whole]

    first = g.branches(blocked, by_blocks, lambda: [_c(0)])[0]
    padded = b.mul(b.sdiv(b.add(count, _c(nr - 1)), _c(nr)), _c(nr))
    keys = CountedLoop(b, "pack.key", first, padded, 1)
    keys.enter()
    j = keys.index
    inside = b.icmp_signed("<", j, count)
    source = g.at(k_base, b.mul(b.select(inside, j, _c(0)), d["k_s"]))
    depth = CountedLoop(b, "pack.depth", _c(0), d["D"], 1)
    depth.enter()
    t = depth.index
    value = b.fmul(b.load(g.at(source, b.mul(t, d["k_d"])), typ=F32), scale)
    b.store(b.select(inside, value, ir.Constant(F32, 0.0)), spot(j, t))
    depth.leave()
    keys.leave()


def _maximum(g: GemmBuilder, x, y):
    return g.b.select(g.b.fcmp_ordered(">", y, x), y, x)


@dataclass
class _Block:
    """What the stores of a block of query rows need: its rows, the rows of its masks, the keys it sees."""
    rows: list
    mask_rows: list   # per additive mask, its rows (at the key block's first key)
    keep_rows: list | None
    k0: ir.Value       # the key block's first key
    count: ir.Value    # its keys [k0, k0 + count) are computed (fewer for a causal block's last ones)
    fill: ir.Value     # a boolean mask's fill value
    cap: ir.Value | None   # the soft cap (`capped`)


def _masked(g: GemmBuilder, block: _Block, j: int, at, inside, value):
    """The score `value` of row j at keys [at, at + lanes) after the masks (`inside`: the lanes < Sk)."""
    b, shape, lanes = g.b, g.shape, g.shape.lanes

    def adder(rows):
        def add(x):   # (masked loads: a mask row may end inside this vector)
            return b.fadd(x, g.load(g.at(rows[j], at), inside))
        return add

    def keep(x):
        flags = b.call(g.masked_load_i8, [b.gep(block.keep_rows[j], [at], source_etype=I8), ir.Constant(I32, 1),
                                          inside, ir.Constant(ir.VectorType(I8, lanes), None)])
        kept = b.icmp_unsigned("==" if shape.inverted else "!=", flags, ir.Constant(ir.VectorType(I8, lanes), None))
        return b.select(kept, x, g.splat(block.fill, F32))

    adds, keeps = [adder(rows) for rows in block.mask_rows], [keep] if shape.kept else []
    for step in (keeps + adds if shape.kept_first else adds + keeps):
        value = step(value)
    return value


def _scores(g: GemmBuilder, q_rows, block: _Block, packed, scores, padded, maxima) -> None:
    """The scores block [mr, padded] = Q rows · packed Kᵀ (the key block), masked, one NR-key panel at a
    time, up to the block's count; keys past it (or a causal row's position) score -inf. Each row's
    maximum (a vector) goes to `maxima`."""
    b, d, shape, lanes = g.b, g.d, g.shape, g.shape.lanes
    minus_inf = g.splat(ir.Constant(F32, float("-inf")), F32)
    for j in range(len(q_rows)):
        g.store(minus_inf, g.at(maxima, _c(j * lanes)))
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    cap = g.splat(block.cap, F32) if shape.capped else None
    panels = CountedLoop(b, "qk.panel", _c(0), b.sdiv(b.add(block.count, _c(shape.nr - 1)), _c(shape.nr)), 1)
    panels.enter()
    panel = g.at(packed, b.mul(panels.index, b.mul(d["D"], _c(shape.nr))))
    acc = [[g.zero] * shape.score_vectors for _ in q_rows]
    acc, k = k_loop(g, "qk", _c(0), d["D"], shape.unroll, acc, q_rows, panel, _c(shape.nr))
    if shape.unroll > 1:
        acc, _ = k_loop(g, "qk.tail", k, d["D"], 1, acc, q_rows, panel, _c(shape.nr))
    column = b.mul(panels.index, _c(shape.nr))
    starts = [b.add(column, _c(v * lanes)) for v in range(shape.score_vectors)]
    inside = [b.icmp_signed("<", lane_ids, g.splat(b.sub(block.count, at), I64)) for at in starts]
    rows_out = [g.at(scores, b.add(b.mul(_c(j), padded), column)) for j in range(len(acc))]
    if shape.capped:   # the products stored first: tanh beside the live accumulators spilled them (1.1× slower)
        for out, row in zip(rows_out, acc):
            for v, value in enumerate(row):
                g.store(value, g.at(out, _c(v * lanes)))
        memory_barrier(b)
    for j, row in enumerate(acc):
        out = rows_out[j]
        largest = g.load(g.at(maxima, _c(j * lanes)))
        if shape.causal:   # (the keys this row sees: key <= row + Sk - Sq, counted from the block's first)
            seen = b.sub(b.add(b.add(block.rows[j], _c(1)), b.sub(d["Sk"], d["Sq"])), block.k0)
        for v, value in enumerate(row):
            if shape.capped:   # (the product, read back after the barrier)
                product = g.load(g.at(out, _c(v * lanes)))
                value = b.fmul(vmath.emit(b, "tanh", product, fused_multiply_add=shape.fused), cap)
            value = _masked(g, block, j, starts[v], inside[v], value)
            valid = inside[v]
            if shape.causal:
                valid = b.and_(valid, b.icmp_signed("<", lane_ids, g.splat(b.sub(seen, starts[v]), I64)))
            value = b.select(valid, value, minus_inf)
            g.store(value, g.at(out, _c(v * lanes)))
            largest = _maximum(g, largest, value)
        g.store(largest, g.at(maxima, _c(j * lanes)))
    panels.leave()


def _tree(g: GemmBuilder, vector, combine):
    """All lanes of `vector` combined pairwise in log2(lanes) steps (an ordered reduction would chain
    `lanes` dependent additions per row); lane 0 of the result."""
    b, lanes = g.b, g.shape.lanes
    width = lanes
    while width > 1:
        width //= 2
        picks = [width + i if i < width else i for i in range(lanes)]
        upper = b.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(I32, lanes), picks))
        vector = combine(vector, upper)
    return b.extract_element(vector, ir.Constant(I32, 0))


def _softmax_row(g: GemmBuilder, row, top, count):
    """exp(score - top) over the row's `count` scores, in place (past them: 0); returns the sum."""
    b, lanes = g.b, g.shape.lanes
    vectors = b.sdiv(b.add(count, _c(lanes - 1)), _c(lanes))
    top = g.splat(top, F32)
    loop = CountedLoop(b, "softmax.exp", _c(0), vectors, 1)
    total = loop.phi(g.vec, g.zero)
    loop.enter()
    at = b.mul(loop.index, _c(lanes))
    e = vmath.emit(b, "exp", b.fsub(g.load(g.at(row, at)), top), fused_multiply_add=g.shape.fused)
    g.store(e, g.at(row, at))
    loop.leave([(total, b.fadd(total, e))])
    return _tree(g, total, b.fadd)


SKIPPED_AT_MOST = -1e30   # a key whose mask is this low in a row with a mask this high somewhere ...
SEEN_AT_LEAST = -1e20     # ... scores below the row's maximum by more than 1e29: its exponential is 0


def _needed_end(g: GemmBuilder, row):
    """The end of the keys a row of the mask (at key 0) needs: one past its last key masked above
    SKIPPED_AT_MOST (or NaN) when the row has a key masked at least SEEN_AT_LEAST, else all Sk keys. The
    keys past it add exp(score - maximum) = 0 exactly, for finite scores under 1e29."""
    b, d, lanes = g.b, g.d, g.shape.lanes
    v32 = ir.VectorType(I32, lanes)
    lane_ids = ir.Constant(v32, list(range(lanes)))
    lane_ids64 = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    low, high = (g.splat(ir.Constant(F32, x), F32) for x in (SKIPPED_AT_MOST, SEEN_AT_LEAST))
    loop = CountedLoop(b, "trim", _c(0), d["Sk"], lanes)
    last = loop.phi(v32, ir.Constant(v32, [-1] * lanes))
    seen = loop.phi(g.mask_t, ir.Constant(g.mask_t, [0] * lanes))
    loop.enter()
    inside = b.icmp_signed("<", lane_ids64, g.splat(b.sub(d["Sk"], loop.index), I64))
    m = g.load(g.at(row, loop.index), inside)
    needed = b.and_(b.fcmp_unordered(">", m, low), inside)   # (NaN: needed)
    index = b.add(lane_ids, g.splat(b.trunc(loop.index, I32), I32))
    loop.leave([(last, b.select(needed, index, last)), (seen, b.or_(seen, b.and_(b.fcmp_ordered(">=", m, high),
                                                                                   inside)))])
    top = _tree(g, last, lambda x, y: b.select(b.icmp_signed(">", x, y), x, y))
    any_high = b.icmp_unsigned("!=", b.bitcast(seen, ir.IntType(lanes)), ir.Constant(ir.IntType(lanes), 0))
    return b.select(any_high, b.add(b.sext(top, I64), _c(1)), d["Sk"])


def _scalar_exp(g: GemmBuilder, x):
    """exp of a scalar, through the vector function."""
    vector = vmath.emit(g.b, "exp", g.splat(x, F32), fused_multiply_add=g.shape.fused)
    return g.b.extract_element(vector, ir.Constant(I32, 0))


@dataclass
class _Item:
    """A work item's pointers: Q, V and the output of its (batch entry, head), its rows' running state."""
    q_base: ir.Value
    v_base: ir.Value
    mask_bases: list
    keep_base: ir.Value | None
    first_row: ir.Value
    rows_end: ir.Value
    sums: ir.Value      # the chunk's accumulated output rows [rows, Dv], then each row's maximum and sum
    maxima: ir.Value
    totals: ir.Value


def _row_block(g: GemmBuilder, item: _Item, start, k0, count, packed, scores, padded, row_max, fill, cap) -> None:
    """One block of query rows against one block of keys (online softmax): the scores, the new row
    maxima, exp, and the chunk's output rows and sums rescaled and accumulated."""
    b, d, shape, lanes = g.b, g.d, g.shape, g.shape.lanes
    last = b.sub(item.rows_end, _c(1))
    rows = [b.select(b.icmp_signed("<", r, item.rows_end), r, last)
            for r in (b.add(start, _c(j)) for j in range(shape.mr))]
    if shape.causal:   # the keys of this block the block's last row sees
        seen = b.sub(b.add(b.add(rows[-1], _c(1)), b.sub(d["Sk"], d["Sq"])), k0)
        count = b.select(b.icmp_signed("<", seen, count), seen, count)
    if shape.trimmed:   # (the keys of this block some row of it needs)
        end = _c(0)
        for r in rows:
            row_end = _needed_end(g, g.at(item.mask_bases[0], b.mul(r, d["m_s"])))
            end = b.select(b.icmp_signed(">", row_end, end), row_end, end)
        needed = b.sub(end, k0)
        count = b.select(b.icmp_signed("<", needed, count), needed, count)

    def compute():
        block = _Block(rows, [[g.at(m, b.add(b.mul(r, d[prefix + "_s"]), k0)) for r in rows]
                              for m, prefix in zip(item.mask_bases, ("m", "m2"))],
                       None if item.keep_base is None else
                       [b.gep(item.keep_base, [b.add(b.mul(r, d["keep_s"]), k0)], source_etype=I8) for r in rows],
                       k0, count, fill, cap)
        _scores(g, [g.at(item.q_base, b.mul(r, d["q_s"])) for r in rows], block, packed, scores, padded, row_max)
        p_rows = [g.at(scores, b.mul(_c(j), padded)) for j in range(shape.mr)]
        # (every row's old state is read before any is written: the repeated last rows write the same values)
        old = [(b.load(g.at(item.maxima, r), typ=F32), b.load(g.at(item.totals, r), typ=F32)) for r in rows]
        factors, new_maxima, new_totals = [], [], []
        for j, (old_max, old_total) in enumerate(old):
            top = _maximum(g, old_max, _tree(g, g.load(g.at(row_max, _c(j * lanes))), lambda x, y: _maximum(g, x, y)))
            # (a row whose keys so far all score -inf: exp(-inf - 0) = 0, not exp(-inf + inf) = NaN, so later blocks'
            # keys still count; a row of -inf scores then sums to 0, which the division makes NaN unless `safe`)
            shift = b.select(b.fcmp_ordered("==", top, ir.Constant(F32, float("-inf"))), ir.Constant(F32, 0.0), top)
            same = b.fcmp_ordered("==", old_max, top)   # (also both -inf: nothing accumulated yet)
            factor = b.select(same, ir.Constant(F32, 1.0), _scalar_exp(g, b.fsub(old_max, shift)))
            total = _softmax_row(g, p_rows[j], shift, count)
            factors.append(factor)
            new_maxima.append(top)
            new_totals.append(b.fadd(b.fmul(factor, old_total), total))
        width = shape.out_vectors * lanes
        panels = CountedLoop(b, "pv.panel", _c(0), b.sdiv(d["Dv"], _c(width)), 1)
        panels.enter()
        column = b.mul(panels.index, _c(width))
        v_panel = g.at(item.v_base, b.add(b.mul(k0, d["v_s"]), column))
        sum_rows = [g.at(item.sums, b.add(b.mul(b.sub(r, item.first_row), d["Dv"]), column)) for r in rows]
        acc = [[b.fmul(g.splat(factors[j], F32), g.load(g.at(sum_rows[j], _c(v * lanes))))
                for v in range(shape.out_vectors)] for j in range(shape.mr)]
        acc, k = k_loop(g, "pv", _c(0), count, shape.unroll, acc, p_rows, v_panel, d["v_s"])
        if shape.unroll > 1:
            acc, _ = k_loop(g, "pv.tail", k, count, 1, acc, p_rows, v_panel, d["v_s"])
        for j in range(shape.mr):
            for v, value in enumerate(acc[j]):
                g.store(value, g.at(sum_rows[j], _c(v * lanes)))
        panels.leave()
        for r, top, total in zip(rows, new_maxima, new_totals):
            b.store(top, g.at(item.maxima, r))
            b.store(total, g.at(item.totals, r))
        return []

    g.branches(b.icmp_signed(">", count, _c(0)), compute, lambda: [])   # (a causal block may see none)


def attention_module(shape: AttentionKernel) -> ir.Module:
    """The module defining kernel `shape.name`."""
    g = GemmBuilder(shape, DIMS, PTRS)   # (the builder needs of a shape its lanes, name and FMA)
    b, d, lanes = g.b, g.d, shape.lanes
    module = g.module
    g.masked_load_i8 = ir.Function(module, ir.FunctionType(ir.VectorType(I8, lanes), [
        ir.PointerType(), I32, g.mask_t, ir.VectorType(I8, lanes)]), f"llvm.masked.load.v{lanes}i8.p0")
    Q, K, V, O = (g.pointer(name) for name in PTRS[:4])
    params = g.pointer("params")
    scale, fill = (b.load(g.at(params, _c(i)), typ=F32) for i in (0, 1))
    cap = b.load(g.at(params, _c(2)), typ=F32) if shape.capped else None
    padded = d["kb"]   # (a key block: a multiple of NR)
    packed = g.scratch
    scores = g.at(packed, b.mul(padded, d["D"]))
    row_max = g.at(scores, b.mul(padded, _c(shape.mr)))
    sums = g.at(row_max, _c(shape.mr * lanes))
    maxima = g.at(sums, b.mul(d["chunk_rows"], d["Dv"]))
    totals = g.at(maxima, d["chunk_rows"])

    work = CountedLoop(b, "work", g.begin, g.end, 1)
    work.enter()
    per_batch = b.mul(d["H"], d["chunks"])
    batch, rest = b.sdiv(work.index, per_batch), b.srem(work.index, per_batch)
    head, chunk = b.sdiv(rest, d["chunks"]), b.srem(rest, d["chunks"])
    first_row = b.mul(chunk, d["chunk_rows"])
    chunk_end = b.add(first_row, d["chunk_rows"])
    rows_end = b.select(b.icmp_signed("<", chunk_end, d["Sq"]), chunk_end, d["Sq"])

    def base(pointer, prefix, h=head):
        return g.at(pointer, b.add(b.mul(batch, d[prefix + "_b"]), b.mul(h, d[prefix + "_h"])))

    shared = b.sdiv(head, d["group"])   # (grouped-query attention: a key/value head per group of heads)
    keep = g.pointer("keep") if shape.kept else None
    item = _Item(base(Q, "q"), base(V, "v", shared),
                 [base(g.pointer(name), prefix) for name, prefix in (("mask", "m"), ("mask2", "m2"))[:shape.masked]],
                 b.gep(keep, [b.add(b.mul(batch, d["keep_b"]), b.mul(head, d["keep_h"]))], source_etype=I8)
                 if shape.kept else None, first_row, rows_end, sums,   # (sums: by the row within the chunk;
                 g.at(maxima, b.sub(_c(0), first_row)), g.at(totals, b.sub(_c(0), first_row)))   # these by the row)

    minus_inf = ir.Constant(F32, float("-inf"))
    start = CountedLoop(b, "state", first_row, rows_end, 1)   # nothing accumulated yet
    start.enter()
    b.store(minus_inf, g.at(item.maxima, start.index))
    b.store(ir.Constant(F32, 0.0), g.at(item.totals, start.index))
    zeros = CountedLoop(b, "state.sums", _c(0), d["Dv"], lanes)
    zeros.enter()
    g.store(g.zero, g.at(g.at(sums, b.mul(b.sub(start.index, first_row), d["Dv"])), zeros.index))
    zeros.leave()
    start.leave()

    k_base = base(K, "k", shared)
    keys = CountedLoop(b, "keys", _c(0), d["Sk"], d["kb"])
    keys.enter()
    k0 = keys.index
    left = b.sub(d["Sk"], k0)
    count = b.select(b.icmp_signed("<", left, d["kb"]), left, d["kb"])
    _pack_keys(g, g.at(k_base, b.mul(k0, d["k_s"])), packed, scale, count)
    blocks = CountedLoop(b, "rows", first_row, rows_end, shape.mr)
    blocks.enter()
    _row_block(g, item, blocks.index, k0, count, packed, scores, padded, row_max, fill, cap)
    blocks.leave()
    keys.leave()

    o_base = base(O, "o")
    out_rows = CountedLoop(b, "out", first_row, rows_end, 1)   # the output rows: sums / totals
    out_rows.enter()
    r = out_rows.index
    total = b.load(g.at(item.totals, r), typ=F32)
    inverse = b.fdiv(ir.Constant(F32, 1.0), total)
    if shape.safe:   # (a row of zeros stays zeros)
        inverse = b.select(b.fcmp_ordered("==", total, ir.Constant(F32, 0.0)), ir.Constant(F32, 0.0), inverse)
    factor = g.splat(inverse, F32)
    source, target = g.at(sums, b.mul(b.sub(r, first_row), d["Dv"])), g.at(o_base, b.mul(r, d["o_s"]))
    columns = CountedLoop(b, "out.columns", _c(0), d["Dv"], lanes)
    columns.enter()
    g.store(b.fmul(g.load(g.at(source, columns.index)), factor), g.at(target, columns.index))
    columns.leave()
    out_rows.leave()
    work.leave()
    b.ret_void()
    return module


__all__ = ["AttentionKernel", "DIMS", "PTRS", "attention_module"]
