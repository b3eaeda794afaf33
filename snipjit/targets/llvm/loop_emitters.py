"""LLVM emitters for LoopBegin/LoopEnd: counted loops, single-evaluation loops and masked tails."""
from __future__ import annotations

from llvmlite import ir

from ...snippets.target_machine import Emitter
from .kernel_emitter import I64, KernelContext, LoopFrame


class LoopBeginEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        b = ctx.builder
        loop_id = expr.attrs["loop_id"]
        info = ctx.lir.loop_manager[loop_id]
        body = b.function.append_basic_block(f"loop{loop_id}.body")
        exit_ = b.function.append_basic_block(f"loop{loop_id}.exit")
        inc = ir.Constant(I64, info.increment)
        frame = LoopFrame(loop_id, body, exit_, expr.out_regs[0])
        if not expr.loop_ids and info.parent_id is None:   # a nest begins: scratch buffers start at their rows
            ctx.rebase_buffers(e for e in ctx.lir.expressions if loop_id in e.loop_ids)
        work = ctx.sym(info.work_amount)
        if info.is_tail:
            frame.remaining = b.urem(work, inc) if info.parent_id is not None else work
            b.cbranch(b.icmp_signed(">", frame.remaining, ir.Constant(I64, 0)), body, exit_)
        elif info.evaluate_once:
            b.branch(body)
        else:
            ctx.write(frame.counter, work)
            b.cbranch(b.icmp_signed(">=", work, inc), body, exit_)
        ctx.loops.append(frame)
        b.position_at_end(body)


class LoopEndEmitter(Emitter):
    def emit(self, ctx: KernelContext, expr) -> None:
        b = ctx.builder
        frame = ctx.loops.pop()
        info = ctx.lir.loop_manager[frame.loop_id]
        step = frame.remaining if frame.remaining is not None else ir.Constant(I64, info.increment)
        for lp in info.ports:
            if lp.is_incremented and not lp.ptr_increment.is_zero:
                elements = b.mul(ctx.sym(lp.ptr_increment), step)
                ctx.shift_buffer(self._buffer_reg(ctx, lp), elements, lp.data_size)
        if info.is_tail or info.evaluate_once:
            b.branch(frame.exit)
        else:
            counter = b.sub(ctx.read(frame.counter, I64), step)
            ctx.write(frame.counter, counter)
            b.cbranch(b.icmp_signed(">=", counter, step), frame.body, frame.exit)
        b.position_at_end(frame.exit)
        for lp in info.ports:
            if not lp.finalization_offset.is_zero:
                ctx.shift_buffer(self._buffer_reg(ctx, lp), ctx.sym(lp.finalization_offset), lp.data_size)

    @staticmethod
    def _buffer_reg(ctx: KernelContext, lp):
        return ctx.buffer_regs[tuple(lp.port.expr.attrs["buffer"])]
