"""The picture of a compiled model: fused subgraphs as clusters, steps coloured by implementation."""
import shutil
from pathlib import Path

import pytest

import snipjit
from snipjit.cli import main
from snipjit.visualize import COLOURS, to_dot

TINY_BERT = str(Path(__file__).parent / "data" / "tiny_bert.onnx")

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


def test_cli_writes_dot(tmp_path):
    assert main(["explain", TINY_BERT, "--dot", str(tmp_path / "m.dot")]) == 0
    assert (tmp_path / "m.dot").read_text().startswith("digraph")


def test_cli_without_graphviz_names_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["explain", TINY_BERT, "--svg", str(tmp_path / "m.svg")]) == 2
    assert "Graphviz 'dot' program" in capsys.readouterr().err
    assert not (tmp_path / "m.svg").exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
def test_cli_renders_svg(tmp_path):
    assert main(["explain", TINY_BERT, "--svg", str(tmp_path / "m.svg")]) == 0
    assert "<svg" in (tmp_path / "m.svg").read_text()
