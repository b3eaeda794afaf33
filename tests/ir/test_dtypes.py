"""The element-type table: NumPy and ONNX counterparts of every dtype, the ml_dtypes types (float8, float4,
float6, int4, int2, bfloat16), storage sizes, and the text form of graphs using them."""
import pickle

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from snipjit import parse_graph
from snipjit.ir.dtypes import BY_NAME, BY_ONNX, FLOAT8, DType, dtype
from snipjit.ir.graph import print_graph
from snipjit.ir.text import ParseError

NUMERIC = [d for d in BY_NAME.values() if d.kind != "string"]
ML_DTYPES = {"bf16": "bfloat16", "f8e4m3fn": "float8_e4m3fn", "f8e4m3fnuz": "float8_e4m3fnuz",
             "f8e5m2": "float8_e5m2", "f8e5m2fnuz": "float8_e5m2fnuz", "f8e8m0": "float8_e8m0fnu",
             "f4e2m1": "float4_e2m1fn", "f6e2m3": "float6_e2m3fn", "f6e3m2": "float6_e3m2fn",
             "i4": "int4", "u4": "uint4", "i2": "int2", "u2": "uint2"}


def test_every_onnx_element_type_but_complex_has_a_dtype():
    codes = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED, onnx.TensorProto.COMPLEX64,
                                                       onnx.TensorProto.COMPLEX128}
    assert codes == set(BY_ONNX)
    assert len(BY_NAME) == len(BY_ONNX)


@pytest.mark.parametrize("d", NUMERIC, ids=str)
def test_numpy_dtype_agrees_with_onnx_and_maps_back(d):
    assert d.np == helper.tensor_dtype_to_np_dtype(d.onnx)
    assert dtype(d.np) is d and dtype(d.onnx) is d and dtype(d.name) is d
    assert d.from_ml_dtypes == (d.name in ML_DTYPES)
    if d.from_ml_dtypes:
        assert d.np == np.dtype(getattr(ml_dtypes, ML_DTYPES[d.name]))


@pytest.mark.parametrize("d", NUMERIC, ids=str)
def test_itemsize_is_the_bytes_numpy_stores_and_bits_the_onnx_width(d):
    assert d.itemsize == d.np.itemsize
    onnx_bits = {"i4": 4, "u4": 4, "f4e2m1": 4, "i2": 2, "u2": 2, "f6e2m3": 6, "f6e3m2": 6}
    assert d.bits == onnx_bits.get(d.name, 8 * d.np.itemsize)


def test_kinds_and_largest_values():
    assert {d.name for d in FLOAT8} == {"f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz"}
    assert all(BY_NAME[n].is_float for n in ("f8e8m0", "f4e2m1", "f6e2m3", "bf16"))
    assert BY_NAME["i4"].kind == "int" and BY_NAME["u2"].kind == "uint" and BY_NAME["i2"].is_int
    largest = {"f8e4m3fn": 448, "f8e4m3fnuz": 240, "f8e5m2": 57344, "f8e5m2fnuz": 57344, "f4e2m1": 6,
               "f32": float(np.finfo(np.float32).max)}
    assert {n: BY_NAME[n].largest for n in largest} == largest
    with pytest.raises(TypeError, match="not a float"):
        BY_NAME["i4"].largest


def test_dtype_accepts_numpy_spellings_and_refuses_others():
    assert dtype("bfloat16").name == "bf16" and dtype(np.dtype("float8_e5m2")).name == "f8e5m2"
    assert dtype(ml_dtypes.uint4).name == "u4" and dtype(np.intp).name == "i64"
    assert dtype(np.dtype("<U3")).name == "string" and dtype(object).name == "string"
    for bad in (np.complex64, "nonsense", 99, ml_dtypes.float8_e3m4):
        with pytest.raises(TypeError):
            dtype(bad)


def test_pickles_load_as_the_tables_entries():
    assert all(pickle.loads(pickle.dumps(d)) is d for d in BY_NAME.values())
    old = DType.__new__(DType)   # as pickled before bf16 said where its NumPy dtype comes from
    old.__setstate__({"name": "bf16", "onnx": 16, "bits": 16, "kind": "float", "np_name": None})
    assert old == BY_NAME["bf16"] and old.np == np.dtype(ml_dtypes.bfloat16)


GRAPH = """graph main(x: f8e4m3fn[3], q: i4[2,2]) -> [y: f32[3], z: u4[2,2], k: f8e8m0[2], h: f4e2m1[3], n: i2[2]] {
  const e: f8e8m0[2] = [0.25, nan]
  const f: f4e2m1[3] = [-6.0, 0.5, -0.0]
  const g: i2[2] = [-2, 1]
  const t: f8e5m2fnuz[0] = []
  [y: f32[3]] = Cast(x) {to=1}
  [z: u4[2,2]] = Cast(q) {to=21}
  [k: f8e8m0[2]] = Identity(e)
  [h: f4e2m1[3]] = Identity(f)
  [n: i2[2]] = Identity(g)
  [w: f8e5m2fnuz[3]] = CastLike(x, t) {saturate=0}
  [u: f6e3m2[3]] = Cast(x) {to="f6e3m2"}
}"""


def test_text_form_round_trips_the_ml_dtypes_types():
    g = parse_graph(GRAPH)
    assert [str(v.type) for v in g.outputs] == ["f32[3]", "u4[2,2]", "f8e8m0[2]", "f4e2m1[3]", "i2[2]"]
    consts = {c.name: c.data for c in g.constants}
    assert consts["g"].dtype == ml_dtypes.int2 and consts["g"].tolist() == [-2, 1]
    assert consts["f"].view(np.uint8).tolist() == [0xF, 0x1, 0x8]   # -6, 0.5 and -0 in e2m1
    text = print_graph(g)
    assert "const f: f4e2m1[3] = [-6.0, 0.5, -0.0]" in text and "const e: f8e8m0[2] = [0.25, nan]" in text
    assert print_graph(parse_graph(text)) == text


def test_out_of_range_integer_constants_are_parse_errors_not_wrapped():
    for const in ("i4[2] = [8, 1]", "u2[1] = [-1]", "i8[1] = [300]"):
        with pytest.raises(ParseError, match="range|out of bounds"):
            parse_graph(f"graph(x: f32[1]) -> [y] {{\n const c: {const}\n [y] = Relu(x)\n}}")
