"""LSTM, GRU and RNN layers on the GEMM and the generated recurrence against the reference kernel at every
ISA level this host can execute: directions, both layouts, both GRU variants, with and without bias and
initial states, batches, sequence lengths, clip, peepholes, input_forget, every ONNX gate function and
hidden sizes off the vector width; layers the kernel does not take (weights fed at run time, a negative clip)
stay on the reference kernel, and malformed lengths fail as on it."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import snipjit
from snipjit.runtime.implementations import gemm_launch

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")


GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def lstm_model(seq, batch, inputs, hidden, direction="forward", layout=0, bias=True, states=True, op="LSTM",
               lens=None, peepholes=False, scale=0.3, **attrs):
    d = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(seq * hidden + batch)
    gates = GATES[op]
    weights = {"W": (d, gates * hidden, inputs), "R": (d, gates * hidden, hidden)}
    if bias:
        weights["B"] = (d, 2 * gates * hidden)
    if peepholes:
        weights["P"] = (d, 3 * hidden)
    x_shape = [seq, batch, inputs] if layout == 0 else [batch, seq, inputs]
    s_shape = [d, batch, hidden] if layout == 0 else [batch, d, hidden]
    state_names = ("h0", "c0") if op == "LSTM" else ("h0",)
    outputs = ["Y", "Yh", "Yc"] if op == "LSTM" else ["Y", "Yh"]
    names = ["X", "W", "R", "B" if bias else "", "L" if lens is not None else ""]
    names += [n if states else "" for n in state_names] + (["P"] if peepholes else [])
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    if lens is not None:
        graph_inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
    if states:
        graph_inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, s_shape) for n in state_names]
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction, layout=layout, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array((rng.standard_normal(s) * scale).astype(np.float32), n)
                               for n, s in weights.items()])
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if lens is not None:
        feeds["L"] = np.asarray(lens, np.int32)
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


@pytest.mark.parametrize("op, attrs", [("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})])
@pytest.mark.parametrize("direction, layout", [("forward", 0), ("bidirectional", 1), ("reverse", 0)])
def test_gru_and_rnn(level, op, attrs, direction, layout):
    compare(*lstm_model(11, 3, 14, 32, direction, layout, op=op, **attrs))
    compare(*lstm_model(6, 2, 5, 64, direction, layout, bias=False, states=False, op=op, **attrs))


CELLS = [("LSTM", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})]


@pytest.mark.parametrize("op, attrs", CELLS)
@pytest.mark.parametrize("direction, layout", [("forward", 0), ("reverse", 1), ("bidirectional", 0),
                                               ("bidirectional", 1)])
def test_sequence_lengths(level, op, attrs, direction, layout):
    """Entries of length 0, 1, part and all of the sequence: zero rows past the length, the final state
    at the entry's last step (the initial state for 0), reverse runs from length - 1."""
    compare(*lstm_model(9, 5, 7, 32, direction, layout, op=op, lens=[9, 0, 4, 1, 8], **attrs))
    compare(*lstm_model(6, 3, 5, 16, direction, layout, states=False, op=op, lens=[2, 6, 3], **attrs))


def test_sequence_lengths_that_are_all_whole_or_all_zero(level):
    compare(*lstm_model(5, 2, 4, 32, "bidirectional", lens=[5, 5]))
    model, feeds = lstm_model(5, 2, 4, 32, "bidirectional", lens=[0, 0])
    y, yh, yc = snipjit.compile(model).run(feeds)
    assert not y.any()
    np.testing.assert_array_equal(yh, feeds["h0"])
    np.testing.assert_array_equal(yc, feeds["c0"])


def test_malformed_sequence_lengths_fail_as_on_the_reference_kernel():
    model, feeds = lstm_model(5, 2, 4, 32, lens=[6, 1])
    compiled = snipjit.compile(model)
    assert [s.kind for s in compiled.plan] == ["recurrent"]
    with pytest.raises(Exception, match="sequence_lens"):
        compiled.run(feeds)


@pytest.mark.parametrize("attrs", [{"clip": 0.5}, {"input_forget": 1}, {"clip": 2.0, "input_forget": 1}])
@pytest.mark.parametrize("peepholes", [False, True])
@pytest.mark.parametrize("direction, layout", [("forward", 0), ("bidirectional", 1), ("reverse", 0)])
def test_clip_peepholes_and_input_forget(level, attrs, peepholes, direction, layout):
    """Weights large enough that clip bounds many gates; peepholes read c before (i, f) and after (o)."""
    compare(*lstm_model(10, 3, 6, 32, direction, layout, peepholes=peepholes, scale=1.0, **attrs))
    compare(*lstm_model(8, 2, 5, 20, direction, layout, peepholes=peepholes, lens=[3, 8], scale=1.0, **attrs))


def test_peepholes_alone(level):
    compare(*lstm_model(12, 2, 6, 48, "bidirectional", peepholes=True, scale=1.0))


@pytest.mark.parametrize("op, attrs", CELLS[1:])
def test_clip_of_gru_and_rnn(level, op, attrs):
    compare(*lstm_model(10, 3, 6, 32, "bidirectional", op=op, clip=0.7, scale=0.5, **attrs))


def test_clip_changes_the_outputs():
    """(The clip tests see clipped gates: the layer without clip gives other outputs.)"""
    clipped = snipjit.compile(lstm_model(10, 3, 6, 32, clip=0.5, scale=1.0)[0])
    model, feeds = lstm_model(10, 3, 6, 32, scale=1.0)
    assert not np.allclose(clipped.run(feeds)[0], snipjit.compile(model).run(feeds)[0], atol=1e-3)


FUNCTIONS = [  # (LSTM's f, g, h; alphas; betas)
    (["Relu", "Tanh", "Sigmoid"], None, None),
    (["HardSigmoid", "Softsign", "Softplus"], [0.3], [0.4]),
    (["Sigmoid", "LeakyRelu", "Elu"], [0.2, 0.7], None),
    (["HardSigmoid", "ThresholdedRelu", "ScaledTanh"], [0.25, 0.1, 0.9], [0.45, 1.3]),
    (["Sigmoid", "Affine", "Tanh"], [0.8], [0.1]),
    (["HardSigmoid", "Elu", "Affine"], None, None),   # (the defaults of alpha and beta)
]


@pytest.mark.parametrize("names, alphas, betas", FUNCTIONS)
@pytest.mark.parametrize("lens", [None, [7, 3]])
def test_gate_functions(level, names, alphas, betas, lens):
    attrs = {"activations": names}
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    compare(*lstm_model(7, 2, 5, 32, lens=lens, **attrs))


def test_gate_functions_per_direction(level):
    """A bidirectional layer's functions, and their alphas and betas, differ by direction."""
    compare(*lstm_model(6, 2, 5, 32, "bidirectional", activations=["Sigmoid", "Tanh", "Tanh", "HardSigmoid",
            "LeakyRelu", "ScaledTanh"], activation_alpha=[0.3, 0.05, 1.5], activation_beta=[0.6, 0.8]))
    compare(*lstm_model(6, 2, 5, 32, "bidirectional", op="GRU", activations=["Sigmoid", "Softsign", "HardSigmoid",
            "Relu"], activation_alpha=[0.15], activation_beta=[0.55]))
    compare(*lstm_model(6, 2, 5, 16, "bidirectional", op="RNN", activations=["Relu", "Affine"],
            activation_alpha=[0.5], activation_beta=[0.2]))


@pytest.mark.parametrize("hidden", [1, 3, 18, 20, 50])
@pytest.mark.parametrize("op, attrs", CELLS)
def test_hidden_sizes_off_the_vector_width(level, hidden, op, attrs):
    compare(*lstm_model(9, 3, 7, hidden, "bidirectional", 1, op=op, **attrs))
    compare(*lstm_model(8, 4, 6, hidden, "reverse", 0, op=op, lens=[8, 0, 5, 2], **attrs))


def test_everything_at_once(level):
    compare(*lstm_model(15, 4, 11, 50, "bidirectional", 1, lens=[15, 9, 0, 1], peepholes=True, clip=1.5,
                        input_forget=1, activations=["HardSigmoid", "Softsign", "Elu"] * 2,
                        activation_alpha=[0.3, 0.6, 0.25, 1.1], activation_beta=[0.45, 0.5], scale=0.8))


def test_weights_fed_at_run_time_stay_on_the_reference_kernel():
    model, feeds = lstm_model(5, 2, 8, 32)
    graph = model.graph
    weights = graph.initializer.pop(1)   # R becomes an input
    graph.input.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, list(weights.dims)))
    compare(model, {**feeds, "R": numpy_helper.to_array(weights)}, kind="reference")


def test_a_negative_clip_stays_on_the_reference_kernel():
    compare(*lstm_model(5, 2, 8, 32, clip=-0.5), kind="reference")
