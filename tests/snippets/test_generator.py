"""Generator: the target-independent preparation (registers with spilling until they fit, tails, offset
clean-ups) in order, emitter binding through the TargetMachine, and compile_subgraph end to end — on a
fake target that records instead of compiling."""
import pytest

from lir_helpers import lowered
from sample_graphs import WIDE
from snipjit import parse_graph, print_graph
from snipjit.snippets.subgraph_compiler import compile_subgraph
from snipjit.snippets.dataflow.pipeline import data_flow_pipeline
from snipjit.snippets.lowered.pipeline import control_flow_pipeline
from snipjit.snippets.generator import Generator
from snipjit.snippets.lowered.linear_ir import LinearIRError
from snipjit.snippets.target_machine import Emitter, KernelFunction, TargetError, TargetMachine

PREPARATION = ["InitLiveRanges", "AssignRegisters", "InsertSpecificIterations", "CleanupLoopOffsets",
               "OptimizeLoopSingleEvaluation"]


class RecordingEmitter(Emitter):
    def __init__(self, op: str):
        self.op = op

    def emit(self, ctx, expr) -> None:
        ctx.append(expr.name)


class FakeTarget(TargetMachine):
    name = "fake"

    def __init__(self, lanes: int = 8, registers: dict | None = None, unsupported: tuple = ()):
        self.lanes, self.regs, self.unsupported = lanes, registers or {"vec": 16, "gpr": 32}, unsupported

    @property
    def vector_lanes(self) -> int:
        return self.lanes

    @property
    def registers(self) -> dict[str, int]:
        return self.regs

    def supports(self, op: str) -> bool:
        return op not in self.unsupported

    def emitter_for(self, expr) -> Emitter:
        return RecordingEmitter(expr.op)

    def compile_kernel(self, lir, name: str) -> KernelFunction:
        emitted: list = []
        for e in lir.expressions:
            e.emitter.emit(emitted, e)
        return KernelFunction(name, fn=None, source="\n".join(emitted))


def passes_run(text: str, target: FakeTarget) -> tuple[list[str], object]:
    lir = lowered(text, lanes=target.vector_lanes)
    names: list[str] = []
    Generator(target).prepare(lir, lambda name, ir: names.append(name))
    return names, lir


def test_preparation_order():
    names, lir = passes_run(WIDE, FakeTarget())
    assert names == PREPARATION
    assert lir.loop_manager[1].is_tail and lir.loop_manager[1].evaluate_once


def test_spilling_until_the_registers_suffice():
    names, lir = passes_run(WIDE, FakeTarget(registers={"vec": 3, "gpr": 32}))
    assert names[:2] == ["InitLiveRanges", "InsertRegSpills"]
    assert names[-len(PREPARATION) + 1:] == PREPARATION[1:]
    assert names.count("InitLiveRanges") == names.count("InsertRegSpills") + 1
    vec = {d.reg.index for e in lir.expressions for d in e.in_descs + e.out_descs
           if d.reg is not None and d.reg.kind == "vec"}
    assert vec <= {0, 1, 2}
    assert any(e.op == "Spill" for e in lir.expressions)


def test_too_few_pointer_registers_is_an_error():
    with pytest.raises(LinearIRError, match="more gpr registers"):
        passes_run(WIDE, FakeTarget(registers={"vec": 16, "gpr": 2}))


def test_generate_binds_an_emitter_to_every_expression():
    target = FakeTarget()
    lir = lowered(WIDE, lanes=8)
    kernel = Generator(target).generate(lir, "k")
    assert kernel.name == "k"
    assert all(isinstance(e.emitter, RecordingEmitter) and e.emitter.op == e.op for e in lir.expressions)
    assert kernel.source.splitlines() == [e.name for e in lir.expressions]


def test_an_op_without_emitter_is_a_target_error():
    with pytest.raises(TargetError, match="target fake has no emitter for Tanh"):
        Generator(FakeTarget(unsupported=("Tanh",))).generate(lowered(WIDE, lanes=8), "k")


def test_compile_subgraph_end_to_end():
    body = parse_graph("""graph(x: f32[2,?,20], y: f32[20]) -> [z, w] {
      const c: f32[] = 3.0
      [a] = Pow(x, c)
      [z] = Add(a, y)
      [w] = Neg(y)
    }""")
    text = print_graph(body)
    stages: list[tuple[str, str]] = []
    cs = compile_subgraph(body, FakeTarget(lanes=8), name="k", loop_depth=2,
                          observer=lambda stage, name, ir: stages.append((stage, name)))
    assert print_graph(body) == text                       # the caller's body is not modified
    assert [s for s, _ in stages] == (["dataflow"] * len(data_flow_pipeline().names) +
                                      ["control_flow"] * len(control_flow_pipeline().names) + ["generator"] * 5)
    assert [n for s, n in stages if s == "generator"] == PREPARATION
    assert cs.master_shape == (2, None, 20) and cs.parallel_rank == 1
    assert cs.input_shapes == [(2, None, 20), (1, 1, 20)]
    assert cs.output_shapes == [(2, None, 20), (1, 1, 20)]
    assert cs.kernel.name == "k"
    assert "PowerStatic" in cs.linear_ir and "lanes=8" in cs.linear_ir
    assert "loop 1: dim 2 work=20 inc=8" in cs.linear_ir
