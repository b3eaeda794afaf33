"""Make the tiny BERT fixture of the compiler's tests: python tests/data/make_tiny_bert.py

Writes, beside this script:
- tiny_bert.onnx: transformers.BertModel with 2 layers, hidden 32, 4 heads, intermediate 64,
  vocab 100, 64 positions, random weights from seed 0, eval mode, eager attention; exported by
  torch's classic (TorchScript) exporter at opset 17 with dynamic "batch" and "sequence" axes.
  Inputs input_ids and attention_mask (int64 [batch, sequence]); outputs last_hidden_state
  (f32 [batch, sequence, 32]) and pooler_output (f32 [batch, 32]).
- tiny_bert_expected.npz: PyTorch's outputs for the cases (batch, sequence) in `cases`
  ([[1, 7], [2, 16], [3, 33]]); case i has arrays input_ids_i, attention_mask_i,
  last_hidden_state_i and pooler_output_i. Every mask row has some padding (zeros at the end).

Then checks, if onnxruntime is installed, that the ONNX file reproduces PyTorch within 1e-4, and
prints the op types it contains. The export is bench.models.export_bert, the same code that makes
the benchmark's BERT encoder.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root, for bench.models

from bench.models import BERT_INPUTS, BERT_OUTPUTS, BertSpec, bert_feeds, build_bert, export_bert  # noqa: E402

SPEC = BertSpec(layers=2, hidden=32, heads=4, intermediate=64, vocab=100, max_positions=64, seed=0)
CASES = [(1, 7), (2, 16), (3, 33)]
MODEL = HERE / "tiny_bert.onnx"
EXPECTED = HERE / "tiny_bert_expected.npz"
TOLERANCE = 1e-4


def torch_outputs(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    module = build_bert(SPEC)
    with torch.inference_mode():
        outputs = module(*(torch.from_numpy(feeds[name]) for name in BERT_INPUTS))
    return [out.numpy() for out in outputs]


def main() -> int:
    export_bert(SPEC, MODEL)
    rng = np.random.default_rng(SPEC.seed)
    arrays: dict[str, np.ndarray] = {"cases": np.array(CASES, dtype=np.int64)}
    for index, (batch, sequence) in enumerate(CASES):
        feeds = bert_feeds(batch, sequence, SPEC.vocab, rng)
        outputs = dict(zip(BERT_OUTPUTS, torch_outputs(feeds)))
        arrays |= {f"{name}_{index}": value for name, value in (feeds | outputs).items()}
    np.savez(EXPECTED, **arrays)
    print(f"wrote {MODEL.name} ({MODEL.stat().st_size / 1024:.0f} KiB) and {EXPECTED.name}")
    return check()


def check() -> int:
    import onnx

    ops = collections.Counter(node.op_type for node in onnx.load(MODEL).graph.node)
    print("op types:", ", ".join(f"{op} {n}" for op, n in sorted(ops.items())))
    try:
        import onnxruntime
    except ImportError:
        print("onnxruntime is not installed: outputs not checked")
        return 0
    session = onnxruntime.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    expected = np.load(EXPECTED)
    worst = 0.0
    for index, (batch, sequence) in enumerate(expected["cases"]):
        feeds = {name: expected[f"{name}_{index}"] for name in BERT_INPUTS}
        for name, got in zip(BERT_OUTPUTS, session.run(list(BERT_OUTPUTS), feeds)):
            error = float(np.max(np.abs(got - expected[f"{name}_{index}"])))
            worst = max(worst, error)
            print(f"batch {batch}, sequence {sequence}: {name} max abs error {error:.1e}")
    if worst > TOLERANCE:
        print(f"FAILED: onnxruntime differs from PyTorch by {worst:.1e} > {TOLERANCE}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
