"""Helpers the control-flow passes share: which buffer a memory port touches, and its strides."""
from __future__ import annotations

from ..ops import BLOCK_OPS  # noqa: F401  (the passes take it from here)
from ..symbolic import Sym
from .expression import Expression, ExpressionPort, Reg
from .linear_ir import LinearIR

MEMORY_OPS = ("Parameter", "Result", "Buffer")
LOOP_FREE_OPS = ("Parameter", "Result", "Scalar", "LoopBegin", "LoopEnd")


def memory_of(port: ExpressionPort) -> Expression | None:
    """The Parameter/Result/Buffer expression on the other side of a memory port, if any."""
    e = port.expr
    if port.type == "in":
        src = e.inputs[port.index].source.expr
        return src if src.op in MEMORY_OPS else None
    for c in e.outputs[port.index].consumers:
        if c.expr.op in MEMORY_OPS:
            return c.expr
    return None


def pointer_key(port: ExpressionPort) -> tuple:
    """Which data pointer register a memory port moves: its Load/Store's `buffer` attribute."""
    return tuple(port.expr.attrs["buffer"])


def memory_shape(port: ExpressionPort) -> tuple:
    mem = memory_of(port)
    if mem is None:
        return port.descriptor.shape
    return mem.out_descs[0].shape if mem.op != "Result" else mem.in_descs[0].shape


def stride(lir: LinearIR, shape: tuple, layout: tuple[int, ...], dim: int, pitch: Sym | None = None) -> Sym:
    """Elements between neighbours along `dim` of a buffer with `shape` stored in `layout` order;
    size-1 dims are broadcast (they take no space). A static dim counts as its size (a Brgemm's own dims
    differ from the master's), a dynamic one as the master's. `pitch`: the buffer's rows (its innermost
    dim) lie that many elements apart, not their length (`row_pitch`)."""
    s = Sym.const(1)
    for k in reversed(layout):
        if k == dim:
            return s
        if shape[k] != 1:
            s = s * (pitch if pitch is not None and k == layout[-1] else
                     Sym.const(shape[k]) if isinstance(shape[k], int) else lir.dim(k))
    raise ValueError(f"dim {dim} is not in layout {layout}")


def row_pitch(mem: Expression | None) -> Sym | None:
    """The runtime row pitch of a Parameter whose rows may lie apart (a body input `body.meta["pitched"]`
    names: a slice of a wider tensor's channels, as a Concat assembled in place leaves it): the kernel
    argument `dims[rank + j]` for the j-th such input, after the master shape's dims."""
    if mem is None or mem.op != "Parameter" or "pitch" not in mem.attrs:
        return None
    return Sym.dim(mem.attrs["pitch"])


def loop_exprs(lir: LinearIR, loop_id: int) -> list[Expression]:
    return [e for e in lir.expressions if loop_id in e.loop_ids]


def update_loop_ports(lir: LinearIR, loop_id: int) -> None:
    """Recompute a loop's entry/exit points: the in-loop ports that read or write memory."""
    from .loop_info import LoopPort
    info = lir.loop_manager[loop_id]
    old = {(id(p.port.expr), p.port.type, p.port.index): p for p in info.ports}
    entries, exits = [], []
    for e in loop_exprs(lir, loop_id):
        for i in range(len(e.inputs)):
            if memory_of(e.input_port(i)) is not None:
                entries.append(old.get((id(e), "in", i)) or LoopPort(e.input_port(i)))
        for i in range(len(e.outputs)):
            if memory_of(e.output_port(i)) is not None:
                exits.append(old.get((id(e), "out", i)) or LoopPort(e.output_port(i)))
    info.entry_points, info.exit_points = entries, exits


def kernel_buffers(lir: LinearIR) -> dict[tuple, tuple]:
    """Every memory a kernel addresses, by the key its Loads/Stores name: ("param", i) and
    ("result", i) with their data pointer register and dtype, and ("scratch", group) for each Buffer
    register group (scratch rows hold 4-byte lanes)."""
    out: dict[tuple, tuple] = {}
    for i, p in enumerate(lir.parameters()):
        out[("param", i)] = (p.out_descs[0].reg, p.dtype)
    for i, r in enumerate(lir.results()):
        out[("result", i)] = (r.in_descs[0].reg, r.dtype)
    for e in lir.expressions:
        key = tuple(e.attrs.get("buffer", ("",)))
        if key[0] == "scratch":
            out[key] = (Reg("scratch", key[1]), "f32")
    return out
