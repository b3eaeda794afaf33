"""Compile one Subgraph body into a kernel: data-flow optimizer → Linear IR → control-flow passes →
generator → target. `observer(stage, pass_name, ir)` sees the IR after every pass (for dumps)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.graph import Graph
from . import brgemm_blocks
from .target_machine import KernelFunction, TargetMachine
from .dataflow.pipeline import optimize_body
from .generator import Generator
from .lowered.linear_ir import LinearIR
from .lowered.pipeline import control_flow_pipeline
from .pass_manager import PositionedPass

Observer = Callable[[str, str, object], None]


@dataclass
class CompiledSnippet:
    kernel: KernelFunction
    master_shape: tuple          # symbolic master shape at compile time
    parallel_rank: int           # leading master dims the kernel's parallel domain covers
    input_shapes: list[tuple]    # rank-aligned compile-time shapes of the body inputs
    output_shapes: list[tuple]   # rank-aligned compile-time shapes of the body outputs
    linear_ir: str               # the final Linear IR, for explain()
    scratch_rows: int = 0        # Buffer rows (of the innermost dim) each thread's scratchpad needs

    def metadata(self) -> dict:
        """Everything but the kernel, as JSON-able data (for the disk cache)."""
        return {"master_shape": list(self.master_shape), "parallel_rank": self.parallel_rank,
                "input_shapes": [list(s) for s in self.input_shapes],
                "output_shapes": [list(s) for s in self.output_shapes], "linear_ir": self.linear_ir,
                "scratch_rows": self.scratch_rows}

    @staticmethod
    def from_metadata(kernel: KernelFunction, meta: dict) -> "CompiledSnippet":
        return CompiledSnippet(kernel, tuple(meta["master_shape"]), meta["parallel_rank"],
                               [tuple(s) for s in meta["input_shapes"]],
                               [tuple(s) for s in meta["output_shapes"]], meta["linear_ir"], meta["scratch_rows"])


def brgemm_rows(body: Graph) -> bool:
    """Whether a body with Brgemms runs a block of rows per iteration of its parallel domain: all the rows
    of its second-innermost dim, when they and the innermost are static and their block fits
    `brgemm_blocks.BLOCK_ELEMENTS` (else a row per iteration, which streams B once per row: 2.5-4x slower
    for 512-1,024 keys)."""
    master = body.meta.get("master_shape", ())
    if len(master) < 2 or not any(n.op == "Brgemm" for n in body.nodes):
        return False
    rows, columns = master[-2], master[-1]
    return isinstance(rows, int) and isinstance(columns, int) and rows * columns <= brgemm_blocks.BLOCK_ELEMENTS


def compile_subgraph(body: Graph, target: TargetMachine, name: str = "kernel", loop_depth: int = 1,
                     data_flow_passes: list[PositionedPass] = (), control_flow_passes: list[PositionedPass] = (),
                     observer: Observer | None = None, checked: bool = False) -> CompiledSnippet:
    def watch(stage: str):
        return (lambda pass_name, ir: observer(stage, pass_name, ir)) if observer else None

    optimized = optimize_body(body, data_flow_passes, watch("dataflow"))
    if brgemm_rows(optimized):
        loop_depth = 2   # a row loop around the nests, the Brgemms over the block of rows
    elif any(n.op == "ReduceLast" for n in optimized.nodes):
        loop_depth = 1   # reductions accumulate along the innermost loop, with statistics between nests
    lir = LinearIR.from_body(optimized, target.vector_lanes)
    control_flow_pipeline(loop_depth, control_flow_passes).run_all(lir, watch("control_flow"))
    kernel = Generator(target).generate(lir, name, watch("generator"), checked=checked)
    return CompiledSnippet(kernel, lir.master_shape, lir.parallel_rank,
                           [v.type.shape for v in optimized.inputs], [v.type.shape for v in optimized.outputs],
                           lir.debug_print(), getattr(lir, "scratch_rows", 0))
