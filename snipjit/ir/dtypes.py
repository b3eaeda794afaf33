"""Element types of the Graph IR, with their NumPy and ONNX counterparts."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:  # ml_dtypes comes with onnx; it gives NumPy a bfloat16
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - onnx always brings it
    _ml = None


@dataclass(frozen=True)
class DType:
    name: str          # the text-form spelling, e.g. "f32"
    onnx: int          # onnx.TensorProto data type
    bits: int
    kind: str          # "float", "int", "uint", "bool" or "string"
    np_name: str | None

    @property
    def np(self) -> np.dtype:
        if self.name == "bf16":
            if _ml is None:
                raise TypeError("bf16 needs the ml_dtypes package")
            return np.dtype(_ml.bfloat16)
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
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"dtype({self.name})"


_ALL = [
    DType("f32", 1, 32, "float", "float32"),
    DType("f16", 10, 16, "float", "float16"),
    DType("bf16", 16, 16, "float", None),
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
]
BY_NAME: dict[str, DType] = {d.name: d for d in _ALL}
BY_ONNX: dict[int, DType] = {d.onnx: d for d in _ALL}

f32, f16, bf16, f64 = (BY_NAME[n] for n in ("f32", "f16", "bf16", "f64"))
i8, i16, i32, i64 = (BY_NAME[n] for n in ("i8", "i16", "i32", "i64"))
u8, u16, u32, u64 = (BY_NAME[n] for n in ("u8", "u16", "u32", "u64"))
boolean, string = BY_NAME["bool"], BY_NAME["string"]


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
    npd = np.dtype(spec)
    if _ml is not None and npd == np.dtype(_ml.bfloat16):
        return bf16
    if npd.kind in ("U", "S", "O"):
        return string
    for d in _ALL:
        if d.np_name is not None and np.dtype(d.np_name) == npd:
            return d
    raise TypeError(f"unsupported element type {spec!r}")
