"""3×3 convolutions of stride 1 as Winograd F(m×m, 3×3) on a channels-last image.

Three launches (`targets.llvm.winograd`): the input transform writes the image's tiles, transformed, as α²
matrices V[position] = [tiles, C] (α = m + 2); the GEMM microkernel multiplies each by that position's
transformed weights U[position] = [C, O] (packed once, at compile time) into M[position] = [tiles, O]; the
output transform turns M back into output pixels and applies the bias, residual, activation and clamp.
F(2×2, 3×3) does 16/36 of the direct convolution's multiply-adds, and its transforms only add and halve:
its results differ from the direct convolution's by rounding alone. V and M (α² · tiles · (C + O) floats)
are a workspace the convolutions of one request share (`_workspace`).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ...memory.solver import aligned_empty
from ..parallel.native_threads import get_native_pool
from .conv_launch import ConvGeometry, _clamp_array, pixel_rows
from .gemm_launch import GemmKernel, available, kernel_pointers, launch_kernel, pack_batched, packed_product
from .kernel_arguments import dim_array, pointer_array
from .window_launch import CompiledWindow, WindowLaunch

TILE = 2                              # m of F(m×m, 3×3) where none is asked for
LARGE_MAP = 20                        # outputs this high and wide take tiles of 4 (see `choose_tile`)
MIN_MAP = 6                           # ... this, tiles of 2; smaller, the direct convolution
PARALLEL_MIN_TILES = 64               # fewer tiles transform on the calling thread


@dataclass(frozen=True)
class PackedWinograd:
    """Weights [O, C, 3, 3] transformed, U[i, j] = G g Gᵀ, and packed per position for the GEMM:
    data [α², panels, C, NR]."""
    data: np.ndarray
    tile: int
    c: int
    o: int
    kernel: GemmKernel

    @property
    def alpha(self) -> int:
        return self.tile + 2

    def unpack(self) -> np.ndarray:
        """The ONNX weights again, [O, C, 3, 3] (G's pseudo-inverse undoes the transform)."""
        from ...targets.llvm.winograd import MATRICES
        a = self.alpha
        u = self.data.transpose(0, 2, 1, 3).reshape(a, a, self.c, -1)[..., :self.o].astype(np.float64)
        inverse = np.linalg.pinv(np.array(MATRICES[self.tile][1], np.float64))
        w = np.einsum("ki,ijco,lj->ockl", inverse, u, inverse)
        return np.ascontiguousarray(w, dtype=np.float32)


def eligible(weights_shape: tuple, groups: int, geometry: ConvGeometry, planar: bool = False) -> bool:
    """A 3×3 window of stride and dilation 1, one group, NHWC, input and output channels whole vectors
    (the transforms have no lane tails) and more than one vector of input channels (fewer: the transforms
    would outweigh the products)."""
    from ...targets.llvm import jit
    o, c = weights_shape[:2]
    lanes = jit.host().level.f32_lanes
    return (geometry.kernel == (3, 3) and geometry.strides == (1, 1) and geometry.dilations == (1, 1)
            and groups == 1 and not planar and c % lanes == 0 and o % lanes == 0 and c > lanes)


def choose_tile(weights_shape: tuple, groups: int, geometry: ConvGeometry, planar: bool,
                output_size: tuple) -> int:
    """The tile size m of F(m×m, 3×3) for a convolution with an output of `output_size` (OH, OW), or 0 for
    the direct convolution. Measured (Zen 3 AVX2, 2 threads, ResNet-50's and SqueezeNet's 3×3 layers,
    against the direct kernel): tiles of 4 at 27×27 and more (1.5-2.7× faster: 4 of 36 multiply-adds per
    output, and transforms of little cost); tiles of 2 on smaller maps (14×14: 2×, 7×7: 1.05-1.4×), where
    the transformed weights, 36/9 of the weights to stream for tiles of 4, outweigh the saved work."""
    if not eligible(weights_shape, groups, geometry, planar) or not all(isinstance(d, int) for d in output_size):
        return 0
    smaller = min(output_size)
    return 4 if smaller >= LARGE_MAP else 2 if smaller >= MIN_MAP else 0


def pack_winograd(w: np.ndarray, tile: int = TILE) -> PackedWinograd:
    from ...targets.llvm.winograd import MATRICES
    o, c, kh, kw = w.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"Winograd F({tile}x{tile}, 3x3) needs 3x3 weights, got {kh}x{kw}")
    g = np.array(MATRICES[tile][1], np.float64)
    alpha = tile + 2

    def position(p: int) -> np.ndarray:   # U[i, j] as [C, O] (one at a time: no float64 copy of them all)
        i, j = divmod(p, alpha)
        return np.einsum("k,ockl,l->co", g[i], w, g[j]).astype(np.float32)

    data, kernel = pack_batched(position(p) for p in range(alpha * alpha))
    return PackedWinograd(data, tile, c, o, kernel)


def transform_kernel(kind: str, tile: int, activation: str = "") -> CompiledWindow:
    from ...targets.llvm import jit
    from ...targets.llvm.winograd import WinogradTransform
    host = jit.host()
    level = host.level
    shape = WinogradTransform(kind, tile, level.f32_lanes, level.fused_multiply_add, activation)
    return CompiledWindow(shape, host.cpu, host.features, "winograd:winograd_module")


@dataclass
class WinogradLaunch:
    """The three launches of one convolution (a program's step runs them as three native calls; each
    holds the arrays its pointers point into)."""
    native_launches: tuple

    def run(self) -> None:
        for launch in self.native_launches:
            launch.run()


def jobs(packed: PackedWinograd, activation: str = "", output: tuple | None = None) -> list:
    """The kernels a convolution on these weights runs (for compiling ahead), its `output` (images, OH, OW)
    if known (the product's kernel follows its tiles)."""
    kernel = packed.kernel
    if output is not None:
        images, oh, ow = output
        tiles = images * -(-oh // packed.tile) * -(-ow // packed.tile)
        kernel = launch_kernel(kernel, packed.alpha * packed.alpha, tiles, packed.o, packed.c)
    return [transform_kernel("input", packed.tile).job, kernel.job,
            transform_kernel("output", packed.tile, activation).job]


def prepare_winograd(x: np.ndarray, packed: PackedWinograd, out: np.ndarray, geometry: ConvGeometry,
                     bias: np.ndarray | None = None, clamp: tuple[float, float] | None = None,
                     repeats: bool = False, activation: str = "",
                     residual: np.ndarray | None = None) -> WinogradLaunch | None:
    """The launches computing out = clamp(activation(conv(x) + bias + residual)), x [N, H, W, C] and out
    [N, OH, OW, O] channels-last (out may be a channel slice of a wider tensor); None when the JIT is not
    available, the layouts are not the kernels' or there is nothing to compute. Shapes that do not fit the
    weights and the geometry raise ValueError."""
    if not available():
        return None
    images, h, w, c = x.shape
    oh, ow = geometry.output_size(h, w)
    if c != packed.c or tuple(out.shape) != (images, oh, ow, packed.o):
        raise ValueError(f"3x3 convolution of an image {tuple(x.shape)} (NHWC) by weights for {packed.c} input "
                         f"channels gives {(images, oh, ow, packed.o)}, not {tuple(out.shape)}")
    if bias is not None and bias.size != packed.o:
        raise ValueError(f"convolution bias must be {packed.o} values, got {bias.size}")
    if (not x.flags.c_contiguous or not pixel_rows(out) or x.dtype != np.float32 or out.dtype != np.float32
            or (residual is not None and (residual.shape != out.shape or residual.dtype != np.float32
                                          or not residual.flags.c_contiguous))):
        return None
    if out.size == 0:
        return None
    m, alpha, o = packed.tile, packed.alpha, packed.o
    tiles_h, tiles_w = -(-oh // m), -(-ow // m)
    tiles = images * tiles_h * tiles_w
    space = _workspace(out if repeats else None, alpha * alpha * tiles * (c + o) * 4).view(np.float32)
    transformed, products = space[:alpha * alpha * tiles * c], space[alpha * alpha * tiles * c:]
    zeros = np.zeros(c, np.float32)
    pool = get_native_pool()
    threads = pool.threads if pool is not None and tiles >= PARALLEL_MIN_TILES else 1
    items = images * tiles_h
    from ...targets.llvm.winograd import INPUT_DIMS, INPUT_PTRS, OUTPUT_DIMS, OUTPUT_PTRS
    values = dict(N=images, H=h, W=w, C=c, tiles_h=tiles_h, tiles_w=tiles_w, pad_t=geometry.pads[0],
                  pad_l=geometry.pads[1])
    # (the transforms run like a window kernel: each thread's share of the tile rows in one piece)
    before = WindowLaunch(transform_kernel("input", m), pointer_array(INPUT_PTRS, X=x, V=transformed, zeros=zeros),
                          dim_array(INPUT_DIMS, **values), items, threads, (transformed, zeros), repeats)
    ptrs = kernel_pointers(A=transformed, B=packed.data, C=products)
    product = packed_product(packed.kernel, alpha * alpha, tiles, c, o, ptrs, packed, lda=c, a_batch=tiles * c,
                             ldc=o, c_batch=tiles * o, repeats=repeats, held=(transformed, products))
    bias_values = np.zeros(o, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32)
    clamp_values = _clamp_array(clamp)
    values = dict(N=images, OH=oh, OW=ow, O=o, tiles_h=tiles_h, tiles_w=tiles_w, c_image=out.strides[0] // 4,
                  c_row=out.strides[1] // 4, ldc=out.strides[2] // 4, ldr=o)
    after = WindowLaunch(transform_kernel("output", m, activation),
                         pointer_array(OUTPUT_PTRS, M=products, Y=out, bias=bias_values, residual=residual,
                                       clamp=clamp_values),
                         dim_array(OUTPUT_DIMS, **values), items, threads, (products, bias_values, clamp_values),
                         repeats)
    return WinogradLaunch((before, product, after))


_workspaces: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def _workspace(owner: np.ndarray | None, nbytes: int) -> np.ndarray:
    """Bytes for the transformed tiles and their products. The convolutions writing into one buffer (an
    arena: one request's steps, which run one after another) share one workspace, as large as the
    largest asks (a launch made before it grew keeps the smaller one); others get their own."""
    if owner is None:
        return aligned_empty(nbytes)
    root = owner
    while isinstance(root.base, np.ndarray):
        root = root.base
    known = _workspaces.get(id(root))
    if known is None or known[0]() is not root or known[1].nbytes < nbytes:
        if known is None or known[0]() is not root:
            weakref.finalize(root, _workspaces.pop, id(root), None)
        known = _workspaces[id(root)] = (weakref.ref(root), aligned_empty(nbytes))
    return known[1][:nbytes]

