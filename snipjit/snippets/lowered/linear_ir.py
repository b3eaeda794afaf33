"""`LinearIR`: the control-flow IR of a fused kernel — an ordered list of `Expression`s.

The order is the order code is emitted in; data dependencies are kept by `PortConnector`s, so passes may
move expressions while every input stays ready before its use. Made from a (canonicalized) body graph by
`LinearIR.from_body`: a `Parameter` per body input, an expression per node, a `Result` per body output.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from ...ir.graph import Graph
from ...ir.shape import broadcast_shapes
from ...ops import get_op
from ..ops import BLOCK_OPS, domain_shape, own_dims
from ..symbolic import Sym
from .expression import Expression
from .loop_info import LoopManager
from .expression import ExpressionPort, PortConnector, PortDescriptor


class LinearIRError(ValueError):
    pass


class LinearIR:
    def __init__(self, master_shape: tuple, vector_lanes: int = 16):
        self.expressions: list[Expression] = []
        self.master_shape = tuple(master_shape)
        self.vector_lanes = vector_lanes
        self.loop_manager = LoopManager()
        self.parallel_rank = max(0, len(self.master_shape) - 1)  # dims the kernel's outer domain covers
        self.pitched: tuple[int, ...] = ()   # inputs with a row pitch: the kernel's dims after the master's

    # ---- construction --------------------------------------------------------------------------------
    @staticmethod
    def from_body(body: Graph, vector_lanes: int = 16) -> "LinearIR":
        own = own_dims(body)
        master = broadcast_shapes(*(domain_shape(v.type.shape, own.get(id(v), ())) for v in body.values()))
        lir = LinearIR(master, vector_lanes)   # reduced dims included; a Brgemm's own dims not
        lir.pitched = tuple(body.meta.get("pitched", ()))
        uses = body.consumers()
        for v in list(body.inputs) + list(body.outputs):
            _check_own_dims(v, own.get(id(v), ()), {n.op for n, _ in uses.get(v, ())})
        made: dict[int, ExpressionPort] = {}  # id(Value) -> output port producing it
        layouts: dict[int, tuple] = {}        # id(Value) -> the layout Canonicalization recorded for it
        for i, v in enumerate(body.inputs):
            pitch = {}
            if i in lir.pitched:   # (see `row_pitch`)
                if not v.type.shape or v.type.shape[-1] == 1 or own.get(id(v)):
                    raise LinearIRError(f"input '{v.name}' of {list(v.type.shape or ())} cannot take a row pitch "
                                        "(rows of one element, or a Brgemm operand)")
                pitch = {"pitch": len(master) + lir.pitched.index(i)}
            e = lir._append(Expression("Parameter", {"index": i, "name": v.name, **_own(v, own), **pitch},
                                       dtype=v.type.dtype.name))
            lir._add_output(e, v.type.shape)
            made[id(v)] = e.output_port(0)
            if i < len(body.meta.get("layouts", ())):
                layouts[id(v)] = e.out_descs[0].layout = tuple(body.meta["layouts"][i])
        for node in body.nodes:
            attrs = get_op(node.op, node.domain).resolve_attrs(node)   # defaults filled in for the emitters
            e = Expression(node.op, attrs, node=node, dtype=node.outputs[0].type.dtype.name)
            for v in node.inputs:
                if v is None:
                    raise LinearIRError(f"{node.label()}: missing optional inputs are not supported in kernels")
                if id(v) not in made:
                    raise LinearIRError(f"{node.label()}: input '{v.name}' is not a body input or node output "
                                        "(run ConvertConstantsToScalars first)")
                lir._connect(made[id(v)], e, len(e.inputs), v.type.shape)
                if id(v) in layouts:   # a Parameter's consumers read it in its recorded layout
                    e.in_descs[-1].layout = layouts[id(v)]
            lir._append(e)
            for v in node.outputs:
                made[id(v)] = lir._add_output(e, v.type.shape)
        for i, v in enumerate(body.outputs):
            if i < len(body.meta.get("output_layouts", ())):   # the producer writes it in that layout
                made[id(v)].descriptor.layout = tuple(body.meta["output_layouts"][i])
            e = Expression("Result", {"index": i, "name": v.name, **_own(v, own)}, dtype=v.type.dtype.name)
            lir._connect(made[id(v)], e, 0, v.type.shape)
            lir._append(e)
        return lir

    def _append(self, e: Expression) -> Expression:
        self.expressions.append(e)
        return e

    @staticmethod
    def _add_output(e: Expression, shape) -> ExpressionPort:
        port = e.output_port(len(e.outputs))
        e.outputs.append(PortConnector(port))
        e.out_descs.append(PortDescriptor(tuple(shape)))
        return port

    @staticmethod
    def _connect(source: ExpressionPort, e: Expression, index: int, shape) -> None:
        conn = source.connector
        port = e.input_port(index)
        while len(e.inputs) <= index:
            e.inputs.append(conn)
            e.in_descs.append(PortDescriptor(tuple(shape)))
        e.inputs[index] = conn
        e.in_descs[index] = PortDescriptor(tuple(shape))
        conn.add_consumer(port)

    # ---- queries -------------------------------------------------------------------------------------
    def index(self, e: Expression) -> int:
        for i, x in enumerate(self.expressions):
            if x is e:
                return i
        raise LinearIRError(f"{e.name} is not in the Linear IR")

    def parameters(self) -> list[Expression]:
        return sorted((e for e in self.expressions if e.op == "Parameter"), key=lambda e: e.attrs["index"])

    def results(self) -> list[Expression]:
        return sorted((e for e in self.expressions if e.op == "Result"), key=lambda e: e.attrs["index"])

    def static_dims(self) -> list[int | None]:
        return [d if isinstance(d, int) else None for d in self.master_shape]

    def dim(self, i: int) -> Sym:
        return Sym.dim(i, self.static_dims())

    # ---- edits (the helpers passes use) -----------------------------------------------------------------
    def insert_node(self, op: str, inputs: Sequence[ExpressionPort], position: int,
                    attrs: dict[str, Any] | None = None, loop_ids: Iterable[int] = (),
                    out_shape: tuple | None = None, dtype: str | None = None,
                    consumers: Sequence[ExpressionPort] = ()) -> Expression:
        """Create an expression reading `inputs`, insert it at `position`, and make each port in
        `consumers` read its output instead of what it read before."""
        e = Expression(op, dict(attrs or {}), loop_ids=list(loop_ids),
                       dtype=dtype or (inputs[0].expr.dtype if inputs else "f32"))
        for i, src in enumerate(inputs):
            self._connect(src, e, i, src.descriptor.shape)
        shape = out_shape if out_shape is not None else (inputs[0].descriptor.shape if inputs else ())
        out = self._add_output(e, shape)
        for port in consumers:
            self.reconnect(port, out)
        self.expressions.insert(position, e)
        return e

    def reconnect(self, consumer: ExpressionPort, new_source: ExpressionPort) -> None:
        """Make an input port read from another output port."""
        e = consumer.expr
        e.inputs[consumer.index].remove_consumer(consumer)
        e.inputs[consumer.index] = new_source.connector
        new_source.connector.add_consumer(consumer)

    def replace_with_expr(self, old: Sequence[Expression], new: Expression) -> Expression:
        """Replace a chain of expressions with `new`, which already has its inputs connected; the
        consumers of the last old expression's outputs read `new`'s outputs."""
        position = min(self.index(e) for e in old)
        last = old[-1]
        for i, conn in enumerate(last.outputs):
            for port in list(conn.consumers):
                self.reconnect(port, new.output_port(i))
        for e in reversed(old):   # consumers first, so each removed expression is unused by then
            self.remove(e)
        self.expressions.insert(position, new)
        return new

    def replace_with_node(self, old: Sequence[Expression], op: str, attrs: dict[str, Any] | None = None) -> Expression:
        """Replace a chain of expressions with a new `op` expression taking the first one's inputs."""
        first, last = old[0], old[-1]
        e = Expression(op, dict(attrs or {}), loop_ids=list(first.loop_ids), dtype=last.dtype)
        for i, conn in enumerate(first.inputs):
            self._connect(conn.source, e, i, first.in_descs[i].shape)
        for d in last.out_descs:
            e.outputs.append(PortConnector(e.output_port(len(e.outputs))))
            e.out_descs.append(d.clone())
        return self.replace_with_expr(old, e)

    def remove(self, e: Expression) -> None:
        """Take an expression out, disconnecting its inputs (its outputs must have no consumers left)."""
        for conn in e.outputs:
            if conn.consumers:
                raise LinearIRError(f"cannot remove {e.name}: {conn.consumers} still read it")
        for i, conn in enumerate(e.inputs):
            conn.remove_consumer(e.input_port(i))
        self.expressions.pop(self.index(e))

    # ---- debugging -------------------------------------------------------------------------------------
    def debug_print(self) -> str:
        """One line per expression: loops, registers, ports with shapes, and loop details at the end."""
        lines = [f"LinearIR master_shape={list(self.master_shape)} lanes={self.vector_lanes}"]
        for e in self.expressions:
            ins = ", ".join(f"{c.source}{_desc(d)}" for c, d in zip(e.inputs, e.in_descs))
            outs = ", ".join(_desc(d) for d in e.out_descs)
            attrs = " " + json.dumps(_jsonable(e.attrs)) if e.attrs else ""
            loops = f" loops={e.loop_ids}" if e.loop_ids else ""
            lines.append(f"  {e.name:<22} ({ins}) -> ({outs}){attrs}{loops}")
        for loop_id, info in self.loop_manager.loops.items():
            ports = "; ".join(f"{p.port} inc={'+' if p.is_incremented else '0'}{p.ptr_increment} "
                              f"fin={p.finalization_offset}" for p in info.ports)
            flags = (" once" if info.evaluate_once else "") + (" tail" if info.is_tail else "")
            lines.append(f"  loop {loop_id}: dim {info.dim} work={info.work_amount} inc={info.increment}"
                         f"{flags} [{ports}]")
        return "\n".join(lines)

    def serialize(self) -> str:
        """The Linear IR as JSON: expressions in control-flow order with ports, and the loops."""
        index = {id(e): i for i, e in enumerate(self.expressions)}
        exprs = []
        for e in self.expressions:
            exprs.append({
                "id": index[id(e)], "op": e.op, "dtype": e.dtype, "attrs": _jsonable(e.attrs),
                "loop_ids": e.loop_ids,
                "inputs": [{"source": [index[id(c.source.expr)], c.source.index], **_desc_json(d)}
                           for c, d in zip(e.inputs, e.in_descs)],
                "outputs": [{"consumers": [[index[id(p.expr)], p.index] for p in c.consumers], **_desc_json(d)}
                            for c, d in zip(e.outputs, e.out_descs)],
            })
        loops = {str(k): {"dim": v.dim, "work_amount": str(v.work_amount), "increment": v.increment,
                          "evaluate_once": v.evaluate_once, "is_tail": v.is_tail,
                          "ports": [{"port": [index[id(p.port.expr)], p.port.type, p.port.index],
                                     "is_incremented": p.is_incremented, "ptr_increment": str(p.ptr_increment),
                                     "finalization_offset": str(p.finalization_offset)} for p in v.ports]}
                 for k, v in self.loop_manager.loops.items()}
        return json.dumps({"master_shape": [_jsonable(d) for d in self.master_shape],
                           "expressions": exprs, "loops": loops}, indent=1)

    def __str__(self) -> str:
        return self.debug_print()


def _check_own_dims(v, own: tuple[int, ...], readers: set[str]) -> None:
    """A body input or output a Brgemm walks: its own dims are static, and only block operations read it."""
    if own and any(not isinstance(v.type.shape[d], int) for d in own):
        raise LinearIRError(f"'{v.name}' of {v.type}: the dims a Brgemm walks must be static")
    if own and readers - set(BLOCK_OPS):
        raise LinearIRError(f"'{v.name}' is read by a Brgemm and by {sorted(readers - set(BLOCK_OPS))}")


def _own(v, own: dict) -> dict:
    """A Parameter's or Result's `own_dims` attribute (positive dims), when a Brgemm walks some."""
    dims = own.get(id(v), ())
    return {"own_dims": [len(v.type.shape) + d for d in dims]} if dims else {}


def _desc(d: PortDescriptor) -> str:
    s = "[" + ",".join("?" if x is None else str(x) for x in d.shape) + "]"
    if d.subtensor:
        s += f"sub{list(d.subtensor)}"
    if d.reg is not None:
        s += f"@{d.reg}"
    return s


def _desc_json(d: PortDescriptor) -> dict:
    return {"shape": [_jsonable(x) for x in d.shape], "layout": list(d.layout),
            "subtensor": [_jsonable(x) for x in d.subtensor], "reg": str(d.reg) if d.reg else None}


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)
