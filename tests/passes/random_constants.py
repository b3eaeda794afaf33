"""Graphs for pass tests, written in the text form with elided constants that get random values."""
from typing import Callable

import numpy as np

from snipjit import parse_graph
from snipjit.ir.graph import Graph
from snipjit.ops.interpreter import run_graph_reference


def parse_random(text: str) -> Graph:
    """The graph of `text`, its elided float constants drawn from a normal distribution (seed 0)."""
    g = parse_graph(text, elided="zeros")
    rng = np.random.default_rng(0)
    for v in g.constants:
        if v.dtype.is_float and not v.data.any():
            v.data = rng.standard_normal(v.data.shape).astype(v.data.dtype)
    return g


def rewritten_by(graph_pass: Callable[[Graph], Graph], text: str) -> Graph:
    """`graph_pass` applied to a copy of `text`'s graph, checked to be valid and to compute what the original does
    on random inputs (the reference interpreter, to rounding)."""
    before = parse_random(text)
    after = graph_pass(before.copy())
    after.validate()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(v.shape).astype(np.float32) for v in before.inputs]
    for want, got in zip(run_graph_reference(before, inputs), run_graph_reference(after, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return after
