"""Matrix products on snipjit's generated GEMM kernel (`targets.llvm.gemm`), run on the native pool.

`matmul(a, b, out, bias)` takes the layouts the kernel reads directly — A with unit stride along K,
B with unit stride along N, batches of equal shape or a 2-D operand shared by the batch, a C-contiguous
output — and returns False for anything else, so the caller falls back to NumPy's BLAS. The
microkernel (rows × vectors of the register block, its unrolling, FMA or not) follows the ISA level
code is generated for (`targets.isa`, SNIPJIT_ISA): of the level's two register blocks, the one padding
the product's N least; it is compiled on first use, once per process and level. A constant B (weights)
is packed once with `pack`: panel after panel, each K × NR contiguous and zero-padded past N, so the
kernel streams it without masks instead of striding across pages (which defeats the hardware
prefetchers once the weights no longer fit in cache). Work items (panel × chunk of rows, per batch
entry) split both M and N over the native pool's threads.
"""
from __future__ import annotations

import ctypes
import functools
import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ...targets.llvm.gemm import MicroKernel

from ...memory.solver import aligned_empty
from ..parallel.native_threads import get_native_pool, native_call, runner, scratchpads
from ..caches.object_cache import NativeJob
from .kernel_arguments import dim_array, pointer_array

PARALLEL_MIN_MULTIPLY_ADDS = 1 << 18   # smaller products run on the calling thread
MIN_ROWS = 4                           # fewer rows of A go to NumPy: most of a register block idles
PAGE_BYTES = 4096
COPY_MIN_PAGES = 640                   # a row-major B panel spread over this many pages is copied first
PREFETCH_MAX_BLOCKS = 32               # work items of at most this many row blocks ask for B ahead
PREFETCH_MAX_LINES = 8                 # ... at most this many lines per K loop iteration
SMALL_ITEM_ROWS = 64                   # work items of at most this many rows (7x7 maps: 49) ...
SMALL_ITEM_DEPTH = 1024                # ... take K blocks of at most this depth (see `GemmKernel.k_block`)
RATE_DEPTH = 128                       # K of the product `block_rates` times (mobile networks' 1x1s: 16 to 960)
RATE_ROUNDS = 9
RATE_SECONDS = 0.003                   # each block's time per round
BALANCE_GAIN = 0.95                    # work items are rebalanced when the busiest thread's share shrinks this much
ITEMS_PER_THREAD = 4                   # work items (panel × row chunk) wanted per thread
MIN_ITEM_MULTIPLY_ADDS = 1 << 20       # ... unless they would be smaller than this: each costs a new start of
                                       # the A and C streams; fewer, larger items idle a thread that wakes late
                                       # (Zen 3 AVX2, 2 threads, items 2-6 -> 8-12: a first layer's 3x3 1.34x,
                                       # RegNet's grouped 3x3 and 1x1 1.08-1.09x faster; 3136x64x64 4 -> 8
                                       # items 1.03x; at 1 << 18: no further gain)


# the widest planar kernel row unrolled (kernels wider than first layers' 7 or 11 loop over their taps)
UNROLLED_WIDTH = 11


@dataclass(frozen=True)
class GemmKernel:
    """One microkernel for one ISA level; its code is compiled on first use (packing weights at compile
    time only needs the shape of the block)."""
    shape: MicroKernel
    cpu: str         # the LLVM CPU and features it is compiled for (`jit.host()` when chosen)
    features: str
    l2: int          # bytes of L2 cache, for the K blocking

    @property
    def mr(self) -> int:
        return self.shape.mr

    @property
    def nr(self) -> int:
        return self.shape.nr

    @property
    def job(self) -> NativeJob:
        return NativeJob("gemm:gemm_module", self.shape, self.cpu, self.features)

    @property
    def address(self) -> int:
        return _compiled(self)[0]

    @property
    def fn(self):
        return _compiled(self)[1]

    def k_block(self, k: int, unit: int = 0, rows: int | None = None) -> int:
        """The depth of a K block. Without blocking, each row block streams the whole K × NR panel of B
        (from L2, which the hardware prefetchers keep up with) and each row of A once, sequentially —
        measured faster than L1-sized blocks, which re-read C and cut A's rows into short pieces. So K
        is blocked only where a panel would not stay in half of L2, into blocks of equal depth (whole
        `unit`s: a convolution's taps or kernel rows; else the unrolled steps), so that each K block's
        time covers the next one's slice of B asked for ahead (`prefetching`) — and for work items of few
        `rows` (`SMALL_ITEM_ROWS`), blocks of at most `SMALL_ITEM_DEPTH`: their B, read by few row blocks,
        streams from L3 or memory, and a shorter slice asked for ahead keeps up (Xeon, AVX-512, 2 threads,
        11 alternating rounds: 49x2048x512 1.07x, 49x4608x512 1.05x, 49x512x2048 and 49x1024x2048 1.0x; 6 pairs
        of processes: ResNet-50 1.023x, MobileNet-V2 1.014x, BERT and RegNetY-400MF unchanged; depth 512: ResNet-50
        unchanged)."""
        unit = unit or self.shape.unroll
        most = max(256, self.l2 // 2 // (4 * self.nr))
        if rows is not None and rows <= SMALL_ITEM_ROWS:
            most = min(most, SMALL_ITEM_DEPTH)
        if k <= most:
            return k
        units = -(-k // unit)
        blocks = -(-units // max(1, most // unit))
        return -(-units // blocks) * unit

    def prefetching(self, chunk_rows: int) -> "GemmKernel":
        """The kernel for work items of `chunk_rows` rows reading packed B: when they have few row blocks
        (`PREFETCH_MAX_BLOCKS`), one whose K loops ask for the next slice of B as they go, enough lines
        per iteration for the item's row blocks to cover it (`MicroKernel.prefetch`)."""
        from ...targets.llvm.gemm import prefetch_lines
        blocks = -(-chunk_rows // self.mr)
        if self.shape.planar or blocks > PREFETCH_MAX_BLOCKS:
            return self
        lines = min(PREFETCH_MAX_LINES, prefetch_lines(self.shape, blocks))
        return replace(self, shape=replace(self.shape, prefetch=lines))

    def for_convolution(self, planar: bool = False, activation: str = "", window: tuple[int, int, int] = (0, 0, 0)
                        ) -> "GemmKernel":
        """The kernel of the same register block reading A through a convolution's window (of an NCHW
        image when `planar`, else NHWC), applying `activation` (a math-library function) before the
        store. A planar image is a network's input (at most 4 channels): its K loop runs along a kernel
        row, not over a tap's few channels; given the `window` (kernel width, channels, column stride or 0
        for any; ignored for NHWC), a kernel of a width up to `UNROLLED_WIDTH` unrolls a kernel row's taps
        and channels, and with a column stride (column dilation 1) finds its rows at constant offsets."""
        unroll = 1 if planar else self.shape.unroll
        width, channels, stride = window if planar and window[0] <= UNROLLED_WIDTH else (0, 0, 0)
        shape = replace(self.shape, conv=True, planar=planar, unroll=unroll, activation=activation,
                        kernel_width=width, channels=channels, column_stride=stride)
        return replace(self, shape=shape)

    def for_products(self, activation: str = "") -> "GemmKernel":
        """The kernel of the same register block reading A as rows (a plain product) that applies a
        convolution's epilogue: residual, `activation`, clamp."""
        shape = replace(self.shape, conv=False, planar=False, kernel_width=0, channels=0, column_stride=0,
                        activation=activation, epilogue=True)
        return replace(self, shape=shape)


@functools.cache
def available() -> bool:
    try:
        from ...targets.llvm import jit
        jit.host()
        return True
    except Exception:   # no usable LLVM: NumPy's BLAS does the products
        return False


def kernel_for(mr: int, vectors: int, unroll: int) -> GemmKernel:
    """The kernel of an mr × vectors register block at the current ISA level."""
    from ...targets import isa
    from ...targets.llvm import jit
    from ...targets.llvm.gemm import MicroKernel
    host = jit.host()
    shape = MicroKernel(mr, vectors, host.level.f32_lanes, unroll, host.level.fused_multiply_add)
    return GemmKernel(shape, host.cpu, host.features,
                      isa.cache_sizes().l2)


def _compiled(kernel: GemmKernel) -> tuple[int, object]:
    """(address, ctypes callable keeping the code alive) of a kernel."""
    return kernel.job.kernel()


def choose_kernel(n: int, k: int) -> GemmKernel:
    """The microkernel for a product `n` columns wide over `k` (at the current ISA level): of the level's
    register blocks (`register_blocks`), the one whose useful share of computed columns, times its speed
    on this machine (`block_speeds`), is highest (the widest on ties)."""
    from ...targets.llvm import jit
    from ...targets.llvm.gemm import register_blocks
    from .block_speeds import block_speeds
    level = jit.host().level

    def useful(vectors: int) -> float:   # the share of computed columns that are part of N
        nr = vectors * level.f32_lanes
        return n / (-(-n // nr) * nr)

    blocks, speeds = register_blocks(level.vector_registers), block_speeds(block_rates)
    best = max(range(len(blocks)), key=lambda i: (useful(blocks[i][1]) * speeds[i], -i))
    return kernel_for(*blocks[best])


def block_rates(blocks: tuple[tuple[int, int, int], ...]) -> list[float]:
    """Multiply-adds per second of each register block (mr, vectors, unroll) on one product, on this thread
    (one core's rates; `block_speeds`): rows and columns whole blocks and panels of every block, more row
    blocks than ask for B ahead, RATE_DEPTH deep (L2-resident), the blocks alternating, best of RATE_ROUNDS."""
    kernels = [kernel_for(*block) for block in blocks]
    rows = 2 * math.lcm(*(kernel.mr for kernel in kernels))
    columns = math.lcm(*(kernel.nr for kernel in kernels))
    rng = np.random.default_rng(0)
    a = aligned_empty(rows * RATE_DEPTH * 4).view(np.float32).reshape(rows, RATE_DEPTH)
    a[...] = rng.standard_normal(a.shape, dtype=np.float32)
    b = rng.standard_normal((RATE_DEPTH, columns), dtype=np.float32)
    launches = []
    for kernel in kernels:
        out = aligned_empty(rows * columns * 4).view(np.float32).reshape(rows, columns)
        launches.append(replace(prepare(a, pack(b, kernel), out), threads=1, held=(a, out)))
    best = [math.inf] * len(launches)
    for _ in range(RATE_ROUNDS):
        for i, launch in enumerate(launches):
            calls, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < RATE_SECONDS:
                launch.run()
                calls += 1
            best[i] = min(best[i], elapsed / calls)
    return [rows * columns * RATE_DEPTH / seconds for seconds in best]


@dataclass(frozen=True)
class PackedB:
    """A constant [K, N] operand laid out panel by panel: data[p, k, :] = B[k, p*NR : (p+1)*NR]."""
    data: np.ndarray     # [panels, K, NR], zero-padded past N
    k: int
    n: int
    kernel: GemmKernel

    @property
    def shape(self) -> tuple[int, int]:
        return self.k, self.n

    def unpack(self) -> np.ndarray:
        """B again, [K, N] (for products the kernel does not take)."""
        return self.data.transpose(1, 0, 2).reshape(self.k, -1)[:, :self.n]


def pack(b: np.ndarray, kernel: GemmKernel | None = None) -> PackedB:
    """B [K, N] packed panel by panel for `kernel` (default: the one `choose_kernel` picks)."""
    k, n = b.shape
    kernel = kernel or choose_kernel(n, k)
    panels = -(-n // kernel.nr)
    data = aligned_empty(panels * k * kernel.nr * 4).view(np.float32).reshape(panels, k, kernel.nr)
    full = n // kernel.nr
    data[:full] = b[:, :full * kernel.nr].reshape(k, full, kernel.nr).transpose(1, 0, 2)
    if full < panels:   # the last panel, zero-padded past N
        data[full] = 0
        data[full, :, :n - full * kernel.nr] = b[:, full * kernel.nr:]
    return PackedB(data, k, n, kernel)


def pack_batched(matrices) -> tuple[np.ndarray, GemmKernel]:
    """Constant [K, N] matrices of one shape packed one after another (a convolution's groups, Winograd's
    positions): data [count, panels, K, NR], and the kernel they were packed for."""
    packs = [pack(np.ascontiguousarray(b, dtype=np.float32)) for b in matrices]
    data = aligned_empty(len(packs) * packs[0].data.nbytes).view(np.float32).reshape(len(packs),
                                                                                   *packs[0].data.shape)
    for i, packed in enumerate(packs):
        data[i] = packed.data
    return data, packs[0].kernel


def _rows_view(a: np.ndarray) -> tuple[int, int] | None:
    """(rows, row stride) of a read as a matrix [rows, K] with unit stride along K, or None."""
    if a.strides[-1] != a.itemsize:
        return None
    if a.ndim == 2:
        return a.shape[0], a.strides[0] // a.itemsize
    if a.flags.c_contiguous:
        return math.prod(a.shape[:-1]), a.shape[-1]
    return None


def copies_panels(k: int, ldb: int) -> bool:
    """Whether each work item first copies its K × NR panel of a row-major B (row stride `ldb`) into its
    scratchpad. Read in place, a panel's rows lie on min(K, K·ldb·4/page) pages; measured (one thread,
    AVX-512), reading in place is as fast as packed up to ~580 pages (K=384..1536) and 10–30% slower
    from ~770 (K=768 at 8–12 KB strides, K=1024 at 4 KB), where the copy costs 1–5% instead."""
    return k * min(1.0, ldb * 4 / PAGE_BYTES) >= COPY_MIN_PAGES


@dataclass
class GemmLaunch:
    """One product with its kernel arguments prepared: `run()` computes it again into the same memory
    (A, a row-major B and the output must stay alive and unchanged in layout; a packed B and the bias,
    often a reshaped copy, are held here). A launch made to `repeat` runs as one prepared native call
    (`NativePool.prepare`: preparing costs about a microsecond, each run then a fifth of one); `run` reads
    the arguments held here, so keep the launch, not just `run`."""
    kernel: GemmKernel
    ptrs: ctypes.Array
    dims: ctypes.Array
    items: int
    threads: int
    scratch: object   # native_pool.Scratchpads
    bias: np.ndarray | None
    packed: object = None            # held too (PackedB, PackedConv): often made just for the launch
    repeats: bool = False
    held: tuple = ()                 # other arrays the kernel reads (clamp bounds, the zero row)

    def __post_init__(self):
        address, fn = _compiled(self.kernel)   # (looked up once: launches are microseconds)
        pool = get_native_pool()
        self.native_call = native_call(pool, address, ctypes.addressof(self.ptrs), ctypes.addressof(self.dims),
                                       self.items, 1, self.scratch.base, self.scratch.stride, self.threads > 1)
        self._run = runner(pool, self.native_call, fn, self.repeats)

    def run(self) -> None:
        """Compute the product (a method, so that `prepare(...).run()` keeps the arguments alive)."""
        self._run()


def packed_product(kernel: GemmKernel, count: int, m: int, k: int, n: int, ptrs: ctypes.Array, packed,
                   lda: int, a_batch: int, ldc: int, c_batch: int, bias: np.ndarray | None = None,
                   bias_batch: int = 0, ldr: int = 0, repeats: bool = False, held: tuple = (),
                   a_row_bytes: int = 0, interleaved: bool = False, shared_weights: bool = False,
                   scale_batch: int = 0, k_unit: int = 0, **window: int) -> GemmLaunch:
    """The launch of `count` products (a batch entry: A `a_batch` elements on, C `c_batch`, the bias
    `bias_batch`) of m×k rows of A (lda apart) by k×n weights packed for `kernel`, one batch entry's panels
    after another in `packed.data` (`shared_weights`: all entries multiply by the first's): a convolution's
    groups (with its `window` dims: the image's geometry), Winograd's α² tile positions, images. K blocks: the
    kernel's for the work items' rows, in whole `k_unit`s (`GemmKernel.k_block`); `a_row_bytes`, `interleaved`:
    see `WorkSplit.of`; `scale_batch`: the scale's step per batch entry, where `ptrs` has one (each work item then
    copies its panel, scaled)."""
    split = WorkSplit.of(kernel, count, m, n, k, a_row_bytes, interleaved)
    kernel = kernel.prefetching(split.chunk_rows)
    dims = kernel_dims(M=m, K=k, N=n, lda=lda, ldb=kernel.nr, b_panel_stride=k * kernel.nr, ldc=ldc,
                       panels=split.panels, a_batch=a_batch, b_batch=0 if shared_weights else packed.data[0].size,
                       c_batch=c_batch, bias_batch=bias_batch, chunks=split.chunks, chunk_rows=split.chunk_rows,
                       padded=1, kc=kernel.k_block(k, k_unit, split.chunk_rows), ldr=ldr,
                       interleaved=int(split.interleaved), batches=count, scale_batch=scale_batch, **window)
    from ...targets.llvm.gemm import PTRS
    scaled = bool(ptrs[PTRS.index("scale")])
    return GemmLaunch(kernel, ptrs, dims, split.items, split.threads,
                      scratchpads(split.threads, 4 * k * kernel.nr if scaled else 0), bias, packed, repeats, held)


def launch_kernel(kernel: GemmKernel, count: int, m: int, n: int, k: int, a_row_bytes: int = 0,
                  interleaved: bool = False) -> GemmKernel:
    """The kernel a launch of `count` products of m×k rows by k×n weights packed for `kernel` runs: it, or
    its variant asking for B ahead (`GemmKernel.prefetching`) — what a step names to compile ahead.
    `a_row_bytes`, `interleaved`: see `WorkSplit.of`."""
    return kernel.prefetching(WorkSplit.of(kernel, count, m, n, k, a_row_bytes, interleaved).chunk_rows)


def matmul(a: np.ndarray, b: np.ndarray | PackedB, out: np.ndarray, bias: np.ndarray | None = None,
           activation: str = "") -> bool:
    """out = activation(a @ b (+ bias along the last axis)), NumPy semantics; False when the layout is not
    taken. `activation`: a math-library function the kernel applies before it stores."""
    if not activation and _takes(a, b, out, bias) and (out.size == 0 or a.shape[-1] == 0):
        out[...] = 0 if bias is None else bias   # (empty arrays have zero strides: no layout to check)
        return True
    launch = prepare(a, b, out, bias, activation=activation)
    if launch is None:
        return False
    launch.run()
    return True


def _takes(a: np.ndarray, b: np.ndarray | PackedB, out: np.ndarray, bias: np.ndarray | None) -> bool:
    """Operands the kernel could take, layouts aside: float32 matrices (packed B of the right depth)."""
    operand = b.data if isinstance(b, PackedB) else b
    return (available() and a.ndim >= 2 and len(b.shape) >= 2 and out.flags.c_contiguous
            and all(x.dtype == np.float32 for x in (a, operand, out))
            and (bias is None or (bias.dtype == np.float32 and bias.flags.c_contiguous))
            and (not isinstance(b, PackedB) or b.k == a.shape[-1]))


def prepare(a: np.ndarray, b: np.ndarray | PackedB, out: np.ndarray, bias: np.ndarray | None = None,
            repeats: bool = False, activation: str = "") -> GemmLaunch | None:
    """The launch computing out = activation(a @ b (+ bias)), or None when the kernel does not take these
    layouts (or a product is empty); `repeats`: it will be run again and again (see `GemmLaunch`)."""
    packed = b if isinstance(b, PackedB) else None
    operand = b.data if packed is not None else b
    if not _takes(a, b, out, bias) or out.size == 0 or a.shape[-1] == 0:
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = out.shape[:-2]
    if packed is None and (b.strides[-1] != b.itemsize or (b.ndim > 2 and not b.flags.c_contiguous)):
        return None
    kernel = packed.kernel if packed is not None else choose_kernel(n, k)
    if activation:
        kernel = kernel.for_products(activation)
    if packed is not None:
        ldb, panel_stride = kernel.nr, k * kernel.nr
    else:
        ldb, panel_stride = (b.strides[-2] // b.itemsize if b.ndim == 2 else n), kernel.nr
    if len(b.shape) == 2:                                   # the batch folds into the rows of A
        rows = _rows_view(a)
        if rows is None:
            return None
        m, lda = rows
        count, a_batch, b_batch = 1, 0, 0
    elif a.ndim == 2 and a.strides[-1] == a.itemsize and b.shape[:-2] == batch:   # shared A
        count, lda, a_batch, b_batch = math.prod(batch), a.strides[0] // a.itemsize, 0, k * n
    elif a.shape[:-2] == batch == b.shape[:-2] and a.flags.c_contiguous:
        count, lda, a_batch, b_batch = math.prod(batch), k, m * k, k * n
    else:
        return None
    if m < MIN_ROWS and packed is None:   # a row or two (depthwise convs, vectors): NumPy wastes nothing
        return None
    split = WorkSplit.of(kernel, count, m, n, k)
    if packed is not None:
        kernel = kernel.prefetching(split.chunk_rows)
    ptrs = kernel_pointers(A=a, B=operand, C=out, bias=bias)
    pack = packed is None and copies_panels(k, ldb)
    dims = kernel_dims(M=m, K=k, N=n, lda=lda, ldb=ldb, b_panel_stride=panel_stride, ldc=n, panels=split.panels,
                       a_batch=a_batch, b_batch=b_batch, c_batch=m * n, chunks=split.chunks,
                       chunk_rows=split.chunk_rows, pack=int(pack), padded=int(packed is not None),
                       kc=kernel.k_block(k, 0, split.chunk_rows))
    partial = packed is None and n % kernel.nr != 0   # its last panel is copied, zero-padded
    scratch = scratchpads(split.threads, k * kernel.nr * 4 if pack or partial else 0)
    return GemmLaunch(kernel, ptrs, dims, split.items, split.threads, scratch, bias, packed, repeats)


@dataclass(frozen=True)
class WorkSplit:
    """How a product's work items (row chunk × panel × batch entry) spread over the threads."""
    threads: int
    panels: int
    chunks: int
    chunk_rows: int
    count: int
    interleaved: bool = False

    @property
    def items(self) -> int:
        return self.count * self.panels * self.chunks

    @staticmethod
    def of(kernel: GemmKernel, count: int, m: int, n: int, k: int, a_row_bytes: int = 0,
           interleaved: bool = False) -> "WorkSplit":
        """The split of `count` products of m×k rows by k×n; `a_row_bytes`: the bytes of A a row of C reads
        (a row of A, 4·k, unless a convolution's window says less); `interleaved`: the products are column bands
        of the same rows (a grouped convolution's groups), computed chunk of rows by chunk, each thread taking
        whole chunks (see `interleaved_chunks`)."""
        panels = -(-n // kernel.nr)
        pool = get_native_pool()
        threads = pool.threads if pool is not None and count * m * n * k >= PARALLEL_MIN_MULTIPLY_ADDS else 1
        blocks = -(-m // kernel.mr)
        per_thread = max(1, min(ITEMS_PER_THREAD, count * m * n * k // (threads * MIN_ITEM_MULTIPLY_ADDS)))
        chunks = min(blocks, max(1, -(-per_thread * threads // (count * panels)))) if threads > 1 else 1
        row_bytes = a_row_bytes or 4 * k
        if interleaved:
            chunks = interleaved_chunks(kernel, threads, count, blocks, panels, k, row_bytes, chunks)
            chunk_rows = -(-blocks // chunks) * kernel.mr
            return WorkSplit(threads, panels, -(-m // chunk_rows), chunk_rows, count, True)

        def busiest(c: int) -> int:   # the row blocks the busiest thread computes, with c chunks of rows
            rows = -(-blocks // c)
            return -(-count * panels * -(-blocks // rows) // threads) * rows

        # where the wanted number of chunks leaves one thread more than its share, as many as give the threads
        # (more) equal shares, up to twice as many (MobileNet-V2's 14x14 576->96: 3 panels x 3 chunks left one
        # thread 5 items of 9; 4 chunks: 6 and 6); fewer items are not worth a few percent (a thread waking late)
        best = min(range(1, min(blocks, 2 * chunks) + 1), key=lambda c: (busiest(c), abs(c - chunks), -c))
        if busiest(best) < BALANCE_GAIN * busiest(chunks):
            chunks = best
        chunks = _chunks_in_l2(kernel, threads, count, blocks, panels, k, row_bytes, chunks)
        chunk_rows = -(-blocks // chunks) * kernel.mr
        return WorkSplit(threads, panels, -(-m // chunk_rows), chunk_rows, count)


def interleaved_chunks(kernel: GemmKernel, threads: int, count: int, blocks: int, panels: int, k: int,
                       row_bytes: int, chunks: int) -> int:
    """The chunks of rows of `count` products whose outputs are column bands of the same rows: a multiple of
    the threads, so each thread computes every band of its own rows (the threads' writes to the cache lines two
    bands share do not race; a thread reads its rows' input once, all its bands' channels; the next layer's
    thread finds its rows), more where that keeps a chunk's A in half of L2 (`_chunks_in_l2`, over all bands).
    Band by band, a thread per band, ShuffleNet's 28×28 136->136 1×1 in 4 groups (34 columns each, bands
    sharing lines) ran no faster on 2 threads than on one (Xeon, AVX-512)."""
    if threads < 2:
        return chunks
    chunks = min(blocks, -(-chunks // threads) * threads)
    return _chunks_in_l2(kernel, threads, 1, blocks, panels, count * k, count * row_bytes, chunks)


def _chunks_in_l2(kernel: GemmKernel, threads: int, count: int, blocks: int, panels: int, k: int, row_bytes: int,
                  chunks: int) -> int:
    """`chunks`, or more: as many as keep a chunk's rows of A in half of L2, a multiple of the threads, when that
    halves what the threads read from beyond L2. A work item reads its chunk's rows of A and its panel's K × NR
    of B; the next item (the next panel) reads the same rows again, from L2 if they stayed there, else from L3
    or memory. More chunks read B once more each. (Xeon, 2 threads, 3136×256 by 256×128: with one chunk of
    3.2 MB, AVX2's 8 panels each read A from L3: 77% -> 87-89% of the FMA peak with 4 chunks; AVX-512,
    3136×256×512: 72% -> 85%; 128×3072×768, where B is 6 times A, measured 5% slower with 2 chunks: kept.)
    One thread, or the int8 kernels (no L2 size, other element sizes): `chunks`."""
    if threads < 2 or not isinstance(kernel, GemmKernel):
        return chunks
    budget = kernel.l2 // 2

    def traffic(c: int) -> int:   # bytes read from beyond L2 with c chunks of rows
        a_chunk = -(-blocks // c) * kernel.mr * row_bytes
        b = 4 * k * panels * kernel.nr
        a_reads = max(1, threads // (c * count)) if a_chunk <= budget else panels
        return count * (c * b + c * a_chunk * a_reads)

    fitting = -(-blocks // max(1, budget // (kernel.mr * row_bytes)))
    fitting = min(blocks, -(-fitting // threads) * threads)
    return fitting if fitting > chunks and 2 * traffic(fitting) <= traffic(chunks) else chunks


def kernel_pointers(**arrays: np.ndarray | None) -> ctypes.Array:
    """The GEMM kernel's `PTRS` by name (those not given null)."""
    from ...targets.llvm.gemm import PTRS
    return pointer_array(PTRS, **arrays)


def kernel_dims(**values: int) -> ctypes.Array:
    """The GEMM kernel's `DIMS` by name (those not given, a convolution's geometry in a product: 0)."""
    from ...targets.llvm.gemm import DIMS
    return dim_array(DIMS, 0, **values)
