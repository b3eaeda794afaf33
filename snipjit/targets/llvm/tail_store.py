"""Storing a tail: the lanes of a vector below a count, without a masked store where the level's are slow.

A kernel's last, partial vector of a row (GEMM panels past N, channels past C) is stored under a mask of the
lanes below some count. AVX-512 stores under a mask register as fast as a plain store; AVX2's masked store
(vmaskmov) costs about ten plain ones on AMD Zen 3 (4.2 ns against 0.42 ns, one thread), and SSE has none
(LLVM expands one into a branch per lane). There (`IsaLevel.cheap_masked_memory` false) the count — the
mask's bits counted — splits the store into pieces of halving width: the first half of the lanes if the
count's bit for half the lanes is set, then a quarter from where that left off, and so on down to one lane.
A tail's count is the same for a whole panel or row, so each branch goes the same way every time.
"""
from __future__ import annotations

from llvmlite import ir

from ..isa import LEVELS
from .counted_loop import I64, pin, when

I32 = ir.IntType(32)


def cheap_masked_stores(lanes: int) -> bool:
    """Whether the ISA level whose f32 vectors have `lanes` lanes stores under a mask as fast as without (a
    width no level has — a kernel compiled narrower than its level — takes the pieces: correct anywhere)."""
    return any(level.cheap_masked_memory for level in LEVELS if level.f32_lanes == lanes)


def store_tail(b: ir.IRBuilder, values: list, addresses: list, mask, masked_store: ir.Function,
               align: int = 4) -> None:
    """Store the lanes `mask` selects of each of `values` at its address (elements of the values' type): a GEMM
    block's rows of one column of vectors share their mask. `mask` must select the lanes below a count (0 to
    all of them): each store writes the first popcount(mask) lanes."""
    lanes = values[0].type.count
    if cheap_masked_stores(lanes):
        for value, address in zip(values, addresses):
            b.call(masked_store, [value, address, ir.Constant(I32, align), mask])
        return
    # (the count is worked out here, where it is stored: hoisted out of the loops around the store, a count and its
    # bits would hold general registers through a GEMM's K loop, which then spills)
    count = _count(b, mask, lanes)
    fn = b.function
    whole, part, done = (fn.append_basic_block(n) for n in ("tail.whole", "tail.part", "tail.done"))
    b.cbranch(b.icmp_signed("==", count, ir.Constant(I64, lanes)), whole, part)
    b.position_at_end(whole)
    for value, address in zip(values, addresses):
        b.store(value, address, align=align)
    b.branch(done)
    b.position_at_end(part)
    pieces, offset, width = list(values), ir.Constant(I64, 0), lanes // 2
    while width:
        bit = b.and_(count, ir.Constant(I64, width))
        taken = b.icmp_signed("!=", bit, ir.Constant(I64, 0))
        low = [_lanes(b, piece, 0, width) for piece in pieces]
        at = [b.gep(address, [offset], source_etype=values[0].type.element) for address in addresses]
        when(b, taken, lambda low=low, at=at: [b.store(v, a, align=align) for v, a in zip(low, at)], "tail.piece")
        if width > 1:   # what is left starts past the piece if it was stored
            pieces = [b.select(taken, _lanes(b, piece, width, width), part) for piece, part in zip(pieces, low)]
            offset = b.add(offset, bit)
        width //= 2
    b.branch(done)
    b.position_at_end(done)


def _count(b: ir.IRBuilder, mask, lanes: int):
    """The lanes a prefix mask selects (the mask passes a barrier as the vector of lanes it is)."""
    bits = ir.IntType(lanes)
    name = f"llvm.ctpop.i{lanes}"
    ctpop = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(bits, [bits]), name)
    lane_mask = pin(b, [b.sext(mask, ir.VectorType(I32, lanes))])[0]
    selected = b.bitcast(b.icmp_signed("<", lane_mask, ir.Constant(lane_mask.type, None)), bits)
    return b.zext(b.call(ctpop, [selected]), I64)


def _lanes(b: ir.IRBuilder, vector, start: int, width: int):
    """Lanes [start, start + width) of `vector`: a narrower vector, or a scalar for one lane."""
    if width == 1:
        return b.extract_element(vector, ir.Constant(I32, start))
    return b.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(I32, width), list(range(start, start + width))))


__all__ = ["cheap_masked_stores", "store_tail"]
