"""The compiled program: one chosen implementation per node, shared by all requests.

Values are numbered into slots. For each signature of input shapes the program resolves every slot's
type (`resolver.resolve`) and plans an arena (`memory.solver`): which slots are views of others
(Reshape-like ops, and broadcasts that repeat nothing at that signature), which steps write their output
over an input no later step reads (in place), which slots live in the arena at which offset, which escape
as graph outputs. Requests bind that plan to their own arena once per signature, so a run only moves
pointers and calls kernels.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...ir.graph import Graph, Node, TensorType, Value, held_placeholder, is_held_placeholder
from ..caches.kernel_cache import Recorder, recording
from ..implementations.choice import choose
from ..implementations.base import Kernel
from ..implementations.held_weights import HeldWeight
from .progress import Progress
from ...memory.solver import BufferRequest, MemoryPlan, solve_buffer_memory
from .resolver import Resolution, resolve

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
BROADCAST_OPS = frozenset({"Expand", "Tile"})   # views at a signature where they copy nothing (a reshape)
SMALL_OUTPUT = 4096   # elements: outputs this small are allocated by the kernel, not planned


@dataclass
class Step:
    kind: str                  # "reference", "snippet", "blas", ...
    ops: list[str]             # source op types this step covers
    node: Node
    kernel: Kernel
    in_slots: list[int]        # -1 for a missing optional input
    out_slots: list[int]

    @property
    def name(self) -> str:
        return self.node.name or self.node.outputs[0].name

    @property
    def is_view(self) -> bool:
        return self.node.op in VIEW_OPS and len(self.out_slots) == 1

    def is_view_at(self, types: list) -> bool:
        """A view at these resolved types: a reshape-like op, or a broadcast that repeats nothing (an
        Expand to the input's own size, as exporters write one for shapes they cannot know)."""
        out = types[self.out_slots[0]] if len(self.out_slots) == 1 else None
        if out is None or self.is_view:
            return out is not None
        x = types[self.in_slots[0]] if self.node.op in BROADCAST_OPS else None
        return x is not None and x.dtype == out.dtype and _numel(x) == _numel(out)

    def __repr__(self) -> str:
        return f"Step({self.kind}: {'+'.join(self.ops)} -> {', '.join(o.name for o in self.node.outputs)})"


@dataclass
class ResolvedPlan:
    """Everything about one input-shape signature that requests share."""
    resolution: Resolution
    modes: list[str]                       # per step: "skip", "view", "into", "call"
    memory: MemoryPlan
    arena_slots: dict[int, tuple[int, TensorType]]   # slot -> (offset, type)
    view_of: dict[int, int]                # view slot -> the slot it views
    inplace_of: dict[int, int]             # output slot written in place -> the (root) input slot it overwrites
    escaping: dict[int, TensorType | None]           # roots of graph outputs -> type (None: unknown)
    activation_bytes: int                  # all intermediate values, without reuse
    channel_slices: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # slot written straight into a Concat's output -> (that slot, first channel, end channel)

    def root(self, slot: int) -> int:
        """The slot whose memory a (chain of) view(s) shares."""
        while slot in self.view_of:
            slot = self.view_of[slot]
        return slot

    def owns(self, slot: int) -> bool:
        """Whether a value's memory is made for each run (an output buffer), not a constant's."""
        return self.root(slot) in self.escaping


@dataclass
class Program:
    graph: Graph
    steps: list[Step]
    slots: dict[int, int]                     # id(Value) -> slot
    constants: list[tuple[int, np.ndarray]]   # (slot, data), loaded once into every request
    input_slots: list[int]
    output_slots: list[int]
    num_slots: int = 0
    kernels: Recorder = field(default_factory=dict)   # every cached kernel it uses: what an artifact carries
    _plans: dict[tuple, ResolvedPlan] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def build(graph: Graph, options: dict, choose=choose, kernels: Recorder | None = None) -> "Program":
        """The program of `graph`; the cached kernels it uses are noted in `kernels` (default: a record of
        its own; a body of a control-flow step shares its model's, so a saved model carries them)."""
        kernels = {} if kernels is None else kernels
        with recording(kernels):
            program = Program._build(graph, options, choose)
        program.kernels = kernels
        return program

    @staticmethod
    def _build(graph: Graph, options: dict, choose) -> "Program":
        slots: dict[int, int] = {}

        def slot(v: Value | None) -> int:
            if v is None:
                return -1
            return slots.setdefault(id(v), len(slots))

        input_slots = [slot(v) for v in graph.inputs]
        constants = [(slot(v), v.data) for v in graph.constants]
        steps = []
        progress = Progress(len(graph.nodes), "snipjit: compiling steps")
        for node in graph.nodes:
            kind, kernel = choose(node, options)
            steps.append(Step(kind, covered_ops(node), node, kernel,
                              [slot(v) for v in node.inputs], [slot(v) for v in node.outputs]))
            progress.advance()
        progress.close()
        output_slots = [slot(v) for v in graph.outputs]
        steps = absorb_epilogues(steps, graph)
        constants = release_held_constants(graph, steps, slots, constants, output_slots)
        return Program(graph, steps, slots, constants, input_slots, output_slots, len(slots))

    def plans(self) -> dict[tuple, ResolvedPlan]:
        """The plans resolved so far, by input signature ((dtype, shape) per input)."""
        with self._lock:
            return dict(self._plans)

    def plan_for(self, input_types: Sequence[TensorType]) -> ResolvedPlan:
        key = tuple((t.dtype.name, t.shape) for t in input_types)
        plan = self._plans.get(key)
        if plan is None:
            with self._lock:
                plan = self._plans.get(key)
                if plan is None:
                    with recording(self.kernels):
                        plan = self._plans[key] = self._plan(list(input_types))
        return plan

    def held_weights(self) -> dict[str, list[HeldWeight]]:
        """The constants kernels hold in their own form (released from the graph), by value name: the
        form of every step holding it (steps reading one weight differently hold different forms)."""
        by_slot = {s: v for v in self.graph.constants if is_held_placeholder(v.data) for s in [self.slots[id(v)]]}
        held: dict[str, list[HeldWeight]] = {}
        for step in self.steps:
            for i, s in enumerate(step.in_slots):
                if s not in by_slot:
                    continue
                if not step.kernel.holds_input(i):
                    raise RuntimeError(f"constant {by_slot[s].name} was released but step {step} reads it")
                held.setdefault(by_slot[s].name, []).append(step.kernel.held(i))
        missing = [v.name for v in by_slot.values() if v.name not in held]
        if missing:
            raise RuntimeError(f"constants {missing[:3]} were released but no step holds them")
        return held

    def _plan(self, input_types: list[TensorType]) -> ResolvedPlan:
        res = resolve(self, input_types)
        types = res.types
        fixed = set(res.values) | set(self.input_slots) | {s for s, _ in self.constants}
        view_of: dict[int, int] = {}
        modes: list[str] = []
        for i, step in enumerate(self.steps):
            if i in res.skipped:
                modes.append("skip")
            elif step.is_view_at(types):
                view_of[step.out_slots[0]] = step.in_slots[0]
                modes.append("view")
            elif all(types[s] is not None for s in step.out_slots):
                small = all(_numel(types[s]) <= SMALL_OUTPUT for s in step.out_slots)
                # kernels that prepare their arguments once (snippets) always write planned memory
                modes.append("call" if small and not step.kernel.binds else "into")
            else:
                modes.append("call")

        def root(s: int) -> int:
            while s in view_of:
                s = view_of[s]
            return s

        escaping = {root(s): types[root(s)] for s in self.output_slots if root(s) not in fixed}
        slices = self._channel_slices(modes, types, fixed | set(escaping))
        assembled = {whole for whole, _, _ in slices.values()}
        inplace_of = self._inplace(modes, types, root, fixed | set(escaping) | set(slices) | assembled)

        def memory_root(s: int) -> int:   # the slot whose arena buffer a value lives in
            s = root(s)
            while s in inplace_of:
                s = root(inplace_of[s])
            while s in slices:   # a slice of a Concat's output, which may be a slice of another's
                s = slices[s][0]
            return s

        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            if modes[i] == "into":
                for s in step.out_slots:
                    first.setdefault(memory_root(s), i)
                    last.setdefault(memory_root(s), i)
            for s in step.in_slots:
                r = memory_root(s) if s >= 0 else -1
                if r in first:
                    last[r] = max(last[r], i)
        requests = [BufferRequest(s, _nbytes(types[s]), first[s], last[s])
                    for s in first if s not in escaping]
        memory = solve_buffer_memory(requests)
        arena_slots = {r.key: (memory.offsets[r.key], types[r.key]) for r in requests}
        activation_bytes = sum(_nbytes(t) for i, t in enumerate(types)
                               if t is not None and i not in fixed and i not in view_of)
        return ResolvedPlan(res, modes, memory, arena_slots, view_of, inplace_of, escaping, activation_bytes,
                            slices)

    def _channel_slices(self, modes: list[str], types: list, excluded: set[int]) -> dict[int, tuple[int, int, int]]:
        """Concats along the last axis whose inputs are each written by a kernel that can write a slice
        of channels (`Kernel.writes_channel_slices`), or are the output of a Concat assembled this way
        (DenseNet's block: each layer's Concat extends the last one's), and are read by nothing else but
        kernels that take such a slice where it is (`Kernel.pitched_inputs`): the producers write straight
        into the Concat's output, which then has nothing left to do (its mode becomes "skip"). Not for a
        Concat whose output is a graph output or a constant (excluded). Slot -> (the slot whose memory
        holds it, first and end channel there), inner Concats' inputs before the outer Concats'."""
        producer = {s: i for i, step in enumerate(self.steps) for s in step.out_slots}
        readers: dict[int, list[tuple[int, int]]] = {}
        for j, step in enumerate(self.steps):
            for position, s in enumerate(step.in_slots):
                readers.setdefault(s, []).append((j, position))
        slices: dict[int, tuple[int, int, int]] = {}
        assembled: set[int] = set()   # Concat steps whose inputs are written into their output

        def placeable(s: int, concat: int) -> bool:
            w = producer.get(s)
            if w is None or s in excluded or s in slices or len(self.steps[w].out_slots) != 1:
                return False
            if w not in assembled and not (modes[w] == "into" and self.steps[w].kernel.writes_channel_slices):
                return False
            return all(j == concat or position in self.steps[j].kernel.pitched_inputs() for j, position in readers[s])

        for i, step in enumerate(self.steps):
            node, out = step.node, step.out_slots[0]
            if node.op != "Concat" or node.domain or modes[i] != "into" or out in excluded or types[out] is None:
                continue
            rank = len(types[out].shape)
            ins = step.in_slots
            if int(node.attrs.get("axis", 0)) % rank != rank - 1 or len(set(ins)) != len(ins) \
                    or not all(placeable(s, i) for s in ins):
                continue
            start = 0
            for s in ins:
                width = types[s].shape[-1]
                slices[s] = (out, start, start + width)
                start += width
            modes[i] = "skip"
            assembled.add(i)
        return slices

    def _inplace(self, modes: list[str], types: list, root, excluded: set[int]) -> dict[int, int]:
        """Output slot -> the input (root) slot whose memory the step overwrites: an input its kernel
        allows (`inplace_inputs`) of the output's dtype and size, planned in the arena by an earlier step
        (not a graph input, constant or escaping output, nor a view of one) and read by no later step, even
        through a view. The output is a planned single output too: an alias of the input's memory."""
        last_read: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            for s in step.in_slots:
                if s >= 0:
                    last_read[root(s)] = i
        planned: set[int] = set()   # roots written into the arena so far
        inplace_of: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            if modes[i] != "into":
                continue
            out = step.out_slots[0]
            if len(step.out_slots) == 1 and out not in excluded:
                for k in step.kernel.inplace_inputs():
                    r = root(step.in_slots[k])
                    if (r in planned and last_read[r] == i and types[r].dtype == types[out].dtype
                            and _numel(types[r]) == _numel(types[out])):
                        inplace_of[out] = r
                        break
            planned.update(s for s in step.out_slots if s not in excluded)
        return inplace_of


def release_held_constants(graph: Graph, steps: list[Step], slots: dict[int, int],
                           constants: list[tuple[int, np.ndarray]], output_slots: list[int]
                           ) -> list[tuple[int, np.ndarray]]:
    """Constants that every step reading them holds in its own form (packed weights) are released: the
    program and the graph keep a memory-free placeholder of the same type, so the bytes exist once."""
    readers: dict[int, list[bool]] = {}
    for step in steps:
        for i, s in enumerate(step.in_slots):
            if s >= 0:
                readers.setdefault(s, []).append(step.kernel.holds_input(i))
    held = {s for s, holds in readers.items() if all(holds)} - set(output_slots)
    for v in graph.constants:
        if slots[id(v)] in held:
            v.data = held_placeholder(v.data)
    return [(s, held_placeholder(data) if s in held else data) for s, data in constants]


def absorb_epilogues(steps: list[Step], graph: Graph) -> list[Step]:
    """Let kernels that can (BLAS) take the epilogue nodes the markup pass left to them: a skipped node
    whose data input is a step's single-use output joins that step, which then writes its output."""
    uses = graph.consumers()
    outputs = set(map(id, graph.outputs))
    by_output = {id(step.node.outputs[0]): step for step in steps if step.node.outputs}
    absorbed: set[int] = set()
    for step in steps:
        if not step.node.meta.get("skipped_by_plugin"):
            continue
        for i, v in enumerate(step.node.inputs):
            owner = by_output.get(id(v)) if v is not None else None
            if (owner is None or not hasattr(owner.kernel, "absorb") or id(v) in outputs
                    or len(uses.get(v, ())) != 1 or owner.out_slots[0] != step.in_slots[i]):
                continue
            if owner.kernel.absorb(step.node, i):
                owner.ops.append(step.node.op)
                owner.out_slots = list(step.out_slots)
                by_output[id(step.node.outputs[0])] = owner
                absorbed.add(id(step))
                break
    return [s for s in steps if id(s) not in absorbed]


def _numel(t: TensorType) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def _nbytes(t: TensorType) -> int:
    return _numel(t) * t.dtype.itemsize


def covered_ops(node: Node) -> list[str]:
    """The source op types a node stands for (a fused Subgraph lists its body's ops)."""
    body = node.attrs.get("body") if node.op == "Subgraph" else None
    return [n.op for n in body.nodes] if isinstance(body, Graph) else [node.op]
