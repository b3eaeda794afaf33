"""The benchmark's ONNX models: small graphs built with onnx.helper, the zoo models shipped in the
onnx package, and transformers exported from PyTorch: a BERT-style encoder, a GPT-2-style decoder and
a ViT-style image encoder, all with eager attention (MatMul, scale, mask, Softmax, MatMul).

Generated files are cached under bench/models/ (git-ignored). The BERT export is also what
tests/data/make_tiny_bert.py uses to make the compiler's tiny fixture.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODELS_DIR = Path(__file__).resolve().parent / "models"
ZOO_DIR = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"

Node = tuple[str, list[str], str, dict]  # op type, inputs, output, attributes


def single_output_graph(
    name: str,
    inputs: Sequence[str],
    shape: Sequence[int],
    nodes: Sequence[Node],
    constants: dict[str, np.ndarray],
    opset: int = 17,
) -> onnx.ModelProto:
    """A float32 graph whose inputs and single output (the last node's) all have `shape`."""
    graph = helper.make_graph(
        [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes],
        name,
        [helper.make_tensor_value_info(i, TensorProto.FLOAT, list(shape)) for i in inputs],
        [helper.make_tensor_value_info(nodes[-1][2], TensorProto.FLOAT, list(shape))],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()],
    )
    # IR 8 is what exporters write for opset 17, and what every peer here loads.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def cached(name: str, build) -> Path:
    """The path of bench/models/NAME.onnx, written by build(path) the first time."""
    path = MODELS_DIR / f"{name}.onnx"
    if not path.exists():
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        build(partial)
        partial.replace(path)
    return path


def save(model: onnx.ModelProto):
    """A build function for cached() that writes an in-memory model."""
    return lambda path: onnx.save(model, path)


def _static_shapes(values, what: str) -> dict[str, list[int]]:
    shapes = {}
    for value in values:
        dims = value.type.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims):
            raise ValueError(f"{what} {value.name!r} has a dynamic shape")
        shapes[value.name] = [d.dim_value for d in dims]
    return shapes


def output_shapes(path: Path | str) -> list[list[int]]:
    """Shapes of the graph outputs, which must be static."""
    graph = onnx.load(path, load_external_data=False).graph
    return list(_static_shapes(graph.output, "output").values())


def input_shapes(path: Path | str) -> dict[str, list[int]]:
    """Shapes of the inputs a caller feeds (not those an initializer gives), which must be static."""
    graph = onnx.load(path, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    return _static_shapes([v for v in graph.input if v.name not in initializers], "input")


def zoo_model(name: str) -> Path:
    return ZOO_DIR / f"light_{name}.onnx"


@dataclass(frozen=True)
class BertSpec:
    """A transformers.BertModel configuration with random weights drawn from `seed`."""

    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536
    vocab: int = 30522
    max_positions: int = 512
    seed: int = 0

    @property
    def cache_name(self) -> str:
        return _cache_name("bert", self)


def _cache_name(prefix: str, spec) -> str:
    return prefix + "_" + "_".join(f"{k}{v}" for k, v in asdict(spec).items())


def torchscript_export(
    model, example: dict[str, np.ndarray], path: Path, outputs: Sequence[str], dynamic: dict, opset: int = 17
) -> None:
    """Export `model` with torch's classic (TorchScript) exporter, tracing it on `example` (positional
    inputs, named and ordered as the dict); `outputs` names its tuple outputs and `dynamic` gives
    the dynamic axes of inputs and outputs by name."""
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        # The classic exporter is deprecated, and traces the mask code with shape-dependent Python.
        warnings.simplefilter("ignore", (DeprecationWarning, torch.jit.TracerWarning, UserWarning))
        torch.onnx.export(
            model,
            tuple(torch.from_numpy(array) for array in example.values()),
            str(path),
            input_names=list(example),
            output_names=list(outputs),
            dynamic_axes=dynamic,
            opset_version=opset,
            dynamo=False,
        )


def traceable(name: str, model, inputs: Sequence[str], outputs: Callable):
    """`model` (called with named inputs) as the form the TorchScript exporter traces: a module of positional
    inputs, in the order of `inputs`, returning the tuple `outputs(result)`. The model is its submodule
    `name`, which prefixes the exported weights' names."""
    import torch

    class Traceable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module(name, model)

        def forward(self, *args):
            return outputs(getattr(self, name)(**dict(zip(inputs, args))))

    return Traceable().eval()


def build_bert(spec: BertSpec, attention: str = "eager"):
    """The encoder as a torch module in eval mode: module(input_ids, attention_mask), both int64
    [batch, sequence], returns (last_hidden_state, pooler_output).

    `attention` is transformers' attn_implementation: "eager" exports as plain MatMul/Softmax;
    "sdpa" is transformers' default for running in PyTorch.
    """
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=spec.vocab,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=spec.max_positions,
        attn_implementation=attention,
    )
    torch.manual_seed(spec.seed)
    return traceable("bert", BertModel(config).eval(), BERT_INPUTS,
                     lambda out: (out.last_hidden_state, out.pooler_output))


BERT_INPUTS = ("input_ids", "attention_mask")
BERT_OUTPUTS = ("last_hidden_state", "pooler_output")


def export_bert(spec: BertSpec, path: Path, opset: int = 17) -> None:
    """Export with torch's classic (TorchScript) exporter and dynamic batch and sequence axes."""
    feeds = bert_feeds(2, 16, spec.vocab, np.random.default_rng(spec.seed))
    dynamic = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    dynamic |= {"last_hidden_state": {0: "batch", 1: "sequence"}, "pooler_output": {0: "batch"}}
    example = {name: feeds[name] for name in BERT_INPUTS}
    torchscript_export(build_bert(spec), example, path, BERT_OUTPUTS, dynamic, opset)


def bert_model(spec: BertSpec) -> Path:
    return cached(spec.cache_name, lambda path: export_bert(spec, path))


def dynamic_bert_model(spec: BertSpec) -> Path:
    """The BERT encoder quantized with ONNX Runtime's `quantize_dynamic` (int8 weights, the defaults)."""
    def quantize(path: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(str(bert_model(spec)), str(path), weight_type=QuantType.QInt8)
    return cached(spec.cache_name + "_dynamic_int8", quantize)


Feeds = dict[str, np.ndarray]


def quantized_static(source: Callable[[], Path], name: str, calibration: Callable[[np.random.Generator], list[Feeds]],
                     activations: str) -> Path:
    """The model `source()` gives, quantized with ONNX Runtime's `quantize_static` into bench/models/NAME.onnx: QDQ
    format, int8 weights per output channel, `activations` ("int8" or "uint8") calibrated on the feeds
    `calibration` makes from a generator of seed 0."""
    def quantize(path: Path) -> None:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        class Calibration(CalibrationDataReader):
            def __init__(self):
                self.feeds = iter(calibration(np.random.default_rng(0)))

            def get_next(self):
                return next(self.feeds, None)

        activation_type = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[activations]
        quantize_static(str(source()), str(path), Calibration(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=activation_type, weight_type=QuantType.QInt8)
    return cached(name, quantize)


def static_bert_model(spec: BertSpec) -> Path:
    """The BERT encoder quantized with `quantize_static`, int8 activations calibrated on 4 random batches."""
    return quantized_static(lambda: bert_model(spec), spec.cache_name + "_qdq_int8",
                            lambda rng: [bert_feeds(1, 128, spec.vocab, rng) for _ in range(4)], "int8")


def bert_feeds(batch: int, sequence: int, vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random token ids and a padding mask: row i has its last (i+1)*sequence//(batch+2) positions
    masked, so every row has some padding and the rows differ."""
    input_ids = rng.integers(0, vocab, (batch, sequence), dtype=np.int64)
    attention_mask = np.ones((batch, sequence), dtype=np.int64)
    for row in range(batch):
        attention_mask[row, sequence - (row + 1) * sequence // (batch + 2) :] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@dataclass(frozen=True)
class Gpt2Spec:
    """A transformers.GPT2Model (decoder with causal self-attention) with random weights drawn from
    `seed`. The vocabulary is GPT-2's 50257 cut to 8192: the token embedding is only gathered from, and
    the full one would make the file 268 MB instead of 140."""

    layers: int = 4
    hidden: int = 768
    heads: int = 12
    vocab: int = 8192
    max_positions: int = 512
    seed: int = 0

    @property
    def cache_name(self) -> str:
        return _cache_name("gpt2", self)


def build_gpt2(spec: Gpt2Spec, attention: str = "eager"):
    """The decoder as a torch module in eval mode without a key/value cache: module(input_ids,
    attention_mask), both int64 [batch, sequence], returns (last_hidden_state,). Attention is causal
    and also masks the padding `attention_mask` marks; `attention` is as in build_bert."""
    import torch
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        vocab_size=spec.vocab,
        n_positions=spec.max_positions,
        n_embd=spec.hidden,
        n_layer=spec.layers,
        n_head=spec.heads,
        bos_token_id=spec.vocab - 1,  # GPT-2's end-of-text token is the last one, 50256 in its vocabulary
        eos_token_id=spec.vocab - 1,
        use_cache=False,
        attn_implementation=attention,
    )
    torch.manual_seed(spec.seed)
    return traceable("gpt2", GPT2Model(config).eval(), GPT2_INPUTS, lambda out: (out.last_hidden_state,))


GPT2_INPUTS = ("input_ids", "attention_mask")


def export_gpt2(spec: Gpt2Spec, path: Path, opset: int = 17) -> None:
    """Export like export_bert: dynamic batch and sequence axes, last_hidden_state the only output."""
    feeds = bert_feeds(2, 16, spec.vocab, np.random.default_rng(spec.seed))
    dynamic = {name: {0: "batch", 1: "sequence"} for name in (*GPT2_INPUTS, "last_hidden_state")}
    example = {name: feeds[name] for name in GPT2_INPUTS}
    torchscript_export(build_gpt2(spec), example, path, ["last_hidden_state"], dynamic, opset)


def gpt2_model(spec: Gpt2Spec) -> Path:
    return cached(spec.cache_name, lambda path: export_gpt2(spec, path))


@dataclass(frozen=True)
class VitSpec:
    """A transformers.ViTModel (image encoder, no pooler) with random weights drawn from `seed`; the
    sequence is the (image // patch)**2 patches and the class token."""

    layers: int = 6
    hidden: int = 384
    heads: int = 6
    intermediate: int = 1536
    image: int = 224
    patch: int = 16
    seed: int = 0

    @property
    def cache_name(self) -> str:
        return _cache_name("vit", self)

    @property
    def sequence(self) -> int:
        return (self.image // self.patch) ** 2 + 1


def build_vit(spec: VitSpec, attention: str = "eager"):
    """The encoder as a torch module in eval mode: module(pixel_values), float32 [batch, 3, image,
    image], returns (last_hidden_state,) of [batch, sequence, hidden]; `attention` is as in build_bert."""
    import torch
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        intermediate_size=spec.intermediate,
        image_size=spec.image,
        patch_size=spec.patch,
        attn_implementation=attention,
    )
    torch.manual_seed(spec.seed)
    return traceable("vit", ViTModel(config, add_pooling_layer=False).eval(), ("pixel_values",),
                     lambda out: (out.last_hidden_state,))


def export_vit(spec: VitSpec, path: Path, opset: int = 17) -> None:
    """Export like export_bert, with a dynamic batch axis (the image size fixes the sequence)."""
    example = vit_feeds(2, spec, np.random.default_rng(spec.seed))
    dynamic = {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    torchscript_export(build_vit(spec), example, path, ["last_hidden_state"], dynamic, opset)


def vit_model(spec: VitSpec) -> Path:
    return cached(spec.cache_name, lambda path: export_vit(spec, path))


def vit_feeds(batch: int, spec: VitSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard normal pixel values (what normalized images look like)."""
    return {"pixel_values": rng.standard_normal((batch, 3, spec.image, spec.image), dtype=np.float32)}
