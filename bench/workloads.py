"""The workloads of the suite: each an ONNX model, its inputs and, where a user could write one, the
same computation as a NumPy, numexpr or PyTorch expression, or a hand-written C kernel.

Elementwise chains and reductions are built with onnx.helper from the ops an exporter emits; the
BERT encoder, the GPT-2 decoder, the ViT encoder and the transformers CNNs are exported from PyTorch;
the zoo models ship with the onnx package (`bench.cnn_models` has the other convolutional networks).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from bench import cnn_models, handwritten, models
from snipjit.benchmark import EngineUnavailable

Arrays = list[np.ndarray]
EW_SHAPE = (4, 4, 1024, 1024)
SOFTMAX_SHAPE = (8, 12, 128, 128)
LN_EPSILON = 1e-5
BERT = models.BertSpec()
GPT2 = models.Gpt2Spec()
VIT = models.VitSpec()


@dataclass
class Workload:
    """One benchmark case.

    numpy_fn is the hand-written NumPy version in float32 (also run on float64 inputs as the
    reference the outputs are checked against); torch_fn takes the inputs as torch tensors, by
    name; torch_model builds a module taking them in the model's input order; handwritten_fn takes the
    thread count and the inputs by name and returns a bound call of the hand-written C kernel
    (bench/handwritten.c) and the outputs it writes. `unsupported` names
    engines that cannot express the workload, with the reason.
    """

    name: str
    group: str  # elementwise | reduction | bert | attention | zoo | cnn
    description: str
    model: Callable[[], Path]
    feeds: Callable[[np.random.Generator], dict[str, np.ndarray]]
    numpy_fn: Callable[..., Arrays] | None = None
    numexpr_expr: str | None = None
    torch_fn: Callable[..., list] | None = None
    torch_model: Callable[[], Callable] | None = None
    handwritten_fn: Callable[..., tuple[Callable[[], None], Arrays]] | None = None
    requires: tuple[str, ...] = ()  # modules needed to build the model
    unsupported: dict[str, str] = field(default_factory=dict)

    @property
    def memory_bound(self) -> bool:
        return self.group in ("elementwise", "reduction")


def _normal(*names: str, shape: tuple[int, ...]):
    return lambda rng: {n: rng.standard_normal(shape, dtype=np.float32) for n in names}


def _scalar(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)


# --- elementwise chains --------------------------------------------------------------------


def _square_model() -> Path:
    nodes = [
        ("Mul", ["x", "two"], "scaled", {}),
        ("Add", ["scaled", "y"], "sum", {}),
        ("Pow", ["sum", "two"], "out", {}),
    ]
    graph = models.single_output_graph("ew_square", ["x", "y"], EW_SHAPE, nodes, {"two": _scalar(2.0)})
    return models.cached("ew_square", models.save(graph))


def _gelu_model() -> Path:
    nodes = [
        ("Div", ["x", "sqrt2"], "scaled", {}),
        ("Erf", ["scaled"], "erf", {}),
        ("Add", ["erf", "one"], "shifted", {}),
        ("Mul", ["x", "shifted"], "gated", {}),
        ("Mul", ["gated", "half"], "out", {}),
    ]
    constants = {"sqrt2": _scalar(math.sqrt(2.0)), "one": _scalar(1.0), "half": _scalar(0.5)}
    graph = models.single_output_graph("ew_gelu", ["x"], EW_SHAPE, nodes, constants)
    return models.cached("ew_gelu", models.save(graph))


def _swish_tanh_model() -> Path:
    nodes = [
        ("Sigmoid", ["x"], "sig", {}),
        ("Mul", ["x", "sig"], "swish", {}),
        ("Tanh", ["y"], "tanh", {}),
        ("Mul", ["swish", "tanh"], "product", {}),
        ("Sub", ["product", "offset"], "shifted", {}),
        ("Relu", ["shifted"], "out", {}),
    ]
    graph = models.single_output_graph(
        "ew_swish_tanh", ["x", "y"], EW_SHAPE, nodes, {"offset": _scalar(0.1)}
    )
    return models.cached("ew_swish_tanh", models.save(graph))


def _gelu_numpy(x):
    try:
        from scipy.special import erf
    except ImportError as error:
        raise EngineUnavailable("NumPy has no erf and scipy is not installed") from error
    return [0.5 * x * (1 + erf(x / math.sqrt(2.0)))]


# --- reductions ----------------------------------------------------------------------------


def _softmax_model() -> Path:
    nodes = [("Softmax", ["x"], "out", {"axis": -1})]
    graph = models.single_output_graph("softmax", ["x"], SOFTMAX_SHAPE, nodes, {})
    return models.cached("softmax", models.save(graph))


def _softmax_numpy(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return [e / e.sum(axis=-1, keepdims=True)]


def _softmax_handwritten(threads: int, x):
    out = np.empty_like(x)
    return handwritten.softmax(x, out, threads), [out]


@functools.cache
def _ln_weights(width: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(width)
    gamma = (1 + 0.1 * rng.standard_normal(width)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(width)).astype(np.float32)
    return gamma, beta


def _layernorm_model(shape: tuple[int, ...]) -> Callable[[], Path]:
    def build() -> Path:
        name = "add_layernorm_" + "x".join(map(str, shape))
        gamma, beta = _ln_weights(shape[-1])
        nodes = [
            ("Add", ["x", "residual"], "sum", {}),
            ("LayerNormalization", ["sum", "gamma", "beta"], "out", {"axis": -1, "epsilon": LN_EPSILON}),
        ]
        weights = {"gamma": gamma, "beta": beta}
        graph = models.single_output_graph(name, ["x", "residual"], shape, nodes, weights)
        return models.cached(name, models.save(graph))

    return build


def _layernorm_numpy(x, residual):
    gamma, beta = _ln_weights(x.shape[-1])
    h = x + residual
    centered = h - h.mean(axis=-1, keepdims=True)
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    return [centered / np.sqrt(variance + LN_EPSILON) * gamma + beta]


def _layernorm_handwritten(threads: int, x, residual):
    gamma, beta = _ln_weights(x.shape[-1])
    out = np.empty_like(x)
    return handwritten.add_layernorm(x, residual, gamma, beta, out, LN_EPSILON, threads), [out]


def _layernorm_torch(x, residual):
    import torch

    gamma, beta = (torch.from_numpy(w) for w in _ln_weights(x.shape[-1]))
    return [torch.nn.functional.layer_norm(x + residual, (x.shape[-1],), gamma, beta, LN_EPSILON)]


def _layernorm(shape: tuple[int, ...]) -> Workload:
    dims = "x".join(map(str, shape))
    return Workload(
        f"add_layernorm_{dims}",
        "reduction",
        f"LayerNorm(x + residual) over the last axis, {dims} f32",
        _layernorm_model(shape),
        _normal("x", "residual", shape=shape),
        numpy_fn=_layernorm_numpy,
        torch_fn=_layernorm_torch,
        handwritten_fn=_layernorm_handwritten,
    )


# --- transformers (BERT, GPT-2, ViT) and the zoo -----------------------------------------


def _bert(batch: int, sequence: int) -> Workload:
    return Workload(
        f"bert_b{batch}_s{sequence}",
        "bert",
        f"BertModel {BERT.layers} layers, hidden {BERT.hidden}, {BERT.heads} heads, "
        f"batch {batch}, sequence {sequence}",
        lambda: models.bert_model(BERT),
        lambda rng: models.bert_feeds(batch, sequence, BERT.vocab, rng),
        torch_model=lambda: models.build_bert(BERT, attention="sdpa"),
        requires=("torch", "transformers"),
    )


def _quantized_bert(kind: str, batch: int, sequence: int) -> Workload:
    """The BERT encoder quantized by onnxruntime: `kind` "dynamic" (quantize_dynamic, int8 weights) or "static"
    (quantize_static: QDQ, per-channel int8 weights, int8 activations)."""
    name, model, how = {
        "dynamic": ("bert_int8", models.dynamic_bert_model, "quantize_dynamic (int8 weights)"),
        "static": ("bert_qdq_int8", models.static_bert_model,
                   "quantize_static (QDQ, per-channel int8 weights, int8 activations)"),
    }[kind]
    return Workload(
        f"{name}_b{batch}_s{sequence}",
        "quantized",
        f"the BERT encoder quantized with onnxruntime's {how}, batch {batch}, sequence {sequence}",
        lambda: model(BERT),
        lambda rng: models.bert_feeds(batch, sequence, BERT.vocab, rng),
        requires=("torch", "transformers", "onnxruntime"),
    )


def _gpt2(batch: int, sequence: int) -> Workload:
    return Workload(
        f"gpt2_b{batch}_s{sequence}",
        "attention",
        f"GPT2Model {GPT2.layers} layers, hidden {GPT2.hidden}, {GPT2.heads} heads, causal, "
        f"batch {batch}, sequence {sequence}",
        lambda: models.gpt2_model(GPT2),
        lambda rng: models.bert_feeds(batch, sequence, GPT2.vocab, rng),
        torch_model=lambda: models.build_gpt2(GPT2, attention="sdpa"),
        requires=("torch", "transformers"),
    )


def _vit(batch: int) -> Workload:
    return Workload(
        f"vit_b{batch}_s{VIT.sequence}",
        "attention",
        f"ViTModel {VIT.layers} layers, hidden {VIT.hidden}, {VIT.heads} heads, patch {VIT.patch}, "
        f"batch {batch}x3x{VIT.image}x{VIT.image}, sequence {VIT.sequence}",
        lambda: models.vit_model(VIT),
        lambda rng: models.vit_feeds(batch, VIT, rng),
        torch_model=lambda: models.build_vit(VIT, attention="sdpa"),
        requires=("torch", "transformers"),
    )


def _image_feeds(path_of: Callable[[], Path]) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    def feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
        shapes = models.input_shapes(path_of())
        return {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in shapes.items()}
    return feeds


def _transformers_cnn(name: str) -> Workload:
    return Workload(f"cnn_{name}", "cnn", f"transformers {name} backbone, random weights, 1x3x224x224",
                    lambda: cnn_models.transformers_cnn(name), _image_feeds(lambda: cnn_models.transformers_cnn(name)),
                    requires=("torch", "transformers"))


def _quantized_cnn(name: str) -> Workload:
    path_of = lambda: cnn_models.quantized_transformers_cnn(name)   # noqa: E731
    return Workload(f"cnn_{name}_int8", "quantized",
                    f"transformers {name} backbone quantized with onnxruntime's quantize_static (QDQ, per-channel "
                    "int8 weights, uint8 activations), 1x3x224x224", path_of, _image_feeds(path_of),
                    requires=("torch", "transformers", "onnxruntime"))


def _zoo(name: str) -> Workload:
    path = models.zoo_model(name)

    def feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:  # the zoo's inputs are float32 images
        shapes = models.input_shapes(path)
        return {input_name: rng.standard_normal(shape, dtype=np.float32) for input_name, shape in shapes.items()}

    # The light models' weights are constants, mostly zero: outputs do not depend on the inputs, so
    # their errors say little, but the work done is that of the full model.
    description = f"light_{name}.onnx from the onnx package (constant weights)"
    return Workload(f"zoo_{name}", "zoo", description, lambda: path, feeds)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "ew_square",
            "elementwise",
            f"(x*2 + y)^2, {'x'.join(map(str, EW_SHAPE))} f32",
            _square_model,
            _normal("x", "y", shape=EW_SHAPE),
            numpy_fn=lambda x, y: [(x * 2 + y) ** 2],
            numexpr_expr="(x*2 + y)**2",
            torch_fn=lambda x, y: [(x * 2 + y) ** 2],
        ),
        Workload(
            "ew_gelu",
            "elementwise",
            f"0.5*x*(1 + erf(x/sqrt(2))), {'x'.join(map(str, EW_SHAPE))} f32",
            _gelu_model,
            _normal("x", shape=EW_SHAPE),
            numpy_fn=_gelu_numpy,
            torch_fn=lambda x: [0.5 * x * (1 + (x / math.sqrt(2.0)).erf())],
            unsupported={"numexpr": "numexpr has no erf"},
        ),
        Workload(
            "ew_swish_tanh",
            "elementwise",
            f"relu(x*sigmoid(x)*tanh(y) - 0.1), {'x'.join(map(str, EW_SHAPE))} f32",
            _swish_tanh_model,
            _normal("x", "y", shape=EW_SHAPE),
            numpy_fn=lambda x, y: [np.maximum(x / (1 + np.exp(-x)) * np.tanh(y) - 0.1, 0)],
            numexpr_expr="maximum(x / (1 + exp(-x)) * tanh(y) - 0.1, 0)",
            torch_fn=lambda x, y: [(x * x.sigmoid() * y.tanh() - 0.1).relu()],
        ),
        Workload(
            "softmax",
            "reduction",
            f"Softmax over the last axis, {'x'.join(map(str, SOFTMAX_SHAPE))} f32",
            _softmax_model,
            _normal("x", shape=SOFTMAX_SHAPE),
            numpy_fn=_softmax_numpy,
            torch_fn=lambda x: [x.softmax(dim=-1)],
            handwritten_fn=_softmax_handwritten,
        ),
        _layernorm((8, 128, 384)),
        _layernorm((64, 4096)),
        _bert(1, 128),
        _bert(8, 128),
        _quantized_bert("dynamic", 1, 128),
        _quantized_bert("dynamic", 8, 128),
        _quantized_bert("static", 1, 128),
        _quantized_cnn("resnet50"),
        _gpt2(1, 128),
        _vit(1),
        *(_zoo(name) for name in ("resnet50", "densenet121", "inception_v1", "squeezenet", "shufflenet")),
        *(_transformers_cnn(name) for name in cnn_models.TRANSFORMERS_CNNS),
        Workload("cnn_decoder", "cnn", "3 ConvTranspose k4 s2 stages with 3x3 Convs, 256x14x14 -> 2x112x112",
                 cnn_models.decoder, _image_feeds(cnn_models.decoder)),
    ]
}


def select(only: str | None) -> list[Workload]:
    """Workloads named in a comma-separated list of names or groups (all when None)."""
    if not only:
        return list(WORKLOADS.values())
    chosen: dict[str, Workload] = {}
    for token in (t.strip() for t in only.split(",") if t.strip()):
        matches = [w for w in WORKLOADS.values() if token in (w.name, w.group)]
        if not matches:
            groups = sorted({w.group for w in WORKLOADS.values()})
            names = ", ".join([*WORKLOADS, *groups])
            raise ValueError(f"unknown workload {token!r}; choose from {names}")
        chosen.update((w.name, w) for w in matches)
    return list(chosen.values())
