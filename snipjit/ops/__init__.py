"""Op registry and op definitions by family; importing this package registers every op."""
from . import (attention, detection, elementwise, gather_scatter, linalg, nn, normalization, rearrange,  # noqa: F401
               reduce, resize, sampling, selection, shape_ops, slicing, subgraph, channels_last)  # (registration)
from . import control_flow, recurrent  # noqa: F401  (registration)
from . import int8, quantization  # noqa: F401  (registration)
from .registry import REQUIRED, Category, OpContext, OpDef, OpError, all_ops, get_op, has_op, infer_node, register

__all__ = ["REQUIRED", "Category", "OpContext", "OpDef", "OpError", "all_ops", "get_op", "has_op",
           "infer_node", "register"]
