"""snipjit as an ONNX backend (`onnx.backend.base.Backend`), for the ONNX backend test suite and for tools
that drive backends generically:

    import snipjit.backend as backend
    rep = backend.prepare(model_proto)          # compiles once
    outputs = rep.run([x])                      # inputs in graph order (or a dict by name)
    outputs = backend.run_node(node_proto, [a, b])

It goes through the public API: `snipjit.compile`, `CompiledModel.input_names/output_names/run`.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from .compiler import CompiledModel, compile as compile_model


class SnipjitRep(BackendRep):
    """A compiled model; `run` returns its outputs as a namedtuple in graph output order."""

    def __init__(self, compiled: CompiledModel):
        self.compiled = compiled
        self._outputs = namedtupledict("Outputs", compiled.output_names)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        return self._outputs(*self.compiled.run(self._feeds(inputs)))

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        """Inputs as a dict by name, a sequence in graph input order, or one array for one input."""
        if isinstance(inputs, Mapping):
            return dict(inputs)
        names = self.compiled.input_names
        arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
        if len(arrays) != len(names):
            raise ValueError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(arrays)}")
        return dict(zip(names, arrays))


class SnipjitBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> SnipjitRep:
        """Compile `model`. Keyword arguments are the test runner's (tolerances) and are not compile
        options, so they are ignored."""
        if not cls.supports_device(device):
            raise ValueError(f"snipjit runs on CPU only, not on {device!r}")
        return SnipjitRep(compile_model(model))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node on the given inputs (in the node's input order; "" inputs get no array)."""
        names = [n for n in node.input if n]
        if len(names) != len(inputs):
            raise ValueError(f"node {node.op_type} has {len(names)} inputs, got {len(inputs)} arrays")
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype),
                                                      np.shape(a)) for n, a in zip(names, inputs)]
        graph_outputs = [onnx.ValueInfoProto(name=n) for n in node.output if n]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(helper.make_graph([node], "run_node", graph_inputs, graph_outputs),
                                  opset_imports=[helper.make_opsetid(node.domain, opset)])
        return cls.run_model(model, [np.asarray(a) for a in inputs], device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):
            return False


prepare = SnipjitBackend.prepare
run_model = SnipjitBackend.run_model
run_node = SnipjitBackend.run_node
supports_device = SnipjitBackend.supports_device
is_compatible = SnipjitBackend.is_compatible
