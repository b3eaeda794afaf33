"""`torch.compile(model, backend="snipjit")`: models match eager PyTorch, new batch sizes and sequence lengths
reuse the compiled graph, and what snipjit cannot take runs eagerly with its reason logged once."""
import importlib.metadata
import logging
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend needs torch (pip install -e '.[torch]')")

from snipjit.integrations import torch_dynamo  # noqa: E402

TOLERANCE = 1e-4


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    torch_dynamo.reset()
    yield
    torch._dynamo.reset()
    torch_dynamo.reset()


def records(caplog):
    return [r for r in caplog.records if r.name == "snipjit.torch"]


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def small_cnn():
    torch.manual_seed(0)
    model = SmallCNN()
    for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):   # statistics that matter
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def test_cnn_matches_eager_and_new_batch_sizes_do_not_recompile():
    model = small_cnn()
    compiled = torch.compile(model, backend="snipjit", dynamic=True)
    with torch.inference_mode():
        for batch in (2, 5, 3):
            x = torch.randn(batch, 3, 16, 16)
            got, want = compiled(x), model(x)
            assert got.shape == want.shape == (batch, 10)
            torch.testing.assert_close(got, want, rtol=TOLERANCE, atol=TOLERANCE)
    counts = torch_dynamo.compile_counts()
    assert (counts.compilations, counts.fallbacks) == (1, {})


def tiny_bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def bert_inputs(batch, sequence):
    input_ids = torch.randint(0, 100, (batch, sequence))
    attention_mask = torch.ones(batch, sequence, dtype=torch.int64)
    attention_mask[0, sequence - 2:] = 0   # padding in the first row
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def test_bert_matches_eager_and_new_shapes_do_not_recompile():
    model = tiny_bert()
    compiled = torch.compile(model, backend="snipjit", dynamic=True)
    with torch.inference_mode():
        for batch, sequence in ((2, 16), (3, 9), (4, 24)):
            inputs = bert_inputs(batch, sequence)
            got, want = compiled(**inputs), model(**inputs)
            assert got.last_hidden_state.shape == (batch, sequence, 32)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, rtol=TOLERANCE, atol=TOLERANCE)
            torch.testing.assert_close(got.pooler_output, want.pooler_output, rtol=TOLERANCE, atol=TOLERANCE)
    counts = torch_dynamo.compile_counts()
    assert (counts.compilations, counts.fallbacks) == (1, {})
    dims = [v.type.shape for v in torch_dynamo.compiled_models()[0].graph.inputs]
    assert dims == [("input_ids_0", "input_ids_1")] * 2


def test_a_graph_seen_again_reuses_its_compiled_model():
    model = small_cnn()
    x = torch.randn(2, 3, 16, 16)
    with torch.inference_mode():
        first = torch.compile(model, backend="snipjit", dynamic=True)(x)
        torch._dynamo.reset()   # dynamo traces the same graph again
        second = torch.compile(model, backend="snipjit", dynamic=True)(x)
    torch.testing.assert_close(first, second)
    counts = torch_dynamo.compile_counts()
    assert (counts.compilations, counts.reuses) == (1, 1)


def test_weights_changed_in_place_are_seen():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
    compiled = torch.compile(model, backend="snipjit", dynamic=True)
    x = torch.randn(4, 8)
    with torch.inference_mode():
        compiled(x)
    with torch.no_grad():
        model[0].weight.mul_(2.0)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), model(x), rtol=TOLERANCE, atol=TOLERANCE)
    counts = torch_dynamo.compile_counts()
    assert (counts.compilations, counts.rebuilds) == (2, 1)


class Lgamma(torch.nn.Module):
    def forward(self, x):
        return torch.lgamma(x.abs() + 1.0) * 2.0


def test_export_failure_runs_eagerly_with_one_log_record(caplog):
    compiled = torch.compile(Lgamma(), backend="snipjit", dynamic=True)
    with caplog.at_level(logging.WARNING, logger="snipjit.torch"), torch.inference_mode():
        for batch in (2, 3, 4):
            x = torch.randn(batch, 5)
            torch.testing.assert_close(compiled(x), Lgamma()(x))
        other = torch.compile(Lgamma(), backend="snipjit")   # the same reason again: not logged again
        other(torch.randn(2, 5))
    logged = records(caplog)
    assert len(logged) == 1
    assert "ONNX export failed" in logged[0].getMessage() and "lgamma" in logged[0].getMessage()
    counts = torch_dynamo.compile_counts()
    assert counts.compilations == 0
    assert [reason.startswith("ONNX export failed") for reason in counts.fallbacks] == [True]


def test_what_snipjit_cannot_compile_runs_eagerly(caplog):
    def noisy(x):
        return x + torch.rand_like(x)   # exports to RandomUniformLike, which snipjit has no kernel for

    with caplog.at_level(logging.WARNING, logger="snipjit.torch"), torch.inference_mode():
        out = torch.compile(noisy, backend="snipjit")(torch.zeros(3, 4))
    assert out.shape == (3, 4) and bool(((out >= 0) & (out < 1)).all())
    [reason] = torch_dynamo.compile_counts().fallbacks
    assert reason.startswith("snipjit cannot compile the graph")
    assert len(records(caplog)) == 1


def test_autograd_and_complex_inputs_run_eagerly(caplog):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    with caplog.at_level(logging.WARNING, logger="snipjit.torch"):
        loss = torch.compile(model, backend="snipjit")(torch.randn(3, 4)).sum()
        loss.backward()   # the graph ran eagerly, under autograd
        assert model.weight.grad is not None
        with torch.inference_mode():
            z = torch.randn(3, 4, dtype=torch.complex64)
            torch.testing.assert_close(torch.compile(lambda t: t * 2, backend="snipjit")(z), z * 2)
    reasons = sorted(torch_dynamo.compile_counts().fallbacks)
    assert [r.split(":")[0] for r in reasons] == ["autograd", "dtype complex64"]
    assert len(records(caplog)) == 2


def test_the_backend_is_found_by_name():
    try:
        importlib.metadata.distribution("snipjit")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("snipjit is not installed, so its entry points are not registered (pip install -e .)")
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("snipjit") is torch_dynamo.snipjit_backend


def test_snipjit_does_not_import_torch():
    code = "import sys, snipjit, snipjit.integrations.torch_dynamo; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
