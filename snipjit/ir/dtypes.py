"""Element types of the Graph IR, with their NumPy and ONNX counterparts.

NumPy has no bfloat16, float8, float6, float4, int4 or int2: ml_dtypes (which onnx depends on) supplies
them as NumPy dtypes. An array of one of these takes a whole byte per element (two for bfloat16), even
when the ONNX type is narrower, so `bits` (the ONNX width) and `itemsize` (the NumPy storage) differ for
the sub-byte types. NumPy computes nothing natively on them, and no generated kernel takes them: ops
convert them through float32 (or int8) where they compute at all.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - onnx always brings it
    _ml = None


@dataclass(frozen=True)
class DType:
    name: str          # the text-form spelling, e.g. "f32"
    onnx: int          # onnx.TensorProto data type
    bits: int          # the element's width in ONNX (4 for int4, 0 for strings)
    kind: str          # "float", "int", "uint", "bool" or "string"
    np_name: str | None
    from_ml_dtypes: bool = False   # its NumPy dtype is ml_dtypes' `np_name`, not NumPy's own

    @property
    def np(self) -> np.dtype:
        if self.from_ml_dtypes:
            found = getattr(_ml, self.np_name, None) if _ml is not None else None
            if found is None:
                raise TypeError(f"dtype {self.name} needs the ml_dtypes package with {self.np_name}")
            return np.dtype(found)
        if self.np_name is None:
            raise TypeError(f"dtype {self.name} has no NumPy equivalent")
        return np.dtype(self.np_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def largest(self) -> float:
        """The largest finite value of a float type (448.0 for f8e4m3fn)."""
        if not self.is_float:
            raise TypeError(f"dtype {self.name} is not a float type")
        return float((_ml.finfo if self.from_ml_dtypes else np.finfo)(self.np).max)

    @property
    def itemsize(self) -> int:
        """Bytes per element in a NumPy array (a sub-byte type takes a whole byte)."""
        return max(1, (self.bits + 7) // 8)

    def __reduce__(self):
        return dtype, (self.name,)   # unpickled as the table's entry, whatever fields it has gained

    def __setstate__(self, state: dict) -> None:
        """A DType pickled field by field (before `__reduce__`): the table's entry of that name."""
        for key, value in vars(BY_NAME[state["name"]]).items():
            object.__setattr__(self, key, value)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"dtype({self.name})"


def _ml_type(name: str, onnx: int, bits: int, kind: str, ml_name: str) -> DType:
    return DType(name, onnx, bits, kind, ml_name, from_ml_dtypes=True)


_ALL = [
    DType("f32", 1, 32, "float", "float32"),
    DType("f16", 10, 16, "float", "float16"),
    _ml_type("bf16", 16, 16, "float", "bfloat16"),
    DType("f64", 11, 64, "float", "float64"),
    DType("i8", 3, 8, "int", "int8"),
    DType("i16", 5, 16, "int", "int16"),
    DType("i32", 6, 32, "int", "int32"),
    DType("i64", 7, 64, "int", "int64"),
    DType("u8", 2, 8, "uint", "uint8"),
    DType("u16", 4, 16, "uint", "uint16"),
    DType("u32", 12, 32, "uint", "uint32"),
    DType("u64", 13, 64, "uint", "uint64"),
    DType("bool", 9, 8, "bool", "bool"),
    DType("string", 8, 0, "string", "object"),
    _ml_type("f8e4m3fn", 17, 8, "float", "float8_e4m3fn"),
    _ml_type("f8e4m3fnuz", 18, 8, "float", "float8_e4m3fnuz"),
    _ml_type("f8e5m2", 19, 8, "float", "float8_e5m2"),
    _ml_type("f8e5m2fnuz", 20, 8, "float", "float8_e5m2fnuz"),
    _ml_type("u4", 21, 4, "uint", "uint4"),
    _ml_type("i4", 22, 4, "int", "int4"),
    _ml_type("f4e2m1", 23, 4, "float", "float4_e2m1fn"),
    _ml_type("f8e8m0", 24, 8, "float", "float8_e8m0fnu"),
    _ml_type("u2", 25, 2, "uint", "uint2"),
    _ml_type("i2", 26, 2, "int", "int2"),
    _ml_type("f6e2m3", 27, 6, "float", "float6_e2m3fn"),
    _ml_type("f6e3m2", 28, 6, "float", "float6_e3m2fn"),
]
BY_NAME: dict[str, DType] = {d.name: d for d in _ALL}
BY_ONNX: dict[int, DType] = {d.onnx: d for d in _ALL}

f32, f16, bf16, f64 = (BY_NAME[n] for n in ("f32", "f16", "bf16", "f64"))
i8, i16, i32, i64 = (BY_NAME[n] for n in ("i8", "i16", "i32", "i64"))
u8, u16, u32, u64 = (BY_NAME[n] for n in ("u8", "u16", "u32", "u64"))
boolean, string = BY_NAME["bool"], BY_NAME["string"]
f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f8e8m0 = (
    BY_NAME[n] for n in ("f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f8e8m0"))
i4, u4, i2, u2, f4e2m1 = (BY_NAME[n] for n in ("i4", "u4", "i2", "u2", "f4e2m1"))

FLOAT8 = frozenset({f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz})   # the types Cast's `saturate` is about


def _by_numpy() -> dict[np.dtype, DType]:
    """The DType of each NumPy dtype; ml_dtypes types the installed version lacks are left out."""
    found = {}
    for d in _ALL:
        if d.kind == "string":
            continue
        try:
            found[d.np] = d
        except TypeError:
            pass
    return found


_BY_NUMPY = _by_numpy()


def dtype(spec: DType | str | np.dtype | type) -> DType:
    """Accept a DType, its text name ("f32"), an ONNX enum or anything NumPy understands."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str) and spec in BY_NAME:
        return BY_NAME[spec]
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec in BY_ONNX:
            return BY_ONNX[spec]
        raise TypeError(f"unknown ONNX element type {spec}")
    try:
        npd = np.dtype(spec)
    except TypeError:
        raise TypeError(f"unsupported element type {spec!r}") from None
    if npd.kind in ("U", "S", "O"):
        return string
    found = _BY_NUMPY.get(npd)
    if found is None:
        raise TypeError(f"unsupported element type {spec!r}")
    return found
