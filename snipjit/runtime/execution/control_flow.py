"""Control-flow steps: If, Loop and Scan whose bodies are programs compiled once, not interpreted.

Each body goes through the graph passes and becomes a `Program` of its own when the step is built (its
Subgraphs fused into generated kernels, its products on the GEMM, bodies in it compiled the same way);
an iteration is a run of a request of that program, on the threads of the request running the step, and
the kernels it uses are noted with its model's (a saved model carries them). The body's inputs keep their
rank but take any size, since loop-carried values and what an If inside a loop captures may change shape
between iterations.
The semantics are the op's own (`ops.control_flow.run_control_flow`), with bodies run this way.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from ...ir.graph import Graph, Node, TensorType
from ...ops import get_op
from ...ops.control_flow import run_control_flow
from ...passes.pipeline import default_pipeline
from ..caches.kernel_cache import recording
from ..implementations.base import Kernel
from ..implementations.choice import choose as choose_implementation
from ..planning.program import Program
from .request import Request

KIND = "control"
OPS = ("If", "Loop", "Scan")
BODY_OPTIONS_DROPPED = ("constant_inputs", "refold")   # what concerns the model's own inputs only


class CompiledBody:
    """A body graph as a program; `body(inputs)` runs it on this thread's request of it."""

    def __init__(self, body: Graph, options: dict):
        graph = body.copy()
        for v in graph.inputs:
            v.type = TensorType(v.type.dtype, None if v.type.shape is None else (None,) * len(v.type.shape))
        for p in default_pipeline(options):
            graph = p.run(graph, options) or graph
        self.program = Program.build(graph, options, choose=choose, kernels=recording.get())
        self.names = [v.name for v in graph.inputs]
        self._local = threading.local()

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = Request(self.program)
        return request.run(dict(zip(self.names, inputs)))


class ControlFlowKernel(Kernel):
    def __init__(self, node: Node, options: dict):
        body_options = {k: v for k, v in options.items() if k not in BODY_OPTIONS_DROPPED}
        self.ctx = get_op(node.op, node.domain).context(node, with_values=False)
        self.bodies = {name: CompiledBody(g, body_options) for name, g in node.attrs.items() if isinstance(g, Graph)}
        self.dtypes = [o.type.dtype.np for o in node.outputs]

    def __call__(self, inputs):
        out = run_control_flow(self.ctx, list(inputs), lambda name, values: self.bodies[name](values))
        return [np.asarray(o).astype(dt, copy=False) for o, dt in zip(out, self.dtypes)]


def choose(node: Node, options: dict):
    """`implementations.choice.choose`, with If, Loop and Scan nodes on compiled bodies (unless the
    `implementations` option leaves out "control")."""
    allowed = options.get("implementations")
    if node.op in OPS and not node.domain and (allowed is None or KIND in allowed):
        return KIND, ControlFlowKernel(node, options)
    return choose_implementation(node, options)
