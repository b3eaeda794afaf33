"""A strided copy kernel: dst = src seen through any strides — the data movement of Transpose, Slice and
Expand, which NumPy expresses as views, and of a Concat into its output's slices.

Shapes are collapsed to 4 dims by the caller. A work item is one innermost row (`KernelFunction` ABI,
so the row range splits over the native pool): rows whose source is contiguous copy vector by vector
(`_dense_row`), the others element by element.

- ptrs: src, dst
- dims: n0, n1, n2, n3, s0, s1, s2, s3 (source strides in elements), d (the destination's rows lie d
  elements apart: n3 for a dense destination, more for a slice of a wider one)
"""
from __future__ import annotations

from llvmlite import ir

from .counted_loop import I64, CountedLoop, i64 as _c


def _copy_function(name: str):
    """A module with kernel `name` (`KernelFunction` ABI) begun: (module, function, builder at its entry,
    (src, dst) loaded from ptrs, (dims, begin, end))."""
    module = ir.Module(name)
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64, I64, ptr]), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs, dims, begin, end, _ = fn.args
    src, dst = (b.load(b.gep(ptrs, [_c(i)], source_etype=ptr), typ=ptr) for i in range(2))
    return module, fn, b, (src, dst), (dims, begin, end)


def _copy_vector(b: ir.IRBuilder, vec, elem, src_row, dst_row, at) -> None:
    value = b.load(b.gep(src_row, [at], source_etype=elem), typ=vec, align=1)
    b.store(value, b.gep(dst_row, [at], source_etype=elem), align=1)


def _dense_row(b: ir.IRBuilder, elem, element_bytes: int, src_row, dst_row, n) -> None:
    """Copy a contiguous row of `n` elements: 64-byte vectors, the last one ending at the row's end
    (overlapping the one before: no lane masks, which AVX2 executes as slow vmaskmov); a row shorter than
    64 bytes as two overlapping vectors of the widest size it holds (32, 16 or 8 bytes), and element by
    element below that."""
    fn = b.function
    done = fn.append_basic_block("row.copied")
    for size in (64, 32, 16, 8):
        lanes = size // element_bytes
        if lanes < 2:
            break
        vec = ir.VectorType(elem, lanes)
        fits, shorter = fn.append_basic_block(f"v{size}"), fn.append_basic_block(f"below{size}")
        b.cbranch(b.icmp_signed(">=", n, _c(lanes)), fits, shorter)
        b.position_at_end(fits)
        last = b.sub(n, _c(lanes))
        if size == 64:
            cols = CountedLoop(b, "vcol", _c(0), last, lanes)
            cols.enter()
            _copy_vector(b, vec, elem, src_row, dst_row, cols.index)
            cols.leave()
        else:
            _copy_vector(b, vec, elem, src_row, dst_row, _c(0))
        _copy_vector(b, vec, elem, src_row, dst_row, last)
        b.branch(done)
        b.position_at_end(shorter)
    cols = CountedLoop(b, "col", _c(0), n, 1)
    cols.enter()
    _copy_vector(b, elem, elem, src_row, dst_row, cols.index)
    cols.leave()
    b.branch(done)
    b.position_at_end(done)


def copy_module(name: str, element_bytes: int) -> ir.Module:
    """The module defining kernel `name`, copying elements of `element_bytes` bytes."""
    elem = ir.IntType(8 * element_bytes)
    module, fn, b, (src, dst), (dims, begin, end) = _copy_function(name)
    n0, n1, n2, n3, s0, s1, s2, s3, d = (b.load(b.gep(dims, [_c(i)], source_etype=I64), typ=I64) for i in range(9))
    contiguous = b.icmp_signed("==", s3, _c(1))

    # the row's indices (i0, i1, i2): divided out of `begin` once, then stepped like an odometer
    first = (b.sdiv(begin, b.mul(n1, n2)), b.srem(b.sdiv(begin, n2), n1), b.srem(begin, n2))
    rows = CountedLoop(b, "row", begin, end, 1)
    i0, i1, i2 = (rows.phi(I64, v) for v in first)
    rows.enter()
    start = b.add(b.add(b.mul(i0, s0), b.mul(i1, s1)), b.mul(i2, s2))
    src_row = b.gep(src, [start], source_etype=elem)
    dst_row = b.gep(dst, [b.mul(rows.index, d)], source_etype=elem)
    dense, strided, joined = (fn.append_basic_block(n) for n in ("dense", "strided", "joined"))
    b.cbranch(contiguous, dense, strided)

    b.position_at_end(dense)
    _dense_row(b, elem, element_bytes, src_row, dst_row, n3)
    b.branch(joined)

    b.position_at_end(strided)
    cols = CountedLoop(b, "col", _c(0), n3, 1)
    cols.enter()
    value = b.load(b.gep(src_row, [b.mul(cols.index, s3)], source_etype=elem), typ=elem)
    b.store(value, b.gep(dst_row, [cols.index], source_etype=elem))
    cols.leave()
    b.branch(joined)
    b.position_at_end(joined)
    next2 = b.add(i2, _c(1))
    wrap2 = b.icmp_signed("==", next2, n2)
    next1 = b.select(wrap2, b.add(i1, _c(1)), i1)
    wrap1 = b.icmp_signed("==", next1, n1)
    rows.leave([(i2, b.select(wrap2, _c(0), next2)), (i1, b.select(wrap1, _c(0), next1)),
                (i0, b.select(wrap1, b.add(i0, _c(1)), i0))])
    b.ret_void()
    return module


def block_transpose_module(name: str, rows: int, cols: int) -> ir.Module:
    """The module defining kernel `name`: each block of `rows` × `cols` f32 (blocks contiguous, one after
    another) transposed to `cols` × `rows`, as one vector load, one shuffle and one store per block, for
    blocks [begin, end) (`KernelFunction` ABI; ptrs: src, dst). This is the copy of a Transpose of the
    last two axes of small sizes — a channel shuffle on channels-last tensors — which the strided kernel
    does element by element."""
    size = rows * cols
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, size)
    module, fn, b, (src, dst), (_, begin, end) = _copy_function(name)
    order = ir.Constant(ir.VectorType(ir.IntType(32), size), [r * cols + c for c in range(cols) for r in range(rows)])
    blocks = CountedLoop(b, "block", begin, end, 1)
    blocks.enter()
    offset = b.mul(blocks.index, _c(size))
    block = b.load(b.gep(src, [offset], source_etype=f32), typ=vec, align=4)
    b.store(b.shuffle_vector(block, ir.Constant(vec, None), order), b.gep(dst, [offset], source_etype=f32), align=4)
    blocks.leave()
    b.ret_void()
    return module
