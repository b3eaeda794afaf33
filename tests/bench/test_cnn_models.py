"""The suite's transformers CNNs are exported with weights scaled to unit-variance outputs (`unit_variance`)."""
import pytest

torch = pytest.importorskip("torch", reason="the transformers CNNs are exported with PyTorch ([torch] extra)")

from bench.cnn_models import unit_variance  # noqa: E402


def _shrinking_network():
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 1),
              torch.nn.SiLU(), torch.nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), torch.nn.Flatten(),
              torch.nn.Linear(32 * 8 * 8, 10)]
    for layer in layers:
        if hasattr(layer, "weight"):
            layer.weight.data *= 1e-3   # each layer shrinks its input a thousandfold, as far as subnormals
    return torch.nn.Sequential(*layers).eval()


def test_every_convolution_and_linear_layer_outputs_unit_standard_deviation():
    model = _shrinking_network()
    image = torch.randn(1, 3, 8, 8)
    unit_variance(model, image)
    outputs = {}
    hooks = [layer.register_forward_hook(lambda m, i, o: outputs.__setitem__(m, o.std().item()))
             for layer in model if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        model(image)
    for hook in hooks:
        hook.remove()
    assert len(outputs) == 4 and all(abs(std - 1) < 1e-4 for std in outputs.values()), outputs
    assert all(not layer._forward_hooks for layer in model)


def test_a_layer_whose_output_is_all_zero_is_refused():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1, bias=False)).eval()
    model[0].weight.data.zero_()
    with pytest.raises(ValueError, match="Conv2d output's standard deviation is 0"):
        unit_variance(model, torch.randn(1, 3, 4, 4))
    assert not model[0]._forward_hooks
