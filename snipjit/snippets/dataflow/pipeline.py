"""The data-flow optimizer: the default pass order over a Subgraph body, extensible by position."""
from __future__ import annotations

from ...ir.graph import Graph
from .canonicalization import Canonicalization
from .decompose_reductions import DecomposeReductions
from .convert_constants_to_scalars import ConvertConstantsToScalars
from .convert_matmul_to_brgemm import ConvertMatMulToBrgemm
from .fuse_transpose_brgemm import FuseTransposeBrgemm
from .split_dimension_m import SplitDimensionM
from .convert_div_to_mul import ConvertDivToMul
from .convert_power_to_powerstatic import ConvertPowerToPowerStatic
from .eliminate_identity_arithmetic import EliminateIdentityArithmetic
from ..pass_manager import PassPipeline, PositionedPass


def data_flow_pipeline(extra: list[PositionedPass] = ()) -> PassPipeline:
    # reductions first: their axis attributes refer to the ranks before canonicalization pads them
    pipeline = PassPipeline([ConvertMatMulToBrgemm(), FuseTransposeBrgemm(), SplitDimensionM(), DecomposeReductions(),
                             Canonicalization(), ConvertConstantsToScalars(), ConvertPowerToPowerStatic(),
                             ConvertDivToMul(), EliminateIdentityArithmetic()])
    for p in extra:
        pipeline.insert(p)
    return pipeline


def optimize_body(body: Graph, extra: list[PositionedPass] = (), observer=None) -> Graph:
    """Run the data-flow optimizer on a copy of `body` and return it."""
    body = body.copy()
    data_flow_pipeline(extra).run_all(body, observer)
    body.validate()
    return body
