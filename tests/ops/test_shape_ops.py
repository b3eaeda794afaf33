"""Shape computation ops: inference (including compile-time values of Shape/Size from types alone) and
reference kernels."""
import itertools

import numpy as np
import pytest

import snipjit.ops.shape_ops  # noqa: F401  (registers the ops)
from snipjit import parse_graph
from snipjit.ops import OpError, get_op
from snipjit.ops.common import evaluate
from snipjit.ops.shape_ops import VALUE_FROM_TYPES

INPUTS = "x: f32[N,3,224,224], u: f32[*], s: i64[2], n: i64[k], e: i64[], h: f16[], m: f32[4,?]"


def graph(body, inputs=INPUTS):
    return parse_graph(f"graph({inputs}) -> [y] {{\n{body}\n}}")


def types(body):
    return str(graph(body).outputs[0].type)


def run(op, *inputs, **attrs):
    return evaluate(op, inputs, attrs)[0]


def value_from_types(body):
    """What constant folding learns from the node producing `y` without running it."""
    g = graph(body)
    node = g.outputs[0].producer
    return VALUE_FROM_TYPES[node.op](get_op(node.op).context(node))


@pytest.mark.parametrize("body, expected", [
    ("[y] = Shape(x)", "i64[4]"),
    ("[y] = Shape(x) {start=1}", "i64[3]"),
    ("[y] = Shape(x) {start=-2, end=100}", "i64[2]"),
    ("[y] = Shape(x) {start=3, end=1}", "i64[0]"),
    ("[y] = Shape(u)", "i64[?]"),
    ("[y] = Size(u)", "i64[]"),
    ("[y] = ConstantOfShape(s)", "f32[?,?]"),
    ("[y] = ConstantOfShape(n)", "f32[*]"),
    ("const c: i64[3] = [2, 0, 5]\n[y] = ConstantOfShape(c) {value=tensor<i32[1]>[7]}", "i32[2,0,5]"),
    ("const c: i64[0] = []\n[y] = ConstantOfShape(c) {value=tensor<bool[1]>[true]}", "bool[]"),
    ("[y] = Constant() {value_floats=[1.0, 2.0]}", "f32[2]"),
    ("[y] = Constant() {value_int=3}", "i64[]"),
    ("[y] = Constant() {value=tensor<u8[2,2]>[1, 2, 3, 4]}", "u8[2,2]"),
    ("[y] = Range(e, e, e)", "i64[?]"),
    ("const a: i64[] = 10\nconst b: i64[] = 1\nconst d: i64[] = -3\n[y] = Range(a, b, d)", "i64[3]"),
    ("const a: f32[] = 0.5\nconst b: f32[] = 2.0\nconst d: f32[] = 0.5\n[y] = Range(a, b, d)", "f32[3]"),
    ("[y] = EyeLike(m)", "f32[4,?]"),
    ("[y] = EyeLike(m) {dtype=7, k=1}", "i64[4,?]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert types(body) == expected


@pytest.mark.parametrize("body, message", [
    ("const c: i64[2] = [2, -1]\n[y] = ConstantOfShape(c)", r"shape \[2, -1\] has a negative dimension"),
    ("[y] = ConstantOfShape(s) {value=tensor<f32[2]>[1.0, 2.0]}", "exactly one element"),
    ("[y] = ConstantOfShape(m)", "shape input must be int64"),
    ("[y] = Constant()", "exactly one of"),
    ("[y] = Constant() {value_int=1, value_float=2.0}", "exactly one of"),
    ("[y] = Range(e, e, h)", "input 2 has dtype f16"),
    ("[y] = Range(e, e, s)", "delta must be a scalar, got shape \\[2\\]"),
    ("const a: i64[] = 1\nconst d: i64[] = 0\n[y] = Range(a, a, d)", "delta cannot be 0"),
    ("[y] = EyeLike(x)", "rank 2"),
    ("[y] = EyeLike(m) {dtype=99}", "unknown ONNX element type 99"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body)


def test_shape_and_size_values_from_static_types():
    assert value_from_types("[y] = Shape(x) {start=1}").tolist() == [3, 224, 224]
    assert value_from_types("[y] = Shape(x)") is None            # N is only known at run time
    assert value_from_types("[y] = Shape(m) {end=1}").tolist() == [4]
    assert value_from_types("[y] = Size(x)") is None
    assert value_from_types("[y] = Size(m)") is None
    v = value_from_types("const c: i64[2] = [3, 5]\n[t] = ConstantOfShape(c)\n[y] = Size(t)")
    assert v.dtype == np.int64 and v.shape == () and v == 15


def test_shape_size_kernels_without_data():
    g = graph("[s] = Shape(m) {start=1}\n[y] = Size(x)", inputs="x: f32[N,3], m: f32[4,5,6]")
    shape_node, size_node = g.nodes
    opdef = get_op("Shape")
    assert opdef.run(opdef.context(shape_node), [None])[0].tolist() == [5, 6]
    with pytest.raises(OpError, match="needs the input data or a static input shape"):
        get_op("Size").run(get_op("Size").context(size_node), [None])


def test_shape_size_kernels():
    x = np.zeros((2, 3, 5), np.float16)
    assert run("Shape", x).tolist() == [2, 3, 5]
    assert run("Shape", x, start=-1).tolist() == [5]
    assert run("Shape", x, start=-10, end=-1).tolist() == [2, 3]
    y = run("Size", x)
    assert y.dtype == np.int64 and y == 30


def test_constant_of_shape_and_constant():
    y = run("ConstantOfShape", np.array([2, 3], np.int64))
    assert y.dtype == np.float32 and y.shape == (2, 3) and not y.any()
    y = run("ConstantOfShape", np.array([4], np.int64), value=np.array([-2], np.int8))
    assert y.dtype == np.int8 and y.tolist() == [-2] * 4
    assert run("Constant", value_ints=[1, 2]).tolist() == [1, 2]
    assert run("Constant", value_float=1.5).dtype == np.float32
    assert run("Constant", value_strings=["a", "bc"]).tolist() == ["a", "bc"]
    held = np.array([[1.0, 2.0]], np.float64)
    y = run("Constant", value=held)
    y[0, 0] = 9                                   # the attribute tensor is never handed out
    assert held[0, 0] == 1


@pytest.mark.parametrize("start, limit, delta, expected", [
    (0, 5, 1, [0, 1, 2, 3, 4]),
    (10, 1, -3, [10, 7, 4]),
    (3, 3, 1, []),
    (5, 1, 1, []),
    (1.0, 2.0, 0.25, [1.0, 1.25, 1.5, 1.75]),
    (0.0, -1.0, -0.4, [0.0, -0.4, -0.8]),
])
def test_range(start, limit, delta, expected):
    dt = np.int32 if isinstance(start, int) else np.float32
    y = run("Range", *(np.array(v, dt) for v in (start, limit, delta)))
    assert y.dtype == dt
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_range_half_precision():
    y = run("Range", np.array(1, np.float16), np.array(11, np.float16), np.array(0.1, np.float16))
    # each element is start + i * delta computed in the stash type (float32), then rounded once
    expected = (np.float32(1) + np.arange(len(y), dtype=np.float32) * np.float32(np.float16(0.1))).astype(np.float16)
    assert y.dtype == np.float16 and len(y) == 101       # float16(0.1) is a little below 0.1
    np.testing.assert_array_equal(y, expected)
    with pytest.raises(OpError, match="stash_type"):
        run("Range", np.array(0, np.float16), np.array(2, np.float16), np.array(1, np.float16), stash_type=7)


def test_eye_like():
    y = run("EyeLike", np.zeros((3, 4), np.int32), k=1)
    np.testing.assert_array_equal(y, np.eye(3, 4, k=1, dtype=np.int32))
    y = run("EyeLike", np.zeros((2, 2), np.float32), dtype=9)
    assert y.dtype == bool and y.tolist() == [[True, False], [False, True]]
