"""Helpers the op tests share: the output types of a small IR-text graph, and running one op's reference
kernel on constant inputs."""
import numpy as np

from snipjit import parse_graph
from snipjit.ops.common import evaluate


def output_types(body: str, inputs: str) -> str:
    """The output types ("; "-separated) of the graph with these inputs whose last node, `body`'s last
    line, gives the outputs."""
    outs = body.strip().splitlines()[-1].split("]")[0].lstrip("[")
    g = parse_graph(f"graph({inputs}) -> [{outs}] {{\n{body}\n}}")
    return "; ".join(str(v.type) for v in g.outputs)


def run(op: str, *inputs, outputs: int = 1, **attrs):
    """`op`'s reference kernel on constant inputs (None: a missing optional input): its output, or the
    tuple of its first `outputs` outputs."""
    res = evaluate(op, inputs, attrs, outputs=outputs)
    return res[0] if outputs == 1 else res


def i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)
