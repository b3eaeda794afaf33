"""Which math function computes each elementwise graph op, and from which node attributes.

Both targets' emitters derive their entries for these ops from this one table, so a new
elementwise op needs its registry entry (snipjit/ops), its supported-ops entry and a row here
with its math function; no emitter changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MathCall:
    """Graph op -> math function ``op``; ``params`` maps its parameters to node attribute names."""

    op: str
    params: dict[str, str] = field(default_factory=dict)

    def arguments(self, attrs: dict) -> dict:
        """The function's parameters from a node's attributes (absent ones take the defaults)."""
        return {p: _value(attrs[a]) for p, a in self.params.items() if a in attrs}


def _value(attribute):
    return attribute if isinstance(attribute, str) else float(attribute)


def _same(*names: str) -> dict[str, str]:
    return {n: n for n in names}


ELEMENTWISE: dict[str, MathCall] = {
    "Pow": MathCall("pow"), "PowerStatic": MathCall("pow_static", {"exponent": "power"}),
    "Neg": MathCall("neg"), "Abs": MathCall("abs"), "Relu": MathCall("relu"),
    "Sqrt": MathCall("sqrt"), "Reciprocal": MathCall("reciprocal"), "Sign": MathCall("sign"),
    "Round": MathCall("round_half_even"),
    "Exp": MathCall("exp"), "Log": MathCall("log"), "Erf": MathCall("erf"),
    "Sin": MathCall("sin"), "Cos": MathCall("cos"), "Tan": MathCall("tan"),
    "Asin": MathCall("asin"), "Acos": MathCall("acos"), "Atan": MathCall("atan"),
    "Sinh": MathCall("sinh"), "Cosh": MathCall("cosh"), "Asinh": MathCall("asinh"),
    "Acosh": MathCall("acosh"), "Atanh": MathCall("atanh"),
    "Sigmoid": MathCall("sigmoid"), "Tanh": MathCall("tanh"), "Softplus": MathCall("softplus"),
    "Mish": MathCall("mish"), "Softsign": MathCall("softsign"), "PRelu": MathCall("prelu"),
    "HardSwish": MathCall("hard_swish"),
    "LeakyRelu": MathCall("leaky_relu", _same("alpha")), "Elu": MathCall("elu", _same("alpha")),
    "Selu": MathCall("selu", _same("alpha", "gamma")), "Celu": MathCall("celu", _same("alpha")),
    "HardSigmoid": MathCall("hard_sigmoid", _same("alpha", "beta")),
    "ThresholdedRelu": MathCall("thresholded_relu", _same("alpha")),
    "Gelu": MathCall("gelu", _same("approximate")),
}
