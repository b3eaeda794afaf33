"""IR dumps after every Snippets pass, and per-step performance counters."""
import json

import numpy as np

import snipjit
from snipjit.targets import isa
from snipjit.snippets.dataflow.pipeline import data_flow_pipeline
from snipjit.snippets.lowered.pipeline import control_flow_pipeline

GRAPH = """graph(x: f32[4,37], y: f32[37]) -> [z] {
  const two: f32[] = 2.0
  [t] = Mul(x, two)
  [u] = Add(t, y)
  [z] = Softmax(u) {axis=-1}
}"""


def test_dump_dir_holds_the_ir_after_every_pass_and_the_kernel(tmp_path):
    snipjit.compile(snipjit.parse_graph(GRAPH), dump_dir=tmp_path)
    (kernel_dir,) = tmp_path.iterdir()
    names = sorted(p.name for p in kernel_dir.iterdir())
    for p in data_flow_pipeline().names:
        assert any(n.endswith(f"_dataflow_{p}.txt") for n in names), p
    for p in control_flow_pipeline().names:
        assert any(n.endswith(f"_control_flow_{p}.txt") for n in names), p
        (js,) = [n for n in names if n.endswith(f"_control_flow_{p}.json")]
        assert json.loads((kernel_dir / js).read_text())["expressions"]
    assert any(n.endswith("_generator_InsertSpecificIterations.txt") for n in names)
    source = kernel_dir / "kernel.ll"
    if source.exists():   # the LLVM target, with its assembly
        assert "define void" in source.read_text()
        register = {512: "zmm", 256: "ymm", 128: "xmm"}[isa.current().level.vector_bits]
        assert register in (kernel_dir / "kernel.s").read_text()
    else:                 # the C target (SNIPJIT_JIT=c)
        assert "void kernel_" in (kernel_dir / "kernel.c").read_text()


def test_profile_counts_every_step():
    b = snipjit.GraphBuilder()
    x = b.input("x", "f32", [64, 256])
    w = b.const(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32))
    b.output(b.Softmax(b.Relu(b.MatMul(x, w)), axis=-1), "y")
    cm = snipjit.compile(b.build())
    prof = cm.profile({"x": np.ones((64, 256), np.float32)}, runs=5)
    assert {s.kind for s in prof.steps} == {s.kind for s in cm.plan}
    assert all(s.calls == 5 and s.bytes > 0 for s in prof.steps)
    assert 0 < prof.step_seconds <= prof.total_seconds
    table = prof.table()
    assert "GB/s" in table and "per inference" in table
