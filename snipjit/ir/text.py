"""Text form of the Graph IR: the parser, which round-trips with the printer (`graph.print_graph`).

    graph main(x: f32[1,?,384], w: f32[384,384]) -> [y: f32[1,?,384]] {
      const c: f32[] = 2.0
      [t: f32[1,?,384]] = MatMul(x, w)
      [y: f32[1,?,384]] = Mul(t, c) @mul0
    }

Names that are not plain identifiers are double-quoted; `_` is a missing optional input; output types may
be left out (`[t] = Relu(x)`) and are then inferred. Attributes are `{name=value, ...}` with ints, floats,
strings, lists, tensors `tensor<f32[2]>[1.0, 2.0]` and nested graphs. Constants with more than
`max_elems` elements print as `<elided>`; parsing such text needs `elided="zeros"`.

Element types are spelled f32 f16 bf16 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool string, and for the types
ml_dtypes gives NumPy: f8e4m3fn f8e4m3fnuz f8e5m2 f8e5m2fnuz f8e8m0 f6e2m3 f6e3m2 f4e2m1 i4 u4 i2 u2
(`dtypes.BY_NAME`). Constant values are written as the numbers they stand for (`f8e4m3fn[2] = [0.5, 448.0]`).
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

import numpy as np

from .dtypes import BY_NAME
from .graph import Graph, GraphError, Node, TensorType, Value, print_graph
from .shape import make_shape, shape_str

_FLOAT_WORDS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*) |
    (?P<str>"(?:[^"\\]|\\.)*") |
    (?P<num>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\.\d+(?:[eE][-+]?\d+)?|\d+)|-inf\b) |
    (?P<arrow>->) | (?P<dcolon>::) |
    (?P<ident>[A-Za-z_][A-Za-z0-9_.]*) |
    (?P<punct>[()\[\]{},:=@<>*?])
""", re.VERBOSE)


class ParseError(ValueError):
    pass


class _Parser:
    def __init__(self, text: str, elided: str | None):
        self.toks: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise self._error_at(text, pos, f"unexpected character {text[pos]!r}")
            if m.lastgroup != "ws":
                self.toks.append((m.lastgroup, m.group(), pos))
            pos = m.end()
        self.toks.append(("eof", "", len(text)))
        self.i = 0
        self.text = text
        self.elided = elided

    @staticmethod
    def _error_at(text: str, pos: int, msg: str) -> ParseError:
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return ParseError(f"line {line}, column {col}: {msg}")

    def error(self, msg: str) -> ParseError:
        return self._error_at(self.text, self.toks[self.i][2], msg)

    def peek(self, k: int = 0) -> tuple[str, str]:
        kind, text, _ = self.toks[min(self.i + k, len(self.toks) - 1)]
        return kind, text

    def take(self, expect: str | None = None) -> str:
        kind, text = self.peek()
        if expect is not None and text != expect:
            raise self.error(f"expected {expect!r}, found {text or 'end of text'!r}")
        self.i += 1
        return text

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text and self.peek()[0] != "str":
            self.i += 1
            return True
        return False

    def name(self) -> str:
        kind, text = self.peek()
        if kind == "ident":
            self.i += 1
            return text
        if kind == "str":
            self.i += 1
            return _unquote(text)
        if kind == "num" and re.fullmatch(r"\d+", text):  # bare numeric names are not printed, but accept
            self.i += 1
            return text
        raise self.error(f"expected a name, found {text or 'end of text'!r}")

    def type(self) -> TensorType:
        if self.peek()[1] not in BY_NAME:
            raise self.error(f"unknown dtype {self.peek()[1]!r}")
        dt = self.take()
        self.take("[")
        if self.accept("*"):
            self.take("]")
            return TensorType(BY_NAME[dt], None)
        dims: list = []
        while not self.accept("]"):
            kind, text = self.peek()
            if text == "?":
                dims.append(None)
                self.i += 1
            elif kind == "num":
                dims.append(int(self.take()))
            else:
                dims.append(self.name())
            if self.peek()[1] != "]":
                self.take(",")
        return TensorType(BY_NAME[dt], make_shape(dims))

    def typed_name(self) -> tuple[str, TensorType | None]:
        n = self.name()
        return n, (self.type() if self.accept(":") else None)

    def scalar(self):
        kind, text = self.peek()
        if kind == "num":
            self.i += 1
            if text == "-inf":
                return -math.inf
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "ident" and text in ("inf", "nan", "true", "false"):
            self.i += 1
            return {"true": True, "false": False}.get(text, _FLOAT_WORDS.get(text))
        if kind == "str":
            self.i += 1
            return _unquote(text)
        raise self.error(f"expected a value, found {text or 'end of text'!r}")

    def array(self, ty: TensorType) -> np.ndarray:
        if ty.shape is None or not ty.is_static:
            raise self.error(f"a constant needs a static shape, got {ty}")
        if self.accept("<"):
            self.take("elided")
            self.take(">")
            if self.elided != "zeros":
                raise self.error("constant data is elided; parse with elided='zeros' to accept it")
            return np.zeros(ty.shape, ty.dtype.np)
        if self.accept("["):
            items = []
            while not self.accept("]"):
                items.append(self.scalar())
                if self.peek()[1] != "]":
                    self.take(",")
        else:
            items = [self.scalar()]
        count = int(np.prod(ty.shape, dtype=np.int64))
        if len(items) != count:
            raise self.error(f"constant of type {ty} needs {count} values, got {len(items)}")
        try:
            arr = np.array(items, dtype=ty.dtype.np)
        except (OverflowError, ValueError, TypeError) as e:
            raise self.error(f"constant of type {ty}: {e}") from None
        if ty.dtype.is_int and ty.dtype.from_ml_dtypes and arr.astype(np.int64).tolist() != items:
            raise self.error(f"a value of the constant is out of the range of {ty.dtype}")  # ml_dtypes would wrap it
        return arr.reshape(ty.shape)

    def attr_value(self):
        kind, text = self.peek()
        if kind == "ident" and text == "graph":
            return self.graph()
        if kind == "ident" and text == "tensor":
            self.i += 1
            self.take("<")
            ty = self.type()
            self.take(">")
            return self.array(ty)
        if self.accept("["):
            items = []
            while not self.accept("]"):
                items.append(self.attr_value())
                if self.peek()[1] != "]":
                    self.take(",")
            return items
        return self.scalar()

    def graph(self) -> Graph:
        self.take("graph")
        gname = self.name() if self.peek()[1] != "(" else "main"
        scope: dict[str, Value] = {}
        inputs = []
        self.take("(")
        while not self.accept(")"):
            n, ty = self.typed_name()
            if ty is None:
                raise self.error(f"graph input '{n}' needs a type")
            if n in scope:
                raise self.error(f"graph input '{n}' is declared twice")
            scope[n] = Value(n, ty)
            inputs.append(scope[n])
            if self.peek()[1] != ")":
                self.take(",")
        self.take("->")
        self.take("[")
        out_decl: list[tuple[str, TensorType | None]] = []
        while not self.accept("]"):
            out_decl.append(self.typed_name())
            if self.peek()[1] != "]":
                self.take(",")
        self.take("{")
        nodes: list[Node] = []
        while not self.accept("}"):
            if self.accept("const"):
                n, ty = self.typed_name()
                if ty is None:
                    raise self.error(f"constant '{n}' needs a type")
                self.take("=")
                if n in scope:
                    raise self.error(f"value '{n}' is defined twice")
                scope[n] = Value(n, ty, None, self.array(ty))
                continue
            nodes.append(self.node(scope))
        outputs = []
        for n, ty in out_decl:
            if n not in scope:
                raise self.error(f"graph output '{n}' is not defined in the graph")
            v = scope[n]
            if ty is not None and v.type is None:
                v.type = ty
            outputs.append(v)
        return Graph(inputs, outputs, nodes, gname)

    def node(self, scope: dict[str, Value]) -> Node:
        self.take("[")
        outs: list[Value] = []
        while not self.accept("]"):
            n, ty = self.typed_name()
            if n in scope:
                raise self.error(f"value '{n}' is defined twice")
            outs.append(Value(n, ty))
            if self.peek()[1] != "]":
                self.take(",")
        self.take("=")
        domain = ""
        op = self.name()
        if self.accept("::"):
            domain, op = op, self.name()
        self.take("(")
        ins: list[Value | None] = []
        while not self.accept(")"):
            if self.peek() == ("ident", "_"):
                self.i += 1
                ins.append(None)
            else:
                n = self.name()
                if n not in scope:
                    raise self.error(f"{op}: input '{n}' is not defined before its use")
                ins.append(scope[n])
            if self.peek()[1] != ")":
                self.take(",")
        attrs: dict[str, Any] = {}
        if self.accept("{"):
            while not self.accept("}"):
                k = self.name()
                self.take("=")
                attrs[k] = self.attr_value()
                if self.peek()[1] != "}":
                    self.take(",")
        nname = self.name() if self.accept("@") else ""
        for o in outs:
            scope[o.name] = o
        return Node(op, ins, outs, attrs, nname, domain)


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text[1:-1])


def parse_graph(text: str, elided: str | None = None, infer: Callable[[Graph], Any] | None = None) -> Graph:
    """Parse the text form. `infer` gives types to the values printed without one (`snipjit.parse_graph`
    passes shape inference, which needs the ops this layer does not know); without it they stay None."""
    p = _Parser(text, elided)
    g = p.graph()
    if p.peek()[0] != "eof":
        raise p.error("text after the end of the graph")
    if infer is not None and any(v.type is None for v in g.values()):
        infer(g)
    return g


__all__ = ["print_graph", "parse_graph", "ParseError", "shape_str", "GraphError"]
