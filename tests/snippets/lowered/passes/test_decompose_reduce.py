"""DecomposeReduce: each `ReduceLast` becomes Fill (the kind's identity, before its nest), Accumulate (in the
nest, in place on the Fill's value) and Horizon (after the nest: all lanes combined; a mean divides by
the loop's work amount); the reduction's consumers read the Horizon. Then the emitted accumulators on
rows with vector tails: dead lanes of a tail never reach the result."""
import numpy as np
import pytest

import snipjit
from lir_helpers import find, layout, lowered, one, port_of
from snipjit.snippets.lowered.passes.decompose_reduce import DecomposeReduce
from snipjit.snippets.symbolic import Sym
from lir_helpers import checked_if_possible


pytestmark = pytest.mark.usefixtures("memory_only_kernel_cache")   # kernels compiled from this code


def reduce_body(kind: str, inner="37") -> str:
    return f'graph(x: f32[4,{inner}]) -> [z] {{ [z] = snippets::ReduceLast(x) {{kind="{kind}"}} }}'


def test_softmax_accumulators_surround_their_nests():
    lir = lowered("graph(x: f32[4,37]) -> [z] { [z] = Softmax(x) }", "FuseLoops")
    assert DecomposeReduce().run(lir) is True
    assert layout(lir) == ["Parameter", "Fill", "Accumulate[0]", "Horizon", "Fill", "Sub[1]", "Exp[1]",
                           "Accumulate[1]", "Horizon", "Reciprocal", "Mul[2]", "Result"]
    assert find(lir, "ReduceLast") == []
    fill_max, fill_sum = find(lir, "Fill")
    acc_max, acc_sum = find(lir, "Accumulate")
    h_max, h_sum = find(lir, "Horizon")
    assert (fill_max.attrs, fill_sum.attrs) == ({"value": float("-inf")}, {"value": 0.0})
    assert acc_max.attrs == {"kind": "shift_max", "inplace": 0} and acc_sum.attrs == {"kind": "sum", "inplace": 0}
    assert acc_max.input_source(0) is fill_max and acc_max.input_source(1).op == "Parameter"
    assert acc_sum.input_source(0) is fill_sum and acc_sum.input_source(1) is one(lir, "Exp")
    assert h_max.input_source(0) is acc_max and h_sum.input_source(0) is acc_sum
    assert h_max.attrs == {"kind": "shift_max", "count": None}
    # the reductions' consumers now read the Horizons
    assert one(lir, "Sub").input_source(1) is h_max and one(lir, "Reciprocal").input_source(0) is h_sum
    assert [e.out_descs[0].shape for e in (fill_max, acc_max, h_max)] == [(4, 1)] * 3
    # the Accumulate reading the Parameter is the first loop's entry port now (ports refreshed)
    assert port_of(lir.loop_manager[0], acc_max, "in", 1).port.expr is acc_max


@pytest.mark.parametrize("kind, identity", [("sum", 0.0), ("mean", 0.0), ("max", float("-inf")),
                                            ("min", float("inf")), ("prod", 1.0)])
def test_fill_holds_the_identity_of_the_kind(kind, identity):
    lir = lowered(reduce_body(kind), "DecomposeReduce")
    assert layout(lir) == ["Parameter", "Fill", "Accumulate[0]", "Horizon", "Result"]
    assert one(lir, "Fill").attrs == {"value": identity}
    assert one(lir, "Accumulate").attrs["kind"] == one(lir, "Horizon").attrs["kind"] == kind
    assert one(lir, "Result").input_source(0) is one(lir, "Horizon")


@pytest.mark.parametrize("inner, count", [("37", Sym.const(37)), ("?", Sym.dim(1)), ("1", Sym.const(1))])
def test_a_mean_divides_by_the_loops_work_amount(inner, count):
    lir = lowered(reduce_body("mean", inner), "DecomposeReduce")
    assert one(lir, "Horizon").attrs["count"] == count == lir.loop_manager[0].work_amount


def test_reductions_sharing_a_nest_each_get_their_accumulator():
    lir = lowered("""graph(x: f32[4,37]) -> [s, m] {
      [s] = snippets::ReduceLast(x) {kind="sum"}
      [m] = snippets::ReduceLast(x) {kind="max"}
    }""", "DecomposeReduce")
    assert layout(lir) == ["Parameter", "Fill", "Fill", "Accumulate[0]", "Accumulate[0]", "Horizon", "Horizon",
                           "Result", "Result"]
    for acc in find(lir, "Accumulate"):
        (horizon,) = [c.expr for c in acc.consumers(0)]
        assert horizon.op == "Horizon" and horizon.attrs["kind"] == acc.attrs["kind"]
        assert acc.input_source(0).op == "Fill" and acc.input_source(0).consumers(0) == [acc.input_port(0)]


def test_nothing_to_do_without_reductions():
    lir = lowered("graph(x: f32[4,37]) -> [z] { [z] = Exp(x) }", "FuseLoops")
    before = layout(lir)
    assert DecomposeReduce().run(lir) is False
    assert layout(lir) == before


# ---- the emitted accumulators ---------------------------------------------------------------------
def compiled_reduction(kind: str):
    text = f"""graph(x: f32[3,n]) -> [z] {{
      const axes: i64[1] = [-1]
      [z] = Reduce{kind.capitalize()}(x, axes)
    }}"""
    return snipjit.compile(snipjit.parse_graph(text), **checked_if_possible())


SIZES = (1, 15, 16, 17, 31, 33, 300)


@pytest.mark.parametrize("kind, data", [
    ("max", lambda rng, n: -1 - rng.random((3, n), np.float32) * 9),    # all negative: a 0 lane would win
    ("min", lambda rng, n: 1 + rng.random((3, n), np.float32) * 9),     # all positive
    ("prod", lambda rng, n: rng.choice(np.float32([0.5, 2.0, -1.0]), (3, n))),   # exact products; 0 lanes would zero
    ("sum", lambda rng, n: rng.integers(-8, 8, (3, n)).astype(np.float32)),     # exact sums
    ("mean", lambda rng, n: rng.integers(0, 4, (3, n)).astype(np.float32) * 8),  # exact: divides by n, not lanes
])
def test_tails_update_only_their_live_lanes(kind, data):
    cm = compiled_reduction(kind)
    assert [s.kind for s in cm.plan] == ["snippet"]
    rng = np.random.default_rng(0)
    for n in SIZES:
        x = data(rng, n)
        want = {"max": np.max, "min": np.min, "prod": np.prod, "sum": np.sum,
                "mean": lambda a, **k: np.sum(a, **k) / np.float32(n)}[kind](x, axis=-1, keepdims=True)
        np.testing.assert_array_equal(cm.run({"x": x})[0], want, err_msg=f"{kind} of {n}")


def test_a_nan_anywhere_in_a_row_gives_nan_for_max_and_min():
    for kind in ("max", "min"):
        cm = compiled_reduction(kind)
        x = np.ones((3, 33), np.float32)
        x[0, 2], x[1, 32], x[2, 17] = np.nan, np.nan, np.nan    # main part, tail, second vector
        assert np.isnan(cm.run({"x": x})[0]).all(), kind


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_rows_with_nan_and_infinities_match_the_reference(op):
    """The shift max may drop a NaN: the row's NaN still reaches every output through the sum."""
    text = f"""graph(x: f32[6,n]) -> [z] {{
      [z] = {op}(x) {{axis=-1}}
    }}"""
    graph = snipjit.parse_graph(text)
    fused = snipjit.compile(graph, **checked_if_possible())
    reference = snipjit.compile(graph, implementations={"reference"})
    assert [s.kind for s in fused.plan] == ["snippet"]
    for n in (5, 16, 33):
        x = np.random.default_rng(n).standard_normal((6, n)).astype(np.float32)
        x[0, n // 2] = np.nan                    # NaN inside
        x[1, n - 1] = np.nan                     # NaN in the tail lanes
        x[2, 0] = np.inf                         # +inf: a NaN row
        x[3, :] = -np.inf                        # all -inf: a NaN row
        x[4, 1 % n] = -np.inf                    # one -inf: exp gives 0
        np.testing.assert_array_equal(np.isnan(fused.run({"x": x})[0]), np.isnan(reference.run({"x": x})[0]))
        np.testing.assert_allclose(fused.run({"x": x})[0], reference.run({"x": x})[0], rtol=1e-5, atol=1e-6)
