"""PropagateLayout: Parameters and Results take the layout their memory ports use."""
import pytest

from lir_helpers import find, lowered
from snipjit import parse_graph
from snipjit.snippets.dataflow.canonicalization import Canonicalization
from snipjit.snippets.lowered.linear_ir import LinearIR, LinearIRError
from snipjit.snippets.lowered.passes.propagate_layout import PropagateLayout

BODY = "graph(x: f32[4,8], y: f32[4,8]) -> [z] { [a] = Add(x, y)\n [z] = Mul(a, x) }"


def test_planar_layouts_everywhere_by_default():
    lir = lowered(BODY)
    assert [p.out_descs[0].layout for p in lir.parameters()] == [(0, 1), (0, 1)]
    assert lir.results()[0].in_descs[0].layout == (0, 1)


def test_a_load_layout_reaches_its_parameter_and_a_store_layout_its_result():
    lir = lowered(BODY, "CleanRepeatedDataPointerShifts")
    y_load = find(lir, "Load")[1]
    y_load.in_descs[0].layout = (1, 0)
    find(lir, "Store")[0].out_descs[0].layout = (1, 0)
    assert PropagateLayout().run(lir) is True
    assert [p.out_descs[0].layout for p in lir.parameters()] == [(0, 1), (1, 0)]
    assert lir.results()[0].in_descs[0].layout == (1, 0)
    assert PropagateLayout().run(lir) is False


def test_disagreeing_layouts_of_one_parameter_are_refused():
    lir = lowered(BODY, "CleanRepeatedDataPointerShifts")
    find(lir, "Load")[2].in_descs[0].layout = (1, 0)    # the second read of x
    with pytest.raises(LinearIRError, match="parameter 'x' is read with layouts"):
        PropagateLayout().run(lir)


def test_layouts_recorded_by_canonicalization_reach_the_parameters():
    body = parse_graph(BODY)
    Canonicalization([(0, 1), (1, 0)]).run(body)
    lir = LinearIR.from_body(body)
    assert [p.out_descs[0].layout for p in lir.parameters()] == [(0, 1), (1, 0)]


def test_a_brgemm_writing_merged_heads_gives_its_result_that_layout():
    """FuseTransposeBrgemm's output layout (the head merge) reaches the Result through the Brgemm's port."""
    lir = lowered("""graph(p: f32[2,3,5,7], v: f32[2,3,7,4]) -> [o] {
     [oh] = MatMul(p, v)
     [o] = Transpose(oh) {perm = [0, 2, 1, 3]} }""", "")
    assert find(lir, "Brgemm")[0].out_descs[0].layout == (0, 2, 1, 3)
    PropagateLayout().run(lir)
    assert lir.results()[0].in_descs[0].layout == (0, 2, 1, 3)
