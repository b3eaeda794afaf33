"""snipjit: a deep-learning graph compiler for CPU inference.

    import snipjit
    cm = snipjit.compile("model.onnx")
    outputs = cm.run({"x": x})
    cm.save("model.snipjit")             # later, elsewhere: snipjit.load("model.snipjit")
"""
from .builder import GraphBuilder, parse_graph
from .compiler import ArtifactError, ArtifactWarning, CompiledModel, compile, load
from .ir import Graph, print_graph
from .runtime.execution.feeds import FeedError
from .runtime.execution.request import Request
from .version import __version__
__all__ = ["compile", "load", "CompiledModel", "ArtifactError", "ArtifactWarning", "Request", "GraphBuilder", "Graph", "parse_graph", "print_graph",
           "FeedError", "__version__"]
