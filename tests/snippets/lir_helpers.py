"""Helpers for Snippets compiler tests: IR text → optimized body → Linear IR after any control-flow or
generator-preparation pass, and compact views of the Linear IR to assert on."""
from __future__ import annotations

import numpy as np

from snipjit import parse_graph
from snipjit.ir import Graph
from snipjit.ops.interpreter import run_graph_reference
from snipjit.snippets.dataflow.pipeline import optimize_body
from snipjit.snippets.lowered.linear_ir import LinearIR
from snipjit.snippets.lowered.passes.assign_registers import AssignRegisters
from snipjit.snippets.lowered.passes.cleanup_loop_offsets import CleanupLoopOffsets
from snipjit.snippets.lowered.passes.init_live_ranges import InitLiveRanges
from snipjit.snippets.lowered.passes.insert_specific_iterations import InsertSpecificIterations
from snipjit.snippets.lowered.passes.optimize_loop_single_evaluation import OptimizeLoopSingleEvaluation
from snipjit.snippets.lowered.pipeline import control_flow_pipeline

LANES = 16
REGISTERS = {"vec": 32, "gpr": 64}


def optimized(text: str) -> Graph:
    """The body parsed from IR text, through the data-flow optimizer."""
    return optimize_body(parse_graph(text))


def feeds_for(body: Graph, seed: int = 0, dynamic: int = 3) -> list[np.ndarray]:
    """Random inputs for a body (dynamic dims take size `dynamic`; bool inputs random masks)."""
    rng = np.random.default_rng(seed)
    out = []
    for v in body.inputs:
        shape = [d if isinstance(d, int) else dynamic for d in v.type.shape]
        data = rng.normal(0, 2, shape)
        out.append(data > 0 if v.type.dtype.name == "bool" else data.astype(v.type.dtype.np))
    return out


def assert_same_results(original: Graph, optimized: Graph, feeds: list[np.ndarray] | None = None,
                        exact_zeros: bool = False) -> None:
    """Both bodies compute the same on `feeds` (default: random inputs); the optimized one may have
    rank-aligned inputs and outputs. With `exact_zeros`, signed zeros must match too."""
    feeds = feeds if feeds is not None else feeds_for(original)
    want = run_graph_reference(original, feeds)
    got = run_graph_reference(optimized, [a.reshape((1,) * (len(v.type.shape) - a.ndim) + a.shape)
                                          for a, v in zip(feeds, optimized.inputs)])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g.reshape(w.shape), w)
        if exact_zeros:
            np.testing.assert_array_equal(np.signbit(g.reshape(w.shape)), np.signbit(w))


def lowered(text: str, until: str | None = None, loop_depth: int = 1, lanes: int = LANES) -> LinearIR:
    """The Linear IR of a body after the control-flow pipeline has run up to and including the pass
    named `until` (None: the whole pipeline; "" : none of it)."""
    lir = LinearIR.from_body(optimized(text), lanes)
    if until == "":
        return lir
    pipeline = control_flow_pipeline(loop_depth)
    if until is not None and until not in pipeline.names:
        raise ValueError(f"no control-flow pass {until!r}; passes: {pipeline.names}")
    for p in pipeline.passes:
        p.run(lir)
        if p.name == until:
            break
    return lir


PREPARATION = ("InitLiveRanges", "AssignRegisters", "InsertSpecificIterations", "CleanupLoopOffsets",
               "OptimizeLoopSingleEvaluation")


def prepared(text: str, until: str = PREPARATION[-1], loop_depth: int = 1, lanes: int = LANES,
             registers: dict[str, int] = REGISTERS) -> LinearIR:
    """The Linear IR after the whole control-flow pipeline and the generator's preparation passes up
    to and including `until` (no spilling: the registers must suffice)."""
    if until not in PREPARATION:
        raise ValueError(f"no preparation pass {until!r}; passes: {PREPARATION}")
    lir = lowered(text, loop_depth=loop_depth, lanes=lanes)
    passes = [InitLiveRanges(), AssignRegisters(registers), InsertSpecificIterations(), CleanupLoopOffsets(),
              OptimizeLoopSingleEvaluation()]
    for p in passes:
        changed = p.run(lir)
        if p.name == "AssignRegisters" and not changed:
            raise AssertionError(f"registers {registers} do not suffice: spill {lir.spill_candidates}")
        if p.name == until:
            break
    return lir


def ops(lir: LinearIR) -> list[str]:
    """The expressions' ops in control-flow order."""
    return [e.op for e in lir.expressions]


def layout(lir: LinearIR) -> list[str]:
    """Ops in order: loop markers with their loop id (`LoopBegin0`), expressions inside loops with their
    loop ids (`Add[0]`), the others bare."""
    out = []
    for e in lir.expressions:
        if e.op in ("LoopBegin", "LoopEnd"):
            out.append(f"{e.op}{e.attrs['loop_id']}")
        elif e.loop_ids:
            out.append(f"{e.op}{e.loop_ids}")
        else:
            out.append(e.op)
    return out


def find(lir: LinearIR, op: str) -> list:
    return [e for e in lir.expressions if e.op == op]


def one(lir: LinearIR, op: str):
    found = find(lir, op)
    assert len(found) == 1, f"expected one {op}, found {len(found)}:\n{lir.debug_print()}"
    return found[0]


def port_of(info, expr, kind: str = "in", index: int = 0):
    """The LoopPort of `info` on `expr`'s port."""
    for lp in info.ports:
        if lp.port.expr is expr and lp.port.type == kind and lp.port.index == index:
            return lp
    raise AssertionError(f"{expr.name}.{kind}{index} is not a port of the loop")


def checked_if_possible() -> dict:
    """Compile options that bounds-check every kernel access, on targets that can (the LLVM target; the C
    target, selected with SNIPJIT_JIT=c, runs the same tests unchecked)."""
    from snipjit.targets import get_target
    return {"checked": True} if get_target().supports_checked else {}
