"""A picture of a compiled model: Graphviz DOT text, rendered to SVG when the `dot` binary exists.

Each step is a box coloured by its implementation kind; a fused Subgraph is drawn as a labelled cluster
holding its body's ops; edges follow the values between steps.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

COLOURS = {"snippet": "#B9D6E5", "blas": "#FFE17A", "reference": "#E6E6E6"}


def _quote(text: str) -> str:
    """A DOT string literal; newlines become DOT's line breaks."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _value_node(kind: str, v) -> str:
    label = _quote(v.name + "\n" + str(v.type))
    return f"  {_quote(kind + ':' + v.name)} [label={label}, shape=ellipse, fillcolor=white];"


def to_dot(cm) -> str:
    lines = ["digraph snipjit {", "  rankdir=TB;", "  node [shape=box, style=filled, fontname=Helvetica];"]
    producer: dict[int, str] = {}
    for v in cm.graph.inputs:
        lines.append(_value_node("in", v))
        producer[id(v)] = "in:" + v.name
    for i, step in enumerate(cm.plan):
        sid = f"step{i}"
        colour = COLOURS.get(step.kind, "#DDDDDD")
        body = step.node.attrs.get("body") if step.node.op == "Subgraph" else None
        if body is not None:
            lines.append(f"  subgraph cluster_{i} {{")
            lines.append(f"    label={_quote(f'{step.node.name} ({step.kind}: {len(body.nodes)} ops)')}; "
                         f"style=filled; fillcolor={_quote(colour)};")
            for k, n in enumerate(body.nodes):
                lines.append(f"    {_quote(f'{sid}.{k}')} [label={_quote(n.op)}, fillcolor=white];")
            for k in range(len(body.nodes) - 1):
                lines.append(f"    {_quote(f'{sid}.{k}')} -> {_quote(f'{sid}.{k + 1}')} [style=dotted];")
            lines.append("  }")
            anchor = f"{sid}.0"
        else:
            anchor = sid
            label = "+".join(step.ops) + "\n[" + step.kind + "]"
            lines.append(f"  {_quote(sid)} [label={_quote(label)}, fillcolor={_quote(colour)}];")
        for v in step.node.inputs:
            if v is not None and id(v) in producer:
                lines.append(f"  {_quote(producer[id(v)])} -> {_quote(anchor)};")
        last = f"{sid}.{len(body.nodes) - 1}" if body is not None else sid
        for o in step.node.outputs:
            producer[id(o)] = last
    for v in cm.graph.outputs:
        lines.append(_value_node("out", v))
        if id(v) in producer:
            lines.append(f"  {_quote(producer[id(v)])} -> {_quote('out:' + v.name)};")
    lines.append("}")
    return "\n".join(lines)


def write_svg(dot_text: str, path: Path) -> None:
    exe = shutil.which("dot")
    if exe is None:
        raise FileNotFoundError("rendering SVG needs the Graphviz 'dot' program (e.g. apt-get install graphviz); "
                                "use --dot to write the DOT text instead")
    subprocess.run([exe, "-Tsvg", "-o", str(path)], input=dot_text, text=True, check=True)
