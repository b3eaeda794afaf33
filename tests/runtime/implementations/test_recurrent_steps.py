"""LSTM, GRU and RNN layers on the GEMM and the generated recurrence against the reference kernel at every
ISA level this host can execute: directions, both layouts, both GRU variants, with and without bias and
initial states, batches; layers the kernel does not take (clip, other activations, a hidden size off the
vector width) stay on the reference kernel."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import snipjit
from snipjit.runtime.implementations import gemm_launch

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def lstm_model(seq, batch, inputs, hidden, direction="forward", layout=0, bias=True, states=True, op="LSTM",
               **attrs):
    d = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(seq * hidden + batch)
    gates = GATES[op]
    weights = {"W": (d, gates * hidden, inputs), "R": (d, gates * hidden, hidden)}
    if bias:
        weights["B"] = (d, 2 * gates * hidden)
    x_shape = [seq, batch, inputs] if layout == 0 else [batch, seq, inputs]
    s_shape = [d, batch, hidden] if layout == 0 else [batch, d, hidden]
    state_names = ("h0", "c0") if op == "LSTM" else ("h0",)
    outputs = ["Y", "Yh", "Yc"] if op == "LSTM" else ["Y", "Yh"]
    names = ["X", "W", "R", "B" if bias else "", ""] + [n if states else "" for n in state_names]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    if states:
        graph_inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, s_shape) for n in state_names]
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction, layout=layout, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
                               for n, s in weights.items()])
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if states:
        feeds.update({n: rng.standard_normal(s_shape).astype(np.float32) for n in state_names})
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


def compare(model, feeds, kind="recurrent"):
    compiled = snipjit.compile(model)
    assert [s.kind for s in compiled.plan] == [kind]
    reference = snipjit.compile(model, implementations={"reference"})
    for got, want in zip(compiled.run(feeds), reference.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)   # (100 steps of float32 rounding)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_and_layouts(level, direction, layout):
    compare(*lstm_model(13, 3, 20, 32, direction, layout))


@pytest.mark.parametrize("bias, states", [(False, False), (True, False), (False, True)])
def test_without_bias_or_initial_states(level, bias, states):
    compare(*lstm_model(7, 2, 9, 64, "bidirectional", bias=bias, states=states))


def test_a_longer_sequence_and_a_single_entry(level):
    compare(*lstm_model(100, 1, 48, 128))


@pytest.mark.parametrize("attrs", [{"clip": 0.5}, {"input_forget": 1},
                                   {"activations": ["Sigmoid", "Tanh", "Relu"]}])
def test_other_lstms_stay_on_the_reference_kernel(attrs):
    compare(*lstm_model(5, 2, 8, 32, **attrs), kind="reference")
    compare(*lstm_model(5, 2, 8, 18), kind="reference")   # (18: not a multiple of any vector width)


@pytest.mark.parametrize("op, attrs", [("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})])
@pytest.mark.parametrize("direction, layout", [("forward", 0), ("bidirectional", 1), ("reverse", 0)])
def test_gru_and_rnn(level, op, attrs, direction, layout):
    compare(*lstm_model(11, 3, 14, 32, direction, layout, op=op, **attrs))
    compare(*lstm_model(6, 2, 5, 64, direction, layout, bias=False, states=False, op=op, **attrs))
