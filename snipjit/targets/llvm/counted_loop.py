"""A counted loop for hand-built LLVM kernels (GEMM, strided copy): `for i in [start, stop) step`; `when` and
`update_when`, a block emitted under a condition; and two scheduling barriers, `memory_barrier` and `pin`."""
from __future__ import annotations

from llvmlite import ir

I64 = ir.IntType(64)


def i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def when(b: ir.IRBuilder, condition, emit, name: str = "when") -> None:
    """Emit `emit()` under `condition`, then continue after it."""
    update_when(b, condition, [], lambda _: emit(), name)


def update_when(b: ir.IRBuilder, condition, values: list, emit, name: str = "when") -> list:
    """Emit `emit(updated)` under `condition`, `updated` a list of `values` that it updates in place; then
    continue after it with the values as updated where the condition held, else as they were."""
    fn = b.function
    start, yes, done = b.block, fn.append_basic_block(name), fn.append_basic_block(f"{name}.done")
    b.cbranch(condition, yes, done)
    b.position_at_end(yes)
    updated = list(values)
    emit(updated)
    end = b.block
    b.branch(done)
    b.position_at_end(done)
    merged = []
    for value, new in zip(values, updated):
        merged.append(phi := b.phi(value.type))
        phi.add_incoming(value, start)
        phi.add_incoming(new, end)
    return merged


def memory_barrier(b: ir.IRBuilder) -> None:
    """An empty inline assembly statement that clobbers memory: no load or store moves across it."""
    b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", side_effect=True), [])


def stack_buffer(b: ir.IRBuilder, floats: int):
    """An f32 buffer on the stack of the function being emitted (allocated at its entry), as a pointer."""
    entry = ir.IRBuilder(b.function.entry_basic_block)
    entry.position_at_start(b.function.entry_basic_block)
    buffer = entry.alloca(ir.ArrayType(ir.FloatType(), floats), name="buffer")
    as_pointer = ir.InlineAsm(ir.FunctionType(ir.PointerType(), [buffer.type]), "", "=r,0")   # (an untyped pointer)
    return entry.call(as_pointer, [buffer])


def pin(b: ir.IRBuilder, values: list, barrier: bool = True) -> list:
    """`values` as they are, through a memory barrier that takes and returns them in registers (vectors in
    vector registers, integers and pointers in general ones): LLVM computes them before it (past a plain
    barrier, arithmetic may still sink below later loads, whose results then wait for it in spilled
    registers), and cannot derive later values from what they were computed from (a pinned pointer is
    kept, not recomputed or folded into others' addresses). Without the `barrier`, only the latter:
    instructions still move across it freely."""
    typ = values[0].type if len(values) == 1 else ir.LiteralStructType([v.type for v in values])
    outputs = ["=v" if isinstance(v.type, ir.VectorType) else "=r" for v in values]
    constraints = ",".join(outputs + [str(i) for i in range(len(values))] + (["~{memory}"] if barrier else []))
    asm = ir.InlineAsm(ir.FunctionType(typ, [v.type for v in values]), "", constraints, side_effect=barrier)
    result = b.call(asm, values)
    return [result] if len(values) == 1 else [b.extract_value(result, i) for i in range(len(values))]


class CountedLoop:
    """The caller emits the body between `enter` and `leave`; `phi` adds values carried around it."""

    def __init__(self, b: ir.IRBuilder, name: str, start, stop, step: int | ir.Value):
        self.b, self.step = b, step
        fn = b.function
        self.head = fn.append_basic_block(f"{name}.head")
        self.body = fn.append_basic_block(f"{name}.body")
        self.exit = fn.append_basic_block(f"{name}.exit")
        self.entry = b.block
        b.branch(self.head)
        b.position_at_end(self.head)
        self.index = b.phi(I64, name)
        self.index.add_incoming(start, self.entry)
        self.stop = stop

    def phi(self, typ, initial) -> ir.PhiInstr:
        """A value carried around the loop, starting at `initial` (call before `enter`)."""
        phi = self.b.phi(typ)
        phi.add_incoming(initial, self.entry)
        return phi

    def enter(self) -> None:
        self.b.cbranch(self.b.icmp_signed("<", self.index, self.stop), self.body, self.exit)
        self.b.position_at_end(self.body)

    def leave(self, carried: list[tuple[ir.PhiInstr, ir.Value]] = ()) -> None:
        b = self.b
        step = self.step if isinstance(self.step, ir.Value) else i64(self.step)
        self.index.add_incoming(b.add(self.index, step), b.block)
        for phi, value in carried:
            phi.add_incoming(value, b.block)
        b.branch(self.head)
        b.position_at_end(self.exit)
