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

from ..snippets.lowered.linear_ir import LinearIR


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
