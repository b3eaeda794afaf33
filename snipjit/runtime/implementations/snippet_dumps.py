"""Debug dumps of the Snippets compiler: the IR after every pass, the kernel source and assembly.

With `snipjit.compile(model, dump_dir="out")` (or SNIPJIT_DUMP_DIR=out), each kernel gets a folder
`out/<kernel>/` with `NN_<stage>_<pass>.txt` after every data-flow pass (the body graph), every
control-flow and generator pass (the Linear IR debug print, plus `.json`, its serialization), and the
kernel source (`kernel.ll` from the LLVM target, `kernel.c` from the C target) and `kernel.s` (assembly)
when the target gives them.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...snippets.lowered.linear_ir import LinearIR


def dump_dir(options: dict) -> Path | None:
    d = options.get("dump_dir") or os.environ.get("SNIPJIT_DUMP_DIR")
    return Path(d) if d else None


class PassDumper:
    """An observer for `compile_subgraph` that writes the IR after each pass into a folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.count = 0
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, stage: str, pass_name: str, ir) -> None:
        stem = self.folder / f"{self.count:02d}_{stage}_{pass_name}"
        self.count += 1
        stem.with_suffix(".txt").write_text(str(ir) + "\n")
        if isinstance(ir, LinearIR):
            stem.with_suffix(".json").write_text(ir.serialize() + "\n")

    def kernel(self, kernel, target_name: str = "llvm") -> None:
        if kernel.source:
            suffix = {"llvm": ".ll", "c": ".c"}.get(target_name, ".txt")
            (self.folder / f"kernel{suffix}").write_text(kernel.source)
        if kernel.asm is not None:
            (self.folder / "kernel.s").write_text(kernel.asm())


def plan_dump(program, plan) -> str:
    """One resolved plan step by step: how each step runs ("skip": resolved when planning, "view": shares
    its input's memory, "into": writes planned memory, "in place": writes it over a dead input's memory,
    "call": returns new arrays), then the arena."""
    names = {program.slots[id(v)]: v.name for v in program.graph.values() if id(v) in program.slots}
    lines = []
    for i, (step, mode) in enumerate(zip(program.steps, plan.modes)):
        outs = ", ".join(names.get(s, f"%{s}") for s in step.out_slots)
        over = plan.inplace_of.get(step.out_slots[0]) if step.out_slots else None
        if over is not None:
            mode, outs = "in place", f"{outs} (over {names.get(over, f'%{over}')})"
        lines.append(f"{i:4d} {mode:<8} {step.kind:<10} {'+'.join(step.ops):<40} -> {outs}")
    lines.append(f"arena {plan.memory.arena_size / 2**20:.2f} MiB: {len(plan.arena_slots)} planned buffers, "
                 f"{len(plan.view_of)} views, {len(plan.inplace_of)} in place")
    return "\n".join(lines)
