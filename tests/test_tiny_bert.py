"""A BERT-style encoder exported from PyTorch with dynamic batch/sequence axes compiles once and runs
several shapes, matching PyTorch's outputs (stored by tests/data/make_tiny_bert.py)."""
from pathlib import Path

import numpy as np
import pytest

import snipjit

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def expected():
    return np.load(DATA / "tiny_bert_expected.npz")


@pytest.fixture(scope="module")
def compiled():
    return snipjit.compile(DATA / "tiny_bert.onnx")


def cases(expected):
    return range(len(expected["cases"]))


def test_dynamic_axes_are_kept(compiled):
    assert [v.type.shape for v in compiled.graph.inputs] == [("batch", "sequence")] * 2


def test_matches_pytorch_for_every_shape_on_one_compilation(compiled, expected):
    kernels = {id(s.kernel) for s in compiled.plan}
    for k in cases(expected):
        feeds = {"input_ids": expected[f"input_ids_{k}"], "attention_mask": expected[f"attention_mask_{k}"]}
        outs = compiled.run(feeds)
        for name, out in zip(compiled.output_names, outs):
            np.testing.assert_allclose(out, expected[f"{name}_{k}"], rtol=1e-4, atol=1e-4)
    assert {id(s.kernel) for s in compiled.plan} == kernels
    assert len(compiled.program.plans()) == len(cases(expected))


def test_fused_kernels_are_used(compiled):
    kinds = {s.kind for s in compiled.plan}
    assert {"snippet", "blas"} <= kinds
    assert any(s.ops == ["MatMul", "Add", "Gelu"] for s in compiled.plan if s.kind == "blas")   # the GELU in the store
    attention = [s for s in compiled.plan if "Softmax" in s.ops]   # one attention step per layer, heads included
    assert len(attention) == 2 and all(s.kind == "snippet" and s.ops.count("Transpose") == 4 for s in attention)


def test_shape_computations_do_not_run_per_inference(compiled, expected):
    feeds = {"input_ids": expected["input_ids_0"], "attention_mask": expected["attention_mask_0"]}
    compiled.run(feeds)
    plan = compiled.program.plan_for([snipjit.ir.TensorType.of("i64", feeds["input_ids"].shape)] * 2)
    skipped_ops = {compiled.plan[i].node.op for i in plan.resolution.skipped}
    assert "Shape" in skipped_ops
    executed = [s.node.op for s, m in zip(compiled.plan, plan.modes) if m != "skip"]
    assert "Shape" not in executed
