"""The convolutional networks of the suite beyond the onnx package's light zoo.

Exported from Hugging Face `transformers` with random weights (PyTorch's classic exporter, batch 1,
224×224), each convolution's and linear layer's scaled so that its output on a random image has unit
standard deviation (`unit_variance`), as a trained network's activations stay near 1: at transformers'
initialisation EfficientNet-B0's activations shrank by about half a decade per block to subnormal floats
and then to zero (its output was all zeros and its time that of subnormal arithmetic, 6% of its values,
which Intel cores run about a hundred times slower) and MobileNet-V2's to 1e-21. ResNet-50 (3×3/1×1
residual blocks), MobileNet-V2 (inverted residuals with depthwise convolutions, Relu6), EfficientNet-B0
(depthwise 3×3/5×5, squeeze-excitation, SiLU), RegNetY-400MF (grouped convolutions with squeeze-excitation)
and ConvNeXt-T (7×7 depthwise blocks with a channels-last LayerNorm between permutes). Built here with
onnx.helper: a decoder of ConvTranspose layers (the upsampling path of segmentation networks). Files are
cached under bench/models/ like the other models.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.models import cached, quantized_static

IMAGE = (1, 3, 224, 224)


def _transformers_model(name: str):
    """A transformers vision backbone in eval mode with random weights (seed 0)."""
    import torch
    import transformers as tf
    configs = {
        "resnet50": lambda: tf.ResNetConfig(),        # the defaults are ResNet-50's
        "mobilenet_v2": lambda: tf.MobileNetV2Config(),
        "efficientnet_b0": lambda: tf.EfficientNetConfig(width_coefficient=1.0, depth_coefficient=1.0,
                                                          hidden_dim=1280),   # (the defaults are B7's)
        "regnet_y_400mf": lambda: tf.RegNetConfig(layer_type="y", hidden_sizes=[48, 104, 208, 440],
                                                  depths=[1, 3, 6, 6], groups_width=8, embedding_size=32),
        "convnext_tiny": lambda: tf.ConvNextConfig(),  # the defaults are ConvNeXt-T's
    }
    classes = {"resnet50": tf.ResNetModel, "mobilenet_v2": tf.MobileNetV2Model,
               "efficientnet_b0": tf.EfficientNetModel, "regnet_y_400mf": tf.RegNetModel,
               "convnext_tiny": tf.ConvNextModel}
    torch.manual_seed(0)
    backbone = classes[name](configs[name]()).eval()
    unit_variance(backbone, torch.randn(*IMAGE))

    class Features(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = backbone

        def forward(self, pixel_values):
            return self.backbone(pixel_values=pixel_values).pooler_output

    return Features().eval()


def unit_variance(model, image) -> None:
    """Scale the weights (and bias) of each Conv2d and Linear of `model` in place so that, run on `image`, its
    output has standard deviation 1: one forward pass in which each layer, in the order it runs, rescales
    itself and passes its rescaled output on (a data-dependent initialisation, as LSUV's)."""
    import torch

    def rescale(module, inputs, output):
        std = output.std()
        if not torch.isfinite(std) or std == 0:
            raise ValueError(f"{type(module).__name__} output's standard deviation is {float(std)}: "
                             "nothing to scale")
        module.weight.data /= std
        if module.bias is not None:
            module.bias.data /= std
        return output / std

    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    hooks = [layer.register_forward_hook(rescale) for layer in layers]
    try:
        with torch.no_grad():
            model(image)
    finally:
        for hook in hooks:
            hook.remove()


TRANSFORMERS_CNNS = ("resnet50", "mobilenet_v2", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny")


def export_transformers_cnn(name: str, path: Path) -> None:
    import torch
    model = _transformers_model(name)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", (DeprecationWarning, torch.jit.TracerWarning, UserWarning))
        torch.onnx.export(model, (torch.randn(*IMAGE),), str(path), input_names=["pixel_values"],
                          output_names=["features"], opset_version=17, dynamo=False)


def transformers_cnn(name: str) -> Path:
    if name not in TRANSFORMERS_CNNS:
        raise ValueError(f"unknown network {name!r}; choose from {', '.join(TRANSFORMERS_CNNS)}")
    return cached(f"hf_{name}_unit", lambda path: export_transformers_cnn(name, path))


def quantized_transformers_cnn(name: str) -> Path:
    """The transformers network quantized with `quantize_static`, uint8 activations calibrated on 8 random
    images."""
    return quantized_static(lambda: transformers_cnn(name), f"hf_{name}_unit_qdq_int8",
                            lambda rng: [{"pixel_values": rng.standard_normal(IMAGE, dtype=np.float32)}
                                         for _ in range(8)], "uint8")


def _decoder() -> onnx.ModelProto:
    """Three ConvTranspose upsampling stages (k4 s2 p1, 256 -> 128 -> 64 -> 32 channels, 14×14 -> 112×112),
    each followed by a 3×3 Conv and Relu, then a 1×1 Conv to 2 classes."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def weight(name: str, *shape: int) -> str:
        fan_in = int(np.prod(shape[1:]))
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name))
        return name

    x, channels = "x", 256
    for stage, out in enumerate((128, 64, 32)):
        up, conv = f"up{stage}", f"conv{stage}"
        nodes.append(helper.make_node("ConvTranspose", [x, weight(f"{up}_w", channels, out, 4, 4),
                                                        weight(f"{up}_b", out)], [up],
                                      kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [up], [up + "_r"]))
        conv_inputs = [up + "_r", weight(f"{conv}_w", out, out, 3, 3), weight(f"{conv}_b", out)]
        nodes.append(helper.make_node("Conv", conv_inputs,
                                      [conv], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [conv], [conv + "_r"]))
        x, channels = conv + "_r", out
    nodes.append(helper.make_node("Conv", [x, weight("head_w", 2, channels, 1, 1)], ["y"], kernel_shape=[1, 1]))
    image = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 14, 14])
    graph = helper.make_graph(nodes, "decoder", [image],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 112, 112])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def decoder() -> Path:
    return cached("convtranspose_decoder", lambda path: onnx.save(_decoder(), path))
