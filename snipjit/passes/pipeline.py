"""The graph-level pass pipeline that `snipjit.compile` runs, in order."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.graph import Graph
from .activations_before_reshapes import activations_before_reshapes
from .channels_last import channels_last
from .eliminate_identities import eliminate_identities
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .float_integer_products import float_integer_products
from .decompose_fake_quantize import decompose_fake_quantize
from .fuse_attention_projections import fuse_attention_projections
from .fuse_gelu import fuse_gelu
from .fuse_pad_into_conv import fuse_pad_into_conv
from ..ops.infer_shapes import infer_shapes
from .mark_quantized_convolutions import mark_quantized_convolutions
from .mark_pitched_inputs import mark_pitched_inputs
from .mark_skipped import mark_skipped_by_plugin
from .pool_before_pointwise_conv import pool_before_pointwise_conv
from .postpone_broadcast import postpone_broadcast
from .quantized_products import quantized_products
from .scale_into_pointwise_conv import scale_into_pointwise_conv
from .simplify_shapes import simplify_shapes
from .split_runtime_constants import split_runtime_constants_pass
from .tokenize import tokenize_snippets
from .tokenize_mha import tokenize_mha


@dataclass(frozen=True)
class GraphPass:
    name: str
    fn: Callable[[Graph, dict], Graph | None]

    def run(self, graph: Graph, options: dict) -> Graph | None:
        return self.fn(graph, options)


def default_pipeline(options: dict) -> list[GraphPass]:
    """Options: `fold=False` turns off constant folding; `channels_last=False` keeps convolutions on
    NCHW; `fuse=False` turns off the Snippets tokenizers (every node runs on its own); `mha=False` leaves
    attention blocks to the elementwise tokenizer; `fuse_projections=False` keeps an attention block's Q, K
    and V products apart; `int8=False` keeps quantized models' products and convolutions in float32."""
    passes = [GraphPass("InferShapes", lambda g, o: infer_shapes(g)),
              GraphPass("EliminateIdentities", eliminate_identities)]
    if options.get("fold", True):
        passes += [GraphPass("SimplifyShapes", simplify_shapes),
                   GraphPass("FoldBatchNorm", fold_batchnorm),   # writes weight arithmetic FoldConstants evaluates
                   GraphPass("MarkQuantizedConvolutions", mark_quantized_convolutions),   # (before the weights fold)
                   GraphPass("QuantizedProducts", quantized_products),
                   GraphPass("FoldConstants", fold_constants),
                   GraphPass("PostponeBroadcast", postpone_broadcast),
                   GraphPass("FoldConstants", fold_constants),   # again: what PostponeBroadcast moved
                   GraphPass("SplitRuntimeConstants", split_runtime_constants_pass)]
    if options.get("fuse", True):
        passes += [GraphPass("FuseGelu", fuse_gelu),
                   GraphPass("DecomposeFakeQuantize", decompose_fake_quantize),
                   GraphPass("FloatIntegerProducts", float_integer_products)]
    passes += [GraphPass("FusePadIntoConv", fuse_pad_into_conv),
               GraphPass("PoolBeforePointwiseConv", pool_before_pointwise_conv)]
    if options.get("channels_last", True):
        passes += [GraphPass("ChannelsLast", channels_last),
                   GraphPass("ScaleIntoPointwiseConv", scale_into_pointwise_conv)]
    if options.get("fuse", True):
        passes += [GraphPass("FuseAttentionProjections", fuse_attention_projections),
                   GraphPass("ActivationsBeforeReshapes", activations_before_reshapes),
                   GraphPass("TokenizeMHA", tokenize_mha),
                   GraphPass("MarkSkippedByPlugin", mark_skipped_by_plugin),
                   GraphPass("TokenizeSnippets", lambda g, o: tokenize_snippets(g, with_register_budget(o))),
                   GraphPass("MarkPitchedInputs", mark_pitched_inputs)]
    return passes


def with_register_budget(options: dict) -> dict:
    """The tokenizer's register budget: the target's vector registers unless given."""
    if "vector_registers" in options:
        return options
    from ..targets import TargetError, get_target
    try:
        return {**options, "vector_registers": get_target(options.get("target")).registers["vec"]}
    except TargetError:
        return options
