"""Control flow: If, Loop and Scan, whose bodies are graphs.

A body reads values of the graph around it ("outer scope" in ONNX). In the Graph IR those are explicit:
the frontend appends each value a body captures to the node's inputs and to the body's inputs, in the
same order, and records how many with the `captured` attribute (an If's two branches take the same
captures). So a node's inputs are its ONNX inputs followed by the captures:

- If: (cond, captures...); each branch takes (captures...) and gives the node's outputs.
- Loop: (M, cond, v_initial..., captures...); the body takes (iteration, cond, v..., captures...) and
  gives (cond, v..., scan_outputs...); the node gives (v_final..., scan outputs stacked on axis 0).
- Scan: (states..., scan_inputs..., captures...); the body takes (states..., one slice of each scan
  input, captures...) and gives (states..., one slice of each scan output); slices are taken along
  `scan_input_axes` (backwards where `scan_input_directions` is 1) and stacked along `scan_output_axes`.

The semantics (`run_if`, `run_loop`, `run_scan`) take how a body runs: the reference kernels run it with
the reference interpreter, the runtime with a program compiled once (`runtime.execution.control_flow`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..ir.dtypes import boolean, i64
from ..ir.graph import Graph, GraphError, TensorType
from ..ir.shape import ShapeError, normalize_axis
from .interpreter import run_graph_reference
from .registry import REQUIRED, Category, OpContext, OpError, register

M = Category.MOVEMENT
RunBody = Callable[[str, list], Sequence[np.ndarray]]   # (body attribute, its inputs) -> its outputs


def run_control_flow(ctx: OpContext, inputs: list, run_body: RunBody) -> tuple:
    """The outputs of an If, Loop or Scan node on `inputs`, its bodies run by `run_body`."""
    if ctx.op == "If":
        return run_if(ctx, inputs[0], inputs[1:], run_body)
    if ctx.op == "Loop":
        return run_loop(ctx, inputs[0], inputs[1], inputs[2:], run_body)
    return run_scan(ctx, inputs, run_body)


def _interpreted(ctx: OpContext) -> RunBody:
    """Bodies run by the reference interpreter."""
    return lambda name, inputs: run_graph_reference(_graph(ctx, name), inputs)


def _graph(ctx: OpContext, name: str) -> Graph:
    body = ctx.attrs[name]
    if not isinstance(body, Graph):
        raise ctx.fail(f"attribute '{name}' must be a graph, got {type(body).__name__}")
    return body


def infer_body(ctx: OpContext, body: Graph, types: Sequence[TensorType | None], what: str) -> list[TensorType]:
    """The body's output types with its inputs given `types` (inferred on a copy: a node is inferred again
    for every input shapes it runs with)."""
    from .infer_shapes import infer_shapes  # (the passes' module imports the registry: import late)
    body = body.copy()
    for node in body.nodes:
        for v in node.outputs:
            v.type = None
    if len(types) != len(body.inputs):
        raise ctx.fail(f"its {what} takes {len(body.inputs)} inputs, the node gives {len(types)}")
    for t, v in zip(types, body.inputs):
        if t is not None:
            if v.type is not None and v.type.dtype != t.dtype:
                raise ctx.fail(f"its {what}'s input '{v.name}' is {v.type.dtype}, the node gives {t.dtype}")
            v.type = t
    try:
        infer_shapes(body)
    except (OpError, GraphError, ShapeError) as e:
        raise ctx.fail(f"in its {what}: {e}") from None
    return [v.type for v in body.outputs]


def _captures(ctx: OpContext, formal: int) -> tuple[int, int]:
    """(formal inputs, captured inputs) of the node."""
    captured = ctx.attrs["captured"]
    if not 0 <= captured <= len(ctx.in_types) - formal:
        raise ctx.fail(f"captured={captured} does not fit its {len(ctx.in_types)} inputs")
    return len(ctx.in_types) - captured, captured


def _loose(a: TensorType, b: TensorType) -> TensorType:
    """A type both branches' outputs have: dims they agree on, else unknown."""
    if a.dtype != b.dtype:
        raise ShapeError(f"the branches give {a.dtype} and {b.dtype}")
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.dtype, None)
    return TensorType(a.dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


# ---- If -----------------------------------------------------------------------------------------
def _infer_if(ctx: OpContext) -> list[TensorType]:
    _, captured = _captures(ctx, 1)
    types = list(ctx.in_types[len(ctx.in_types) - captured:])
    inferred, failed = {}, {}
    for name in ("then_branch", "else_branch"):
        try:
            inferred[name] = infer_body(ctx, _graph(ctx, name), types, name)
        except OpError as e:
            failed[name] = e
    if len(failed) == 2:
        raise failed["then_branch"]
    if failed:   # a branch that cannot run on these inputs is never the one taken
        return next(iter(inferred.values()))
    then, other = inferred["then_branch"], inferred["else_branch"]
    if len(then) != len(other):
        raise ctx.fail(f"then_branch gives {len(then)} outputs, else_branch {len(other)}")
    try:
        return [_loose(a, b) for a, b in zip(then, other)]
    except ShapeError as e:
        raise ctx.fail(str(e)) from None


@register("If", M, infer=_infer_if, attrs={"then_branch": REQUIRED, "else_branch": REQUIRED, "captured": 0},
          inputs=(1, -1), outputs=(1, -1))
def if_(ctx: OpContext, cond, *captures):
    """The outputs of then_branch where cond (one element) is true, else of else_branch."""
    return run_if(ctx, cond, list(captures), _interpreted(ctx))


def run_if(ctx: OpContext, cond, captures: list, run_body: RunBody) -> tuple:
    if np.size(cond) != 1:
        raise ctx.fail(f"cond must hold one element, got shape {list(np.shape(cond))}")
    return tuple(run_body("then_branch" if bool(np.asarray(cond).reshape(())) else "else_branch", captures))


# ---- Loop ---------------------------------------------------------------------------------------
def _infer_loop(ctx: OpContext) -> list[TensorType]:
    if len(ctx.in_types) < 2:
        raise ctx.fail("takes M and cond (each may be left out, but has its place) before the loop-carried values")
    formal, captured = _captures(ctx, 2)
    carried = list(ctx.in_types[2:formal])
    body = _graph(ctx, "body")
    out = infer_body(ctx, body, [TensorType(i64, ()), TensorType(boolean, ())] + carried +
                     list(ctx.in_types[formal:]), "body")
    if len(out) < 1 + len(carried):
        raise ctx.fail(f"its body gives {len(out)} outputs for {len(carried)} loop-carried values and cond")
    scans = [TensorType(t.dtype, None if t.shape is None else (None,) + tuple(t.shape)) for t in out[1 + len(carried):]]
    return [out[1 + i] if t is None else TensorType(t.dtype, _common(t, out[1 + i])) for i, t in enumerate(carried)] \
        + scans


def _common(a: TensorType, b: TensorType):
    return _loose(a, b).shape


@register("Loop", M, infer=_infer_loop, attrs={"body": REQUIRED, "captured": 0}, inputs=(0, -1), outputs=(1, -1))
def loop(ctx: OpContext, trip_count, cond, *rest):
    """Run the body while the iteration is below M (when given) and cond holds (when given); carried values
    feed the next iteration, scan outputs are stacked."""
    return run_loop(ctx, trip_count, cond, list(rest), _interpreted(ctx))


def run_loop(ctx: OpContext, trip_count, cond, rest: list, run_body: RunBody) -> tuple:
    formal, captured = _captures(ctx, 2)
    body = _graph(ctx, "body")
    carried, captures = list(rest[:formal - 2]), list(rest[formal - 2:])
    limit = None if trip_count is None else int(np.asarray(trip_count).reshape(()))
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(()))
    scans: list[list[np.ndarray]] = [[] for _ in range(len(body.outputs) - 1 - len(carried))]
    i = 0
    while keep_going and (limit is None or i < limit):
        out = run_body("body", [np.array(i, np.int64), np.array(keep_going)] + carried + captures)
        keep_going = bool(np.asarray(out[0]).reshape(()))
        carried = out[1:1 + len(carried)]
        for s, value in zip(scans, out[1 + len(carried):]):
            s.append(value)
        i += 1
    stacked = []
    for s, t in zip(scans, ctx.out_types[len(carried):]):
        if s:
            stacked.append(np.stack(s))
        else:   # no iteration: an empty stack of the body output's shape where known
            inner = [] if t is None or t.shape is None else [d if isinstance(d, int) else 0 for d in t.shape[1:]]
            stacked.append(np.zeros([0] + inner, t.dtype.np if t is not None else np.float32))
    return tuple(carried + stacked)


# ---- Scan ---------------------------------------------------------------------------------------
_SCAN_ATTRS = {"body": REQUIRED, "num_scan_inputs": REQUIRED, "scan_input_axes": None, "scan_input_directions": None,
               "scan_output_axes": None, "scan_output_directions": None, "captured": 0}


def _scan_layout(ctx: OpContext, inputs: int, outputs: int, ranks_in, ranks_out):
    """(input axes, input directions, output axes, output directions), normalised."""
    def listed(name, n, ranks):
        values = ctx.attrs[name] or [0] * n
        if len(values) != n:
            raise ctx.fail(f"{name} lists {len(values)} values for {n} scan {'inputs' if 'input' in name else 'outputs'}")
        if "axes" in name:
            return [normalize_axis(a, r) if r is not None else a for a, r in zip(values, ranks)]
        return list(values)
    return (listed("scan_input_axes", inputs, ranks_in), listed("scan_input_directions", inputs, ranks_in),
            listed("scan_output_axes", outputs, ranks_out), listed("scan_output_directions", outputs, ranks_out))


def _infer_scan(ctx: OpContext) -> list[TensorType]:
    formal, _ = _captures(ctx, 0)
    n_scan = ctx.attrs["num_scan_inputs"]
    states = formal - n_scan
    body = _graph(ctx, "body")
    if states < 0:
        raise ctx.fail(f"num_scan_inputs={n_scan} but it has {formal} inputs")
    scan_in = ctx.in_types[states:formal]
    n_out = len(body.outputs) - states
    axes_in, _, _, _ = _scan_layout(ctx, n_scan, max(n_out, 0), [None if t.shape is None else len(t.shape)
                                                                 for t in scan_in], [None] * max(n_out, 0))
    slices = [TensorType(t.dtype, None if t.shape is None else tuple(d for k, d in enumerate(t.shape) if k != a))
              for t, a in zip(scan_in, axes_in)]
    out = infer_body(ctx, body, list(ctx.in_types[:states]) + slices + list(ctx.in_types[formal:]), "body")
    length = next((t.shape[a] for t, a in zip(scan_in, axes_in) if t.shape is not None), None)
    result = list(out[:states])
    _, _, axes_out, _ = _scan_layout(ctx, n_scan, n_out, [None] * n_scan,
                                     [None if t.shape is None else len(t.shape) + 1 for t in out[states:]])
    for t, a in zip(out[states:], axes_out):
        result.append(TensorType(t.dtype, None if t.shape is None else tuple(t.shape[:a]) + (length,) + tuple(t.shape[a:])))
    return result


@register("Scan", M, infer=_infer_scan, attrs=_SCAN_ATTRS, inputs=(1, -1), outputs=(1, -1))
def scan(ctx: OpContext, *inputs):
    """Run the body once per slice of the scan inputs, carrying the states; stack the scan outputs."""
    return run_scan(ctx, list(inputs), _interpreted(ctx))


def run_scan(ctx: OpContext, inputs: list, run_body: RunBody) -> tuple:
    formal, _ = _captures(ctx, 0)
    n_scan = ctx.attrs["num_scan_inputs"]
    states, body = formal - n_scan, _graph(ctx, "body")
    sequences, captures = inputs[states:formal], list(inputs[formal:])
    n_out = len(body.outputs) - states
    ranks_out = [None if t is None or t.shape is None else len(t.shape) for t in ctx.out_types[states:]]
    axes_in, dirs_in, axes_out, dirs_out = _scan_layout(ctx, n_scan, n_out, [s.ndim for s in sequences], ranks_out)
    lengths = {s.shape[a] for s, a in zip(sequences, axes_in)}
    if len(lengths) > 1:
        raise ctx.fail(f"the scan inputs have different lengths along their scan axes: {sorted(lengths)}")
    length = lengths.pop() if lengths else 0
    carried = list(inputs[:states])
    outputs: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for t in range(length):
        slices = [np.take(s, length - 1 - t if d else t, axis=a) for s, a, d in zip(sequences, axes_in, dirs_in)]
        out = run_body("body", carried + slices + captures)
        carried = out[:states]
        for collected, value in zip(outputs, out[states:]):
            collected.append(value)
    if not length:
        raise ctx.fail("its scan inputs are empty along the scan axis: there is no body output to stack")
    stacked = []
    for collected, a, d in zip(outputs, axes_out, dirs_out):
        values = collected[::-1] if d else collected
        stacked.append(np.stack(values, axis=a))
    return tuple(carried + stacked)
