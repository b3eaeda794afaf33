"""The C KernelEmitter: one C function for a whole prepared Linear IR.

    void kernel(void **ptrs, const int64_t *dims, int64_t begin, int64_t end, void *scratch)

The same kernel as the LLVM target's: `ptrs` holds the data pointers of the body inputs then outputs,
`dims` the master shape, `scratch` the calling thread's scratchpad for Buffers. The kernel walks
iterations [begin, end) of its parallel domain (the master dims in front of the loop dims); for each it
computes every input's and output's data pointer from the iteration's indices and the layout, then
runs the expressions in order. Buffer pointers are set where each loop nest begins.

Registers become C variables: vector register k is `vf vk` (booleans are lane masks in the same
variables), data pointers are `char *pk` (`char *sk` for scratch buffer groups), loop counters
`int64_t nk`; gcc does the final allocation. Loops keep the Linear IR's structure: a counted loop is a
C `for`, a loop evaluated once is a block, a tail is a block guarded by its element count `remK`.
Every expression is preceded by a comment naming it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...snippets.lowered.linear_ir import LinearIR
from ...snippets.lowered.memory import kernel_buffers, row_pitch, stride
from ...snippets.lowered.expression import Reg
from ...snippets.symbolic import Sym
from .vmath_render import function_name, render_function

INDENT = "    "


@dataclass
class LoopFrame:
    loop_id: int
    remaining: str | None = None   # tail loops: the C variable holding how many elements are left


@dataclass
class KernelContext:
    """What emitters need while emitting one kernel: the Linear IR, the C lines so far, the variables."""
    lir: LinearIR
    lanes: int
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    buffer_regs: dict[tuple, Reg] = field(default_factory=dict)
    buffer_dtypes: dict[tuple, str] = field(default_factory=dict)
    loops: list[LoopFrame] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)   # name -> C type, declared at the top
    math_functions: dict[str, str] = field(default_factory=dict)   # C name -> definition, before the kernel

    # ---- text --------------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append(INDENT * self.depth + text)

    def open(self, text: str = "") -> None:
        self.line(f"{text} {{" if text else "{")
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1
        self.line("}")

    def comment(self, expr, detail: str = "") -> None:
        self.line(f"/* {expr.name}{': ' + detail if detail else ''} */")

    # ---- variables ---------------------------------------------------------------------------------
    def variable(self, name: str, ctype: str) -> str:
        self.variables.setdefault(name, ctype)
        return name

    def vec(self, reg: Reg) -> str:
        return self.variable(f"v{reg.index}", "vf")

    def ptr(self, reg: Reg) -> str:
        return self.variable(f"{'s' if reg.kind == 'scratch' else 'p'}{reg.index}", "char *")

    def counter(self, reg: Reg) -> str:
        return self.variable(f"n{reg.index}", "int64_t")

    def spill_slot(self, slot: int) -> str:
        return self.variable(f"spill{slot}", "vf")

    def math_call(self, op: str, params: dict, args: list[str]) -> str:
        """A call of math library function `op` (rendered into this kernel's source on first use)."""
        name = function_name(op, params)
        if name not in self.math_functions:
            self.math_functions[name] = render_function(op, params, self.lanes)
        return f"{name}({', '.join(args)})"

    # ---- runtime integers ----------------------------------------------------------------------------
    @staticmethod
    def sym(s: Sym) -> str:
        """A C expression for a polynomial over the master dims `D0, D1, ...` (`4 * D1 - 64`)."""
        if s.is_const:
            return str(s.value)
        text = ""
        for mono, coef in sorted(s.terms, key=lambda t: -len(t[0])):
            factors = ([] if abs(coef) == 1 else [str(abs(coef))]) + [f"D{d}" for d in mono]
            term = " * ".join(factors) or "1"
            text += (" - " if coef < 0 else " + ") + term if text else ("-" if coef < 0 else "") + term
        return text

    def operand(self, s: Sym) -> str:
        """sym(s), parenthesised when it is a sum, to be an operand of * / % or a cast."""
        return f"({self.sym(s)})" if len(s.terms) > 1 else self.sym(s)

    def times(self, factor: str, s: Sym) -> str:
        return f"{factor} * {self.operand(s)}"

    # ---- data pointers -------------------------------------------------------------------------------
    def buffer_ptr(self, buffer) -> str:
        return self.ptr(self.buffer_regs[tuple(buffer)])

    def shift_buffer(self, buffer_reg: Reg, elements: Sym, data_size: int, times: str | None = None) -> None:
        """Move a data pointer by `elements` (times the runtime count `times`) elements of `data_size` bytes."""
        amount = elements * data_size
        if amount.is_zero:
            return
        negative = all(coef < 0 for _, coef in amount.terms)
        if negative:
            amount = -amount
        text = self.sym(amount) if times is None else self.times(times, amount)
        self.line(f"{self.ptr(buffer_reg)} {'-=' if negative else '+='} {text};")

    def rebase_buffers(self, exprs) -> None:
        """Point the registers of the scratch buffers these expressions use at their rows (of the innermost
        dim, f32)."""
        done = set()
        for e in exprs:
            key = tuple(e.attrs.get("buffer", ("",)))
            if key[0] == "scratch" and (key, e.attrs["row"]) not in done:
                done.add((key, e.attrs["row"]))
                offset = self.lir.dim(len(self.lir.master_shape) - 1) * (4 * e.attrs["row"])
                where = "" if offset.is_zero else f" + {self.sym(offset)}"
                self.line(f"{self.ptr(self.buffer_regs[key])} = (char *)scratch{where};")

    # ---- tails -----------------------------------------------------------------------------------------
    def remaining(self) -> str | None:
        """How many elements the innermost tail loop being emitted has left (None outside tails)."""
        for frame in reversed(self.loops):
            if frame.remaining is not None:
                return frame.remaining
        return None

    def tail_mask(self) -> str | None:
        rem = self.remaining()
        return None if rem is None else f"vm_first({rem})"


class CKernelEmitter:
    def __init__(self, lir: LinearIR, lanes: int, name: str):
        self.lir = lir
        self.lanes = lanes
        self.name = name

    def emit(self) -> str:
        lir = self.lir
        ctx = KernelContext(lir, self.lanes)
        params, results = lir.parameters(), lir.results()
        for key, (reg, dtype) in kernel_buffers(lir).items():
            ctx.buffer_regs[key] = reg
            ctx.buffer_dtypes[key] = dtype
        preamble = self._preamble()
        body = [e for e in lir.expressions if e not in preamble and e.op != "Result"]
        for e in preamble:
            e.emitter.emit(ctx, e)
        ctx.open("for (int64_t it = begin; it < end; it++)")
        self._set_data_pointers(ctx, params, results)
        for e in body:
            e.emitter.emit(ctx, e)
        ctx.close()
        return self._function(ctx)

    def _preamble(self) -> list:
        """Loop-free Parameters and Scalars are set once, before the parallel domain's loop, with the
        Spills that save them (a Spill must run before another Scalar reuses the register)."""
        preamble: list = []
        for e in self.lir.expressions:
            if e.op in ("Parameter", "Scalar") and not e.loop_ids and not e.attrs.get("rematerialized"):
                preamble.append(e)
            elif e.op == "Spill" and any(e.input_source(0) is p for p in preamble):
                preamble.append(e)
        return preamble

    def _set_data_pointers(self, ctx: KernelContext, params, results) -> None:
        """Decompose the parallel iteration into indices and point every buffer at its first element."""
        lir = self.lir
        ctx.line("/* the data pointers of this iteration of the parallel domain */")
        if lir.parallel_rank:
            ctx.line("int64_t rest = it;")
        for d in reversed(range(lir.parallel_rank)):
            ctx.line(f"const int64_t i{d} = rest % D{d};" + (f" rest /= D{d};" if d else ""))
        buffers = [(p.out_descs[0], ("param", i), p) for i, p in enumerate(params)] + \
                  [(r.in_descs[0], ("result", i), r) for i, r in enumerate(results)]
        for k, (desc, key, e) in enumerate(buffers):
            size = 1 if ctx.buffer_dtypes[key] == "bool" else 4
            terms = [ctx.times(f"i{d}", stride(lir, desc.shape, desc.layout, d, row_pitch(e)) * size)
                     for d in range(lir.parallel_rank) if desc.shape[d] != 1]
            ctx.line(f"{ctx.buffer_ptr(key)} = " + " + ".join([f"(char *)ptrs[{k}]", *terms]) + ";")

    def _function(self, ctx: KernelContext) -> str:
        rank = len(self.lir.master_shape)
        by_type: dict[str, list[str]] = {}
        for name in sorted(ctx.variables, key=_natural):
            by_type.setdefault(ctx.variables[name], []).append(name)
        decls = [f"const int64_t D{d} = dims[{d}];" for d in range(rank + len(self.lir.pitched))]   # (pitches last)
        decls += [_declaration(ctype, names) for ctype, names in by_type.items()]
        header = [
            f"/* snipjit kernel {self.name}: {len(self.lir.expressions)} Linear IR expressions, "
            f"master shape {list(self.lir.master_shape)}, parallel rank {self.lir.parallel_rank} */",
            "#include <stdint.h>",
            f"#define VM_LANES {self.lanes}",
            '#include "vmath.h"',
            "",
            *ctx.math_functions.values(),
            f"void {self.name}(void **ptrs, const int64_t *dims, int64_t begin, int64_t end, void *scratch)",
            "{",
        ]
        return "\n".join(header + [INDENT + d for d in decls] + ctx.lines + ["}", ""])


def _natural(name: str) -> tuple[str, int]:
    """v2 before v10."""
    head = name.rstrip("0123456789")
    return head, int(name[len(head):] or 0)


def _declaration(ctype: str, names: list[str]) -> str:
    if ctype.endswith("*"):
        return ctype[:-1].rstrip() + " " + ", ".join("*" + n for n in names) + ";"
    return f"{ctype} {', '.join(names)};"
