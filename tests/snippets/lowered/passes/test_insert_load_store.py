"""InsertLoadStore: a Load per consumer of a Parameter, right before it and in its loops; a Store per
Result right after the producer; one-element Loads for inputs that broadcast along the innermost dim."""
import pytest

from lir_helpers import find, layout, lowered, one
from snipjit.snippets.lowered.linear_ir import LinearIRError


def test_one_load_per_consumer_and_a_store_per_result():
    lir = lowered("""graph(x: f32[4,37], y: f32[37]) -> [z, w] {
      [a] = Mul(x, y)
      [z] = Add(a, x)
      [w] = Relu(a)
    }""", "InsertLoadStore")
    assert layout(lir) == ["Parameter", "Parameter", "Load[0]", "Load[0]", "Mul[0]", "Load[0]", "Add[0]",
                           "Store[0]", "Relu[0]", "Store[0]", "Result", "Result"]
    x, y = lir.parameters()
    loads = find(lir, "Load")
    assert [ld.input_source(0) for ld in loads] == [x, y, x]
    assert [ld.attrs for ld in loads] == [{"count": 16, "buffer": ("param", 0)}, {"count": 16, "buffer": ("param", 1)},
                                          {"count": 16, "buffer": ("param", 0)}]
    assert [c.expr.op for c in x.consumers(0)] == ["Load", "Load"]
    assert one(lir, "Add").input_source(1) is loads[2]
    assert loads[0].in_descs[0].subtensor == loads[0].out_descs[0].subtensor == (16,)
    stores = find(lir, "Store")
    assert [s.attrs["buffer"] for s in stores] == [("result", 0), ("result", 1)]
    assert [s.input_source(0).op for s in stores] == ["Add", "Relu"]
    assert [r.input_source(0) for r in lir.results()] == stores
    info = lir.loop_manager[0]
    assert [p.port.expr for p in info.entry_points] == loads
    assert [p.port.expr for p in info.exit_points] == stores


def test_inputs_broadcasting_along_the_innermost_dim_load_one_element():
    lir = lowered("graph(x: f32[4,37], s: f32[4,1], r: f32[]) -> [z] { [a] = Add(x, s)\n [z] = Mul(a, r) }",
                  "InsertLoadStore")
    assert [ld.attrs["count"] for ld in find(lir, "Load")] == [16, 1, 1]
    assert find(lir, "Load")[1].out_descs[0].subtensor == (1,)


def test_an_innermost_master_dim_of_one_loads_full_vectors():
    # nothing broadcasts: the loop's single element is a (masked) tail later
    lir = lowered("graph(x: f32[4,1]) -> [z] { [z] = Neg(x) }", "InsertLoadStore")
    assert one(lir, "Load").attrs["count"] == 16


def test_bool_buffers_keep_their_dtype():
    lir = lowered("graph(c: bool[8], x: f32[8]) -> [z] { [m] = Not(c)\n [z] = Where(m, x, x) }",
                  "InsertLoadStore")
    assert [ld.dtype for ld in find(lir, "Load")] == ["bool", "f32", "f32"]


def test_outputs_broadcasting_along_the_innermost_dim_store_one_element():
    lir = lowered("graph(x: f32[4,37], s: f32[4,1]) -> [z, t] { [t] = Neg(s)\n [z] = Add(x, t) }",
                  "InsertLoadStore")
    assert [st.attrs["count"] for st in find(lir, "Store")] == [1, 16]


def test_a_body_input_that_is_also_an_output_is_refused():
    with pytest.raises(LinearIRError, match="body input 'x' is also a body output"):
        lowered("graph(x: f32[8]) -> [x, z] { [z] = Neg(x) }", "InsertLoadStore")
