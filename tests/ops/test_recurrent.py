"""RNN, GRU and LSTM references: against PyTorch's layers where torch is installed (gate orders mapped),
per-entry sequence lengths equal to running each entry alone on its cut sequence, the batch-major
layout, and clear errors for bad weights, directions and activations."""
import numpy as np
import pytest

import snipjit.ops.recurrent  # noqa: F401  (registers the ops)
from snipjit.ops import OpError
from snipjit.ops.common import evaluate

rng = np.random.default_rng(0)


def randn(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def weights(op, directions, hidden, inputs):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    return (randn(directions, gates * hidden, inputs), randn(directions, gates * hidden, hidden),
            randn(directions, 2 * gates * hidden))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_a_shorter_entry_equals_running_it_alone(op, direction):
    directions = 2 if direction == "bidirectional" else 1
    w, r, b = weights(op, directions, 5, 3)
    x = randn(6, 3, 3)
    lengths = np.array([6, 2, 4], np.int32)
    outputs = 3 if op == "LSTM" else 2
    y, y_h, *rest = evaluate(op, [x, w, r, b, lengths], {"direction": direction, "hidden_size": 5}, outputs)
    assert y.shape == (6, directions, 3, 5) and y_h.shape == (directions, 3, 5)
    for entry, length in enumerate(lengths):
        alone = evaluate(op, [x[:length, entry:entry + 1], w, r, b], {"direction": direction}, outputs)
        np.testing.assert_allclose(y[:length, :, entry], alone[0][:, :, 0], rtol=1e-5, atol=1e-6)
        assert not y[length:, :, entry].any()                      # past its length: zeros
        np.testing.assert_allclose(y_h[:, entry], alone[1][:, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_batch_major_layout_is_a_transpose(op):
    w, r, b = weights(op, 2, 4, 3)
    x = randn(5, 2, 3)
    attrs = {"direction": "bidirectional"}
    seq_major = evaluate(op, [x, w, r, b], attrs, 2)
    batch_major = evaluate(op, [np.ascontiguousarray(x.transpose(1, 0, 2)), w, r, b], {**attrs, "layout": 1}, 2)
    np.testing.assert_allclose(batch_major[0], seq_major[0].transpose(2, 0, 1, 3), rtol=1e-6)
    np.testing.assert_allclose(batch_major[1], seq_major[1].transpose(1, 0, 2), rtol=1e-6)


def _torch_gates(op, a, hidden):
    """ONNX gate order (LSTM i,o,f,c; GRU z,r,h) -> PyTorch's (LSTM i,f,g,o; GRU r,z,n), along axis 0."""
    blocks = np.split(a, {"RNN": 1, "GRU": 3, "LSTM": 4}[op], axis=0)
    order = {"RNN": [0], "GRU": [1, 0, 2], "LSTM": [0, 2, 3, 1]}[op]
    return np.concatenate([blocks[i] for i in order], axis=0)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_against_pytorch(op):
    torch = pytest.importorskip("torch")
    hidden, inputs = 6, 4
    w, r, b = weights(op, 2, hidden, inputs)
    x = randn(7, 3, inputs)
    attrs = {"direction": "bidirectional", "hidden_size": hidden}
    if op == "GRU":
        attrs["linear_before_reset"] = 1   # PyTorch's GRU applies the reset gate after the product
    ours = evaluate(op, [x, w, r, b], attrs, 2)
    layer = {"RNN": torch.nn.RNN, "GRU": torch.nn.GRU, "LSTM": torch.nn.LSTM}[op](inputs, hidden, bidirectional=True)
    with torch.no_grad():
        for d, suffix in enumerate(["", "_reverse"]):
            gates = b.shape[1] // 2
            getattr(layer, f"weight_ih_l0{suffix}").copy_(torch.from_numpy(_torch_gates(op, w[d], hidden)))
            getattr(layer, f"weight_hh_l0{suffix}").copy_(torch.from_numpy(_torch_gates(op, r[d], hidden)))
            getattr(layer, f"bias_ih_l0{suffix}").copy_(torch.from_numpy(_torch_gates(op, b[d, :gates], hidden)))
            getattr(layer, f"bias_hh_l0{suffix}").copy_(torch.from_numpy(_torch_gates(op, b[d, gates:], hidden)))
        y, state = layer(torch.from_numpy(x))
    h = state[0] if op == "LSTM" else state
    np.testing.assert_allclose(ours[0], y.numpy().reshape(7, 3, 2, hidden).transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours[1], h.numpy(), rtol=1e-4, atol=1e-5)


def test_activations_with_parameters_and_clip():
    w, r, b = weights("RNN", 1, 3, 2)
    x = randn(4, 1, 2) * 10
    y = evaluate("RNN", [x, w, r, b], {"activations": ["HardSigmoid"], "activation_alpha": [0.1],
                                       "activation_beta": [0.3], "clip": 2.0})[0]
    h = np.zeros((1, 3))
    for t in range(4):
        z = np.clip(x[t] @ w[0].T + h @ r[0].T + b[0, :3] + b[0, 3:], -2, 2)
        h = np.clip(0.1 * z + 0.3, 0, 1)
        np.testing.assert_allclose(y[t, 0], h, rtol=1e-5)


@pytest.mark.parametrize("inputs, attrs, message", [
    (lambda w, r, b: [randn(3, 1, 2), w[:, :5], r, b], {}, "W \\[1, 5, 2\\] and R"),
    (lambda w, r, b: [randn(3, 1, 2), w, r, b[:, :4]], {}, "B must be \\[1, 12\\], got \\[1, 4\\]"),
    (lambda w, r, b: [randn(3, 1, 2), w, r, b], {"direction": "sideways"}, "direction must be one of"),
    (lambda w, r, b: [randn(3, 1, 2), w, r, b], {"activations": ["Swish", "Tanh"]}, "unknown activation 'Swish'"),
    (lambda w, r, b: [randn(3, 1, 2), w, r, b], {"activations": ["Tanh"]}, "GRU takes 2 per direction"),
    (lambda w, r, b: [randn(3, 1, 2), w, r, b, np.array([4], np.int32)], {}, "sequence_lens must be 1 lengths"),
])
def test_bad_input_is_named(inputs, attrs, message):
    w, r, b = weights("GRU", 1, 2, 2)
    with pytest.raises(OpError, match=message):
        evaluate("GRU", inputs(w, r, b), attrs, 2)
