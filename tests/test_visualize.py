"""The picture of a compiled model: fused subgraphs as clusters, steps coloured by implementation."""
import shutil
from pathlib import Path

import pytest

import snipjit
from snipjit.cli import main
from snipjit.visualize import COLOURS, to_dot

GRAPH = """graph(x: f32[8,64], w: f32[64,64], r: f32[8,64], g: f32[64], b: f32[64]) -> [y] {
  [m] = MatMul(x, w)
  [s] = Add(m, r)
  [y] = LayerNormalization(s, g, b) {axis=-1}
}"""


def test_dot_has_a_cluster_per_subgraph_and_colours_by_kind():
    cm = snipjit.compile(snipjit.parse_graph(GRAPH))
    dot = to_dot(cm)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == sum(s.kind == "snippet" for s in cm.plan) == 1
    assert 'label="LayerNormalization"' in dot and "[blas]" in dot
    assert COLOURS["blas"] in dot and COLOURS["snippet"] in dot
    assert '"in:x"' in dot and '"out:y"' in dot


def test_cli_writes_dot_and_svg(tmp_path):
    path = str(Path(__file__).parent / "data" / "tiny_bert.onnx")
    assert main(["explain", path, "--dot", str(tmp_path / "m.dot")]) == 0
    assert (tmp_path / "m.dot").read_text().startswith("digraph")
    if shutil.which("dot") is None:
        with pytest.raises(FileNotFoundError, match="Graphviz"):
            main(["explain", path, "--svg", str(tmp_path / "m.svg")])
    else:
        assert main(["explain", path, "--svg", str(tmp_path / "m.svg")]) == 0
        assert "<svg" in (tmp_path / "m.svg").read_text()
