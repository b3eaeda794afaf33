"""Graphs for pass tests, written in the text form with elided constants that get random values."""
import numpy as np

from snipjit import parse_graph
from snipjit.ir.graph import Graph


def parse_random(text: str) -> Graph:
    """The graph of `text`, its elided float constants drawn from a normal distribution (seed 0)."""
    g = parse_graph(text, elided="zeros")
    rng = np.random.default_rng(0)
    for v in g.constants:
        if v.dtype.is_float and not v.data.any():
            v.data = rng.standard_normal(v.data.shape).astype(v.data.dtype)
    return g
