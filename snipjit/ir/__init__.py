"""Graph IR: dtypes, shapes, values, nodes, graphs and their text form."""
from .dtypes import DType, dtype
from .graph import Graph, GraphError, Node, TensorType, Value, print_graph
from .shape import Dim, Shape, ShapeError, broadcast_shapes, is_static, make_shape, numel
from .text import ParseError

__all__ = ["DType", "dtype", "Graph", "GraphError", "Node", "TensorType", "Value", "Dim", "Shape",
           "ShapeError", "broadcast_shapes", "is_static", "make_shape", "numel", "ParseError",
           "print_graph"]
