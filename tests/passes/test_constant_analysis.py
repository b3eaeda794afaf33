"""ConstantAnalysis: which values are constant (compile-time or runtime) and which nodes form the
constant subgraph."""
import pytest

from snipjit import parse_graph
from snipjit.passes.constant_analysis import ConstantAnalysis, Kind


def analyse(text: str, constant_inputs=(), limit: int = 64 * 1024) -> ConstantAnalysis:
    return ConstantAnalysis(parse_graph(text, elided="zeros"), constant_inputs, limit)


def kinds(a: ConstantAnalysis) -> dict[str, str]:
    """Each node's first output name -> the kind of the node (only constant-subgraph nodes)."""
    return {n.outputs[0].name: a.kinds[n.outputs[0]].value for n in a.nodes}


WEIGHTS = """graph(x: f32[2,8], w: f32[16,8]) -> [y: f32[2,16]] {
  const scale: f32[] = 0.5
  const bias: f32[16] = <elided>
  [half: f32[] ] = Mul(scale, scale)
  [wt] = Transpose(w) {perm=[1, 0]}
  [ws] = Mul(wt, half)
  [m] = MatMul(x, ws)
  [y] = Add(m, bias)
}"""


def test_compile_time_constants_flow_through_nodes_and_stop_at_variables():
    a = analyse(WEIGHTS)
    assert kinds(a) == {"half": "compile_time"}
    g = a.graph
    assert a.kind(g.inputs[0]) is None and a.kind(g.inputs[1]) is None
    assert a.kind(next(v for v in g.constants if v.name == "bias")) is Kind.COMPILE_TIME


def test_declared_inputs_are_runtime_constants_and_taint_what_they_reach():
    a = analyse(WEIGHTS, constant_inputs={"w"})
    assert kinds(a) == {"half": "compile_time", "wt": "runtime", "ws": "runtime"}
    assert [v.name for v in a.boundary()] == ["ws"]
    assert [n.outputs[0].name for n in a.nodes_of(Kind.RUNTIME)] == ["wt", "ws"]


def test_boundary_includes_constant_graph_outputs():
    a = analyse("""graph(x: f32[4], w: f32[4]) -> [y: f32[4], n: f32[4]] {
      [n] = Neg(w)
      [y] = Add(x, n)
    }""", constant_inputs={"w"})
    assert [v.name for v in a.boundary()] == ["n"]


def test_unknown_constant_input_is_an_error():
    g = parse_graph(WEIGHTS, elided="zeros")
    with pytest.raises(ValueError, match=r"constant_inputs names \['nope'\]"):
        ConstantAnalysis.of(g, {"constant_inputs": {"nope"}})


def test_shape_and_size_of_static_values_are_constant_whatever_the_value():
    a = analyse("""graph(x: f32[batch,3,4], y: f32[2,3]) -> [s: i64[2], t: i64[3], n: i64[], m: i64[]] {
      [r] = Relu(y)
      [s] = Shape(r)
      [t] = Shape(x)
      [tail] = Shape(x) {start=1}
      [n] = Size(r)
      [m] = Size(x)
      [p] = Mul(s, s)
    }""")
    assert kinds(a) == {"s": "compile_time", "tail": "compile_time", "n": "compile_time", "p": "compile_time"}


def test_nondeterministic_nodes_are_not_constant():
    a = analyse("""graph(x: f32[4]) -> [d: f32[4], e: f32[4]] {
      const c: f32[4] = [1.0, 2.0, 3.0, 4.0]
      const ratio: f32[] = 0.5
      const training: bool[] = true
      const inference: bool[] = false
      [d] = Dropout(c, ratio, training)
      [e] = Dropout(c, ratio, inference)
    }""")
    assert kinds(a) == {"e": "compile_time"}


@pytest.mark.parametrize("limit, constant", [(1 << 20, True), (1024, False)])
def test_a_large_broadcast_is_kept_out_of_the_constant_subgraph(limit, constant):
    # 64 x 64 f32 is 16 KiB from 256 bytes
    a = analyse("""graph(x: f32[64,64]) -> [y: f32[64,64]] {
      const row: f32[1,64] = <elided>
      const shape: i64[2] = [64, 64]
      [big] = Expand(row, shape)
      [neg] = Neg(big)
      [y] = Add(x, neg)
    }""", limit=limit)
    assert list(kinds(a)) == (["big", "neg"] if constant else [])


def test_a_broadcast_that_does_not_grow_stays_constant():
    a = analyse("""graph(x: f32[64,64]) -> [y: f32[64,64]] {
      const full: f32[64,64] = <elided>
      const shape: i64[2] = [1, 64]
      [same] = Expand(full, shape)
      [y] = Add(x, same)
    }""", limit=0)
    assert list(kinds(a)) == ["same"]
