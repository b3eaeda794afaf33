"""snipjit: a deep-learning graph compiler for CPU inference.

    import snipjit
    cm = snipjit.compile("model.onnx")
    outputs = cm.run({"x": x})
"""
from .builder import GraphBuilder
from .compiler import CompiledModel, compile
from .ir import Graph, parse_graph, print_graph
from .runtime.execution.feeds import FeedError
from .runtime.execution.request import Request

__version__ = "0.1.0"
__all__ = ["compile", "CompiledModel", "Request", "GraphBuilder", "Graph", "parse_graph", "print_graph",
           "FeedError", "__version__"]
