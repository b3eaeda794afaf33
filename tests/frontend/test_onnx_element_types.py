"""ONNX models with float8, float8e8m0, float4, int4 and int2 tensors (the ml_dtypes types) through
`snipjit.compile`: initializers and Constants (packed 4- and 2-bit data), declared types, Cast round trips,
data-movement ops, feeds, the backend interface, and Cast staying out of generated kernels."""
from __future__ import annotations

import ml_dtypes as ml
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import snipjit
import snipjit.backend
from snipjit.frontend.onnx import load
from snipjit.runtime.execution.feeds import FeedError

vi = helper.make_tensor_value_info


def model(nodes, inputs, outputs, inits=(), opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def cast_round_trip(to, saturate=1):
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=to, saturate=saturate),
             helper.make_node("Cast", ["q"], ["y"], to=TP.FLOAT)]
    return model(nodes, [vi("x", TP.FLOAT, [6])], [vi("y", TP.FLOAT, [6]), vi("q", to, [6])])


X = np.array([0.3, 500, -1e6, np.nan, 1.0625, -0.0], np.float32)


@pytest.mark.parametrize("to, saturate, want", [
    (TP.FLOAT8E4M3FN, 1, [0.3125, 448, -448, np.nan, 1.0, -0.0]),
    (TP.FLOAT8E4M3FN, 0, [0.3125, np.nan, np.nan, np.nan, 1.0, -0.0]),
    (TP.FLOAT8E4M3FNUZ, 1, [0.3125, 240, -240, np.nan, 1.0, 0.0]),
    (TP.FLOAT8E5M2, 1, [0.3125, 512, -57344, np.nan, 1.0, -0.0]),
    (TP.FLOAT8E5M2, 0, [0.3125, 512, -np.inf, np.nan, 1.0, -0.0]),
    (TP.FLOAT8E5M2FNUZ, 0, [0.3125, 512, np.nan, np.nan, 1.0, 0.0]),
])
def test_f32_to_float8_and_back_compiles_and_runs(to, saturate, want):
    y, q = snipjit.compile(cast_round_trip(to, saturate)).run({"x": X})
    np.testing.assert_array_equal(y, np.array(want, np.float32))
    numbers = ~np.isnan(y)
    assert np.signbit(y[numbers]).tolist() == np.signbit(np.array(want)[numbers]).tolist()
    assert q.dtype == np.dtype(helper.tensor_dtype_to_np_dtype(to))


def test_f32_to_int4_and_uint4_and_back():
    x = np.array([-8.5, -7.9, 7.5, 3.9, -0.5, 0.9], np.float32)
    y, q = snipjit.compile(cast_round_trip(TP.INT4)).run({"x": x})
    assert q.dtype == ml.int4 and y.tolist() == [-8, -7, 7, 3, 0, 0]   # truncated toward zero
    y, q = snipjit.compile(cast_round_trip(TP.UINT4)).run({"x": x + 8})
    assert q.dtype == ml.uint4 and y.tolist() == [0, 0, 15, 11, 7, 8]


def test_packed_initializers_and_constants_are_read_as_their_values():
    i4 = np.array([-8, 7, -1, 0, 3], ml.int4)                  # odd count: the last byte is half used
    u2 = np.array([[0, 1, 2], [3, 2, 1]], ml.uint2)
    f4 = np.array([-6, 0.5, 3, -0.0], ml.float4_e2m1fn)
    e8 = np.array([2.0 ** -127, 1, 2.0 ** 127], ml.float8_e8m0fnu)
    f8 = np.array([448, -0.0, 0.015625], ml.float8_e4m3fn)
    inits = [numpy_helper.from_array(a, n) for a, n in ((i4, "i4"), (u2, "u2"), (f4, "f4"))]
    nodes = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(a, n))
             for a, n in ((e8, "e8"), (f8, "f8"))]
    outputs = [vi(n, t, None) for n, t in (("i4", TP.INT4), ("u2", TP.UINT2), ("f4", TP.FLOAT4E2M1),
                                           ("e8", TP.FLOAT8E8M0), ("f8", TP.FLOAT8E4M3FN))]
    g = load(model(nodes, [], outputs, inits))
    assert [str(v.type) for v in g.outputs] == ["i4[5]", "u2[2,3]", "f4e2m1[4]", "f8e8m0[3]", "f8e4m3fn[3]"]
    for v, want in zip(g.outputs, (i4, u2, f4, e8, f8)):
        assert v.data.dtype == want.dtype and v.data.view(np.uint8).tolist() == want.view(np.uint8).tolist()


def test_casts_of_constants_fold_to_the_same_values():
    w = np.array([1.0625, 1000, -3.7], np.float32)
    nodes = [helper.make_node("Cast", ["w"], ["q"], to=TP.FLOAT8E5M2),
             helper.make_node("Cast", ["q"], ["c"], to=TP.FLOAT),
             helper.make_node("Add", ["x", "c"], ["y"])]
    m = model(nodes, [vi("x", TP.FLOAT, [3])], [vi("y", TP.FLOAT, [3])], [numpy_helper.from_array(w, "w")])
    cm = snipjit.compile(m)
    assert not any("Cast" in step.ops for step in cm.plan)
    (y,) = cm.run({"x": np.zeros(3, np.float32)})
    assert y.tolist() == [1.0, 1024.0, -3.5]


FLOAT8_X = (np.arange(2 * 96 * 128) % 29 - 14).astype(np.float32).reshape(2, 96, 128)


@pytest.mark.parametrize("elem, np_type", [(TP.FLOAT8E4M3FN, ml.float8_e4m3fn), (TP.INT4, ml.int4),
                                           (TP.UINT2, ml.uint2), (TP.FLOAT4E2M1, ml.float4_e2m1fn)])
def test_data_movement_ops_carry_the_types(elem, np_type):
    x = FLOAT8_X.astype(np_type)
    ints = {n: numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
            (("shape", [192, 128]), ("ax", [0]), ("ix", [3, 0]), ("start", [1]), ("end", [3]),
             ("pads", [0, 0, 1, 0, 0, 1]), ("reps", [1, 1, 2]))}
    cond = numpy_helper.from_array(np.arange(128) % 3 == 0, "cond")
    make = helper.make_node
    cases = {   # output name: (nodes, reference)
        "reshaped": ([make("Reshape", ["x", "shape"], ["reshaped"])], x.reshape(192, 128)),
        "transposed": ([make("Transpose", ["x"], ["transposed"], perm=[2, 0, 1])], x.transpose(2, 0, 1)),
        "flat": ([make("Flatten", ["x"], ["flat"], axis=2)], x.reshape(192, 128)),
        "squeezed": ([make("Unsqueeze", ["x", "ax"], ["u"]), make("Squeeze", ["u", "ax"], ["squeezed"])], x),
        "joined": ([make("Concat", ["x", "x"], ["joined"], axis=1)], np.concatenate([x, x], 1)),
        "gathered": ([make("Gather", ["x", "ix"], ["gathered"], axis=2)], x[:, :, [3, 0]]),
        "sliced": ([make("Slice", ["x", "start", "end", "ax"], ["sliced"])], x[1:3]),
        "padded": ([make("Pad", ["x", "pads"], ["padded"])],   # zero bytes are zero in every one of these types
                   np.pad(x.view(np.uint8), [(0, 0), (0, 0), (1, 1)]).view(x.dtype)),
        "tiled": ([make("Tile", ["x", "reps"], ["tiled"])], np.tile(x, (1, 1, 2))),
        "chosen": ([make("Where", ["cond", "x", "x2"], ["chosen"]), make("Identity", ["x"], ["x2"])], x),
        "same": ([make("Identity", ["x"], ["same"])], x),
    }
    nodes = [n for ns, _ in cases.values() for n in ns]
    nodes.sort(key=lambda n: n.output[0] != "x2")   # Where reads x2
    m = model(nodes, [vi("x", elem, list(x.shape))], [vi(n, elem, None) for n in cases], [*ints.values(), cond])
    outs = snipjit.compile(m).run({"x": x})
    for name, y in zip(cases, outs):
        want = cases[name][1]
        assert y.dtype == x.dtype and y.shape == want.shape, name
        assert np.array_equal(y.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), name


def test_feeds_of_the_new_types_are_checked():
    cm = snipjit.compile(cast_round_trip(TP.FLOAT8E4M3FN))
    with pytest.raises(FeedError, match="must have dtype f32"):
        cm.run({"x": X.astype(ml.float8_e4m3fn)})
    nodes = [helper.make_node("Cast", ["q"], ["y"], to=TP.FLOAT)]
    cm = snipjit.compile(model(nodes, [vi("q", TP.INT4, [3])], [vi("y", TP.FLOAT, [3])]))
    assert cm.run({"q": np.array([-8, 0, 7], ml.int4)})[0].tolist() == [-8, 0, 7]
    with pytest.raises(FeedError, match=r"must have dtype i4 \(numpy int4\), got int8"):
        cm.run({"q": np.array([-8, 0, 7], np.int8)})


def test_backend_run_node_takes_and_gives_the_new_types_and_strings():
    (y,) = snipjit.backend.run_node(helper.make_node("Cast", ["x"], ["y"], to=TP.FLOAT8E4M3FN), [X])
    assert y.dtype == ml.float8_e4m3fn and y.astype(np.float32)[1] == 448
    (s,) = snipjit.backend.run_node(helper.make_node("Cast", ["x"], ["y"], to=TP.STRING), [y])
    assert s.dtype == object and s.tolist()[:3] == ["0.3125", "448.0", "-448.0"]
    (b,) = snipjit.backend.run_node(helper.make_node("CastLike", ["s", "like"], ["b"]),
                                    [np.array(["7", "-9"]), np.zeros(0, ml.int4)])
    assert b.dtype == ml.int4 and b.tolist() == [7, 7]


def test_casts_to_and_from_the_new_types_stay_out_of_generated_kernels():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["q"], to=TP.FLOAT8E4M3FN),
             helper.make_node("Cast", ["q"], ["d"], to=TP.FLOAT), helper.make_node("Sigmoid", ["d"], ["y"])]
    cm = snipjit.compile(model(nodes, [vi("x", TP.FLOAT, [64, 512])], [vi("y", TP.FLOAT, None)]))
    kinds = {tuple(step.ops): step.kind for step in cm.plan}
    assert kinds[("Cast",)] == "reference"
    assert all("Cast" not in ops for ops, kind in kinds.items() if kind == "snippet")
    x = np.linspace(-600, 600, 64 * 512, dtype=np.float32).reshape(64, 512)
    (y,) = cm.run({"x": x})
    want = np.maximum(x, 0).clip(max=448).astype(ml.float8_e4m3fn).astype(np.float32)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-want)), rtol=1e-6)
