"""snipjit: a deep-learning graph compiler for CPU inference.

    import snipjit
    cm = snipjit.compile("model.onnx")
    outputs = cm.run({"x": x})
"""
from .builder import GraphBuilder, parse_graph
from .compiler import CompiledModel, compile
from .ir import Graph, print_graph
from .runtime.execution.feeds import FeedError
from .runtime.execution.request import Request
from .version import __version__
__all__ = ["compile", "CompiledModel", "Request", "GraphBuilder", "Graph", "parse_graph", "print_graph",
           "FeedError", "__version__"]
