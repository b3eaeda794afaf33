"""Op registry and op definitions by family; importing this package registers every op."""
from . import elementwise, extra, linalg, movement, nn, normalization, reduce, shape_ops, subgraph  # noqa: F401  (registration)
from .registry import REQUIRED, Category, OpContext, OpDef, OpError, all_ops, get_op, has_op, infer_node, register

__all__ = ["REQUIRED", "Category", "OpContext", "OpDef", "OpError", "all_ops", "get_op", "has_op",
           "infer_node", "register"]
