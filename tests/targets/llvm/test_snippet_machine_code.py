"""The Snippets kernels keep masked memory operations out of their loops at the AVX2 level, where they
are vmaskmov (slow on AMD, and their masks occupy vector registers): the elementwise, Softmax and
LayerNorm kernels' loops over whole vectors read and write without masks, their tails apart (the
InsertSpecificIterations pass gives the tail its own, loop-free body). Compiled for Haswell and Zen 3."""
import pytest
from machine_code import innermost_loops

from snipjit.snippets.subgraph_compiler import compile_subgraph
from snipjit import parse_graph
from snipjit.targets import isa
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.target import LLVMTarget

BODIES = {
    "elementwise": """graph(x: f32[?,?], y: f32[?,?]) -> [z] {
      [a] = Mul(x, y)
      [b] = Sigmoid(a)
      [z] = Add(b, x)
    }""",
    "softmax": """graph(x: f32[?,?]) -> [s] {
      [s] = Softmax(x) {axis=-1}
    }""",
    "layernorm": """graph(x: f32[?,?], g: f32[?], b: f32[?]) -> [l] {
      [l] = LayerNormalization(x, g, b) {axis=-1, epsilon=1e-5}
    }""",
}


@pytest.mark.parametrize("cpu", ["haswell", "znver3"])
@pytest.mark.parametrize("body", sorted(BODIES))
def test_loops_at_the_avx2_level_have_no_masked_memory_operations(cpu, body):
    target = LLVMTarget(vector_lanes=isa.AVX2.f32_lanes)
    kernel = compile_subgraph(parse_graph(BODIES[body]), target, name="isa_discipline").kernel
    loops = innermost_loops(jit.assembly_for(kernel.source, cpu))
    vector_loops = [loop for loop in loops if any("%ymm" in line for line in loop)]
    assert vector_loops, "the kernel has no loop over whole vectors"
    assert not [line for loop in vector_loops for line in loop if "maskmov" in line]
