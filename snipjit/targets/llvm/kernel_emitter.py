"""The LLVM KernelEmitter: one function for a whole prepared Linear IR.

    void kernel(ptr ptrs, ptr dims, i64 begin, i64 end, ptr scratch)

`ptrs` holds the data pointers of the body inputs then outputs, `dims` the master shape (then the row
pitches of inputs whose rows lie apart, `row_pitch`), `scratch` the
calling thread's scratchpad for Buffers. Checked kernels take two more arguments: the size in bytes of
each buffer (inputs, outputs, then the scratchpad) and a 3 x i64 error record (see BoundsChecks). The kernel walks iterations [begin, end) of its parallel domain
(the master dims in front of the loop dims): for each it computes every input's and output's data
pointer from the iteration's indices and the layout (the guide's KernelEmitter job), then emits the
expressions in order through their emitters. Buffer pointers are set where each loop nest begins.

Registers are modelled literally: each physical register of the Linear IR is a stack slot (`alloca`)
the emitters read and write; LLVM's mem2reg turns them into SSA values and does the final allocation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from ...snippets.lowered.linear_ir import LinearIR
from ...snippets.lowered.memory import kernel_buffers, row_pitch, stride
from ...snippets.lowered.expression import Reg
from ...snippets.symbolic import Sym

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
PTR = ir.PointerType()


@dataclass
class LoopFrame:
    loop_id: int
    body: ir.Block
    exit: ir.Block
    counter: Reg | None
    remaining: ir.Value | None = None   # tail loops: how many elements are left (<= lanes)


@dataclass
class KernelContext:
    """What emitters need while emitting one kernel."""
    lir: LinearIR
    module: ir.Module
    builder: ir.IRBuilder
    lanes: int
    dims: list[ir.Value] = field(default_factory=list)      # the master shape's
    pitches: list[ir.Value] = field(default_factory=list)   # the pitched inputs' row pitches (dims after those)
    slots: dict[tuple, ir.Value] = field(default_factory=dict)
    buffer_regs: dict[tuple, Reg] = field(default_factory=dict)
    buffer_dtypes: dict[tuple, str] = field(default_factory=dict)
    loops: list[LoopFrame] = field(default_factory=list)
    spill_slots: dict[int, ir.Value] = field(default_factory=dict)
    scratch: ir.Value | None = None
    checks: "BoundsChecks | None" = None   # checked mode: every access verified against its buffer
    _sym_cache: dict[Sym, ir.Value] = field(default_factory=dict)
    _entry: ir.Block | None = None

    @property
    def vec(self) -> ir.VectorType:
        return ir.VectorType(F32, self.lanes)

    def _slot(self, key: tuple, ty: ir.Type) -> ir.Value:
        if key not in self.slots:
            with self.builder.goto_block(self._entry):
                self.builder.position_at_start(self._entry)
                self.slots[key] = self.builder.alloca(ty, name=f"{key[0]}_{key[1]}")
        return self.slots[key]

    def read(self, reg: Reg, ty: ir.Type | None = None) -> ir.Value:
        ty = ty or self.vec
        return self.builder.load(self._slot((str(reg), str(ty)), ty), typ=ty)

    def write(self, reg: Reg, value: ir.Value) -> None:
        self.builder.store(value, self._slot((str(reg), str(value.type)), value.type))

    def sym(self, s: Sym) -> ir.Value:
        """A runtime i64 for a polynomial over the master dims (computed once, in the entry block)."""
        if s not in self._sym_cache:
            b = ir.IRBuilder(self._entry)
            b.position_before(self._entry.terminator) if self._entry.terminator else b.position_at_end(self._entry)
            total = None
            for mono, coef in s.terms:
                term = ir.Constant(I64, coef)
                for d in mono:
                    term = b.mul(term, self.dims[d] if d < len(self.dims) else self.pitches[d - len(self.dims)])
                total = term if total is None else b.add(total, term)
            self._sym_cache[s] = total if total is not None else ir.Constant(I64, 0)
        return self._sym_cache[s]

    def buffer_ptr(self, buffer: tuple) -> ir.Value:
        return self.read(self.buffer_regs[tuple(buffer)], PTR)

    def shift_buffer(self, buffer_reg: Reg, elements: ir.Value, data_size: int) -> None:
        ptr = self.read(buffer_reg, PTR)
        offset = self.builder.mul(elements, ir.Constant(I64, data_size))
        self.write(buffer_reg, self.builder.gep(ptr, [offset], source_etype=I8))
        if self.checks is not None:
            self.checks.moved(self, buffer_reg, offset)

    def point(self, key: tuple, base: ir.Value, byte_offset: ir.Value) -> None:
        """Set a buffer's data pointer to `base + byte_offset` (checked mode tracks the offset)."""
        self.write(self.buffer_regs[key], self.builder.gep(base, [byte_offset], source_etype=I8))
        if self.checks is not None:
            self.checks.placed(self, self.buffer_regs[key], byte_offset)

    def check_access(self, expr, buffer: tuple, nbytes: ir.Value) -> None:
        if self.checks is not None:
            self.checks.verify(self, expr, tuple(buffer), nbytes)

    def rebase_buffers(self, exprs) -> None:
        """Point the registers of the scratch buffers these expressions use at their rows."""
        row_bytes = self.builder.mul(self.dims[-1], ir.Constant(I64, 4))
        for e in exprs:
            key = tuple(e.attrs.get("buffer", ("",)))
            if key[0] == "scratch":
                self.point(key, self.scratch, self.builder.mul(row_bytes, ir.Constant(I64, e.attrs["row"])))

    def tail_mask(self) -> ir.Value | None:
        """The lane mask of the innermost tail loop being emitted (lanes < remaining)."""
        for frame in reversed(self.loops):
            if frame.remaining is not None:
                lane_ids = ir.Constant(ir.VectorType(I64, self.lanes), list(range(self.lanes)))
                rem = splat(self.builder, frame.remaining, self.lanes)
                return self.builder.icmp_signed("<", lane_ids, rem)
        return None

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name=name)


def splat(builder: ir.IRBuilder, scalar: ir.Value, lanes: int) -> ir.Value:
    vec_t = ir.VectorType(scalar.type, lanes)
    v = builder.insert_element(ir.Constant(vec_t, ir.Undefined), scalar, ir.Constant(I32, 0))
    return builder.shuffle_vector(v, ir.Constant(vec_t, ir.Undefined), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


class BoundsChecks:
    """Checked mode: each data pointer has a companion byte offset from its buffer's start; every load
    and store verifies `0 <= offset` and `offset + bytes <= size`. A violation records (expression id,
    buffer index, offset) in the `error` argument and returns from the kernel at once."""

    def __init__(self, ctx: KernelContext, sizes: ir.Value, error: ir.Value, buffer_index: dict[tuple, int]):
        self.sizes, self.error, self.buffer_index = sizes, error, buffer_index
        self.offsets: dict[Reg, ir.Value] = {}
        self.ctx = ctx

    def _offset_slot(self, ctx: KernelContext, reg: Reg) -> ir.Value:
        if reg not in self.offsets:
            with ctx.builder.goto_block(ctx._entry):
                ctx.builder.position_at_start(ctx._entry)
                self.offsets[reg] = ctx.builder.alloca(I64, name=f"offset_{reg}")
        return self.offsets[reg]

    def placed(self, ctx: KernelContext, reg: Reg, byte_offset: ir.Value) -> None:
        ctx.builder.store(byte_offset, self._offset_slot(ctx, reg))

    def moved(self, ctx: KernelContext, reg: Reg, delta: ir.Value) -> None:
        slot = self._offset_slot(ctx, reg)
        ctx.builder.store(ctx.builder.add(ctx.builder.load(slot, typ=I64), delta), slot)

    def verify(self, ctx: KernelContext, expr, buffer: tuple, nbytes: ir.Value) -> None:
        b = ctx.builder
        index = self.buffer_index[buffer]
        offset = b.load(self._offset_slot(ctx, ctx.buffer_regs[buffer]), typ=I64)
        size = b.load(b.gep(self.sizes, [ir.Constant(I64, index)], source_etype=I64), typ=I64)
        inside = b.and_(b.icmp_signed(">=", offset, ir.Constant(I64, 0)),
                        b.icmp_signed("<=", b.add(offset, nbytes), size))
        fail = b.function.append_basic_block(f"oob.{expr.uid}")
        ok = b.function.append_basic_block(f"ok.{expr.uid}")
        b.cbranch(inside, ok, fail)
        b.position_at_end(fail)
        for k, v in enumerate((ir.Constant(I64, expr.uid), ir.Constant(I64, index), offset)):
            b.store(v, b.gep(self.error, [ir.Constant(I64, k)], source_etype=I64))
        b.ret_void()
        b.position_at_end(ok)


class LLVMKernelEmitter:
    def __init__(self, lir: LinearIR, lanes: int, name: str, checked: bool = False):
        self.lir = lir
        self.lanes = lanes
        self.name = name
        self.checked = checked

    def emit(self) -> ir.Module:
        lir = self.lir
        module = ir.Module(name=self.name)
        extra = [PTR, PTR] if self.checked else []   # checked mode: buffer sizes, error record
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64, PTR] + extra), name=self.name)
        ptrs_arg, dims_arg, begin, end, scratch = fn.args[:5]
        entry = fn.append_basic_block("entry")
        builder = ir.IRBuilder(entry)
        ctx = KernelContext(lir, module, builder, self.lanes, scratch=scratch, _entry=entry)
        rank = len(lir.master_shape)
        ctx.dims = [builder.load(builder.gep(dims_arg, [ir.Constant(I64, d)], source_etype=I64), name=f"D{d}", typ=I64)
                    for d in range(rank)]
        ctx.pitches = [builder.load(builder.gep(dims_arg, [ir.Constant(I64, rank + j)], source_etype=I64),
                                    name=f"P{j}", typ=I64) for j in range(len(lir.pitched))]
        params, results = lir.parameters(), lir.results()
        for key, (reg, dtype) in kernel_buffers(lir).items():
            ctx.buffer_regs[key] = reg
            ctx.buffer_dtypes[key] = dtype
        if self.checked:
            index = {**{("param", i): i for i in range(len(params))},
                     **{("result", i): len(params) + i for i in range(len(results))}}
            for key in ctx.buffer_regs:
                if key[0] == "scratch":
                    index[key] = len(params) + len(results)
            ctx.checks = BoundsChecks(ctx, fn.args[5], fn.args[6], index)
        preamble = [e for e in lir.expressions if e.op in ("Parameter", "Scalar") and not e.loop_ids
                    and not e.attrs.get("rematerialized")]
        body = [e for e in lir.expressions if e not in preamble and e.op != "Result"]
        for e in preamble:
            e.emitter.emit(ctx, e)
        # the parallel domain: for it in [begin, end)
        header = fn.append_basic_block("outer.header")
        loop = fn.append_basic_block("outer.body")
        done = fn.append_basic_block("outer.done")
        it_slot = builder.alloca(I64, name="outer_it")
        builder.store(begin, it_slot)
        index_slots = self._start_indices(ctx, begin)
        builder.branch(header)
        builder.position_at_end(header)
        it = builder.load(it_slot, typ=I64)
        builder.cbranch(builder.icmp_signed("<", it, end), loop, done)
        builder.position_at_end(loop)
        self._set_data_pointers(ctx, ptrs_arg, [builder.load(s, typ=I64) for s in index_slots], params, results)
        for e in body:
            e.emitter.emit(ctx, e)
        builder.store(builder.add(builder.load(it_slot, typ=I64), ir.Constant(I64, 1)), it_slot)
        self._advance_indices(ctx, index_slots)
        builder.branch(header)
        builder.position_at_end(done)
        builder.ret_void()
        return module

    def _start_indices(self, ctx: KernelContext, begin) -> list[ir.Value]:
        """Slots holding the parallel domain's index per dim, set from `begin` (divisions, once)."""
        b = ctx.builder
        slots = [b.alloca(I64, name=f"idx{d}") for d in range(self.lir.parallel_rank)]
        rest = begin
        for d in reversed(range(self.lir.parallel_rank)):
            b.store(b.urem(rest, ctx.dims[d]), slots[d])
            rest = b.udiv(rest, ctx.dims[d])
        return slots

    @staticmethod
    def _advance_indices(ctx: KernelContext, slots: list[ir.Value]) -> None:
        """Step the indices to the next iteration like an odometer (no division per iteration)."""
        b = ctx.builder
        carry = ir.Constant(I64, 1)
        for d in reversed(range(len(slots))):
            new = b.add(b.load(slots[d], typ=I64), carry)
            wrap = b.icmp_signed("==", new, ctx.dims[d])
            b.store(b.select(wrap, ir.Constant(I64, 0), new), slots[d])
            carry = b.zext(wrap, I64)

    def _set_data_pointers(self, ctx: KernelContext, ptrs_arg, idx: list[ir.Value], params, results) -> None:
        """Point every input's and output's data pointer at this iteration's first element."""
        b = ctx.builder
        lir = self.lir
        buffers = [(p.out_descs[0], ("param", i), p) for i, p in enumerate(params)] + \
                  [(r.in_descs[0], ("result", i), r) for i, r in enumerate(results)]
        for k, (desc, key, e) in enumerate(buffers):
            base = b.load(b.gep(ptrs_arg, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR)
            offset = ir.Constant(I64, 0)
            for d in range(lir.parallel_rank):
                if desc.shape[d] == 1 or d in e.attrs.get("own_dims", ()):   # (a Brgemm walks its own dims)
                    continue
                offset = b.add(offset, b.mul(idx[d], ctx.sym(stride(lir, desc.shape, desc.layout, d, row_pitch(e)))))
            size = 1 if ctx.buffer_dtypes[key] == "bool" else 4
            ctx.point(key, base, b.mul(offset, ir.Constant(I64, size)))
