"""TokenizeSnippets: the greedy tokenizer that packs the nodes Snippets supports into `Subgraph` nodes.

The graph is walked in topological order. A node the Snippets compiler supports (`is_supported`) and no
markup pass skipped
  - starts a new subgraph when none of its inputs comes from a subgraph,
  - attaches to the subgraph its input comes from, or
  - merges the subgraphs its inputs come from and attaches to the result.
A join is refused when the result would
  - create a cycle: a path leaving the subgraph and coming back into it through a node outside it
    (another subgraph counts as one node, since it becomes one),
  - feed more than one graph output (the one-Result rule), or
  - need more vector registers than the target has (see `Boundary.registers`).
The parent subgraphs are tried in the order of the node's inputs and each is joined when the result is
still legal, so a node joins as many of them as it safely can and starts its own subgraph when it can
join none (the design guide starts a new one as soon as the full merge is illegal). A node that does not
fit the register budget even alone stays a plain node.

Subgraphs are decided first on the unchanged graph (`Cluster`s of its nodes, each with its `Boundary`)
and built at the end: each becomes a `Subgraph` node named `subgraphK` whose body holds copies of its
nodes. Single-element constants are copied into the body; every other value from outside is a Subgraph
input, and every value used outside (by a node or as a graph output) a Subgraph output. Body values keep
the outer names.

Options: `vector_registers` (32, AVX-512), `fuse_single_nodes` (True: a lone elementwise node still gains
from a generated kernel — one pass over memory, no temporaries, parallel — so it is wrapped too; False
leaves it a plain node).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.graph import Graph, Node, TensorType, Value
from ..ir.shape import merge_shapes
from ..ops import subgraph as _subgraph_op  # noqa: F401  (registers the Subgraph op)
from ..ops.registry import infer_node
from ..snippets.supported_ops import is_supported
from .mark_skipped import SKIPPED_BY_PLUGIN


def is_scalar_constant(v: Value) -> bool:
    return v.is_constant and v.data.size == 1


class Boundary:
    """What a set of nodes takes from and gives to the rest of the graph as one Subgraph. It is built
    node by node in topological order (`attach`), so growing a subgraph by a node costs work for that
    node only (and a copy of the state); `settle` then decides which results are used outside."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.inputs: dict[Value, None] = {}    # outside values except scalar constants (ordered set)
        self.scalars: dict[Value, None] = {}   # single-element constants, copied into the body
        self.outputs: list[Value] = []         # results used outside (after `settle`)
        self.graph_outputs = 0                 # how many of `outputs` are graph outputs
        self.live: list[int] = []              # body values live at each node's position
        self.last_use: dict[Value, int] = {}   # body value (result or scalar) -> position of its last use
        self.peak = 0                          # max(live)

    def copy(self) -> "Boundary":
        b = Boundary()
        b.nodes, b.inputs, b.scalars = list(self.nodes), dict(self.inputs), dict(self.scalars)
        b.outputs, b.graph_outputs = list(self.outputs), self.graph_outputs
        b.live, b.last_use, b.peak = list(self.live), dict(self.last_use), self.peak
        return b

    @property
    def registers(self) -> int:
        """Vector registers the kernel needs: one per input and output, the most body values live at
        once, and a scratch register. An estimate: a body value is live from its definition (a scalar's
        first use) to its last use inclusive, so a node's inputs and result never share a register."""
        return len(self.inputs) + len(self.outputs) + self.peak + 1

    def attach(self, node: Node) -> None:
        """Add a node that comes after every node already here."""
        pos = len(self.nodes)
        live_here = len(node.outputs)
        for v in dict.fromkeys(v for v in node.inputs if v is not None):
            if v not in self.last_use and not is_scalar_constant(v):
                self.inputs[v] = None  # an outside value: counted apart from the body's values
                continue
            if v in self.last_use:  # a body value: its live range now reaches this node
                for p in range(self.last_use[v] + 1, pos):
                    self.live[p] += 1
                    self.peak = max(self.peak, self.live[p])
            else:
                self.scalars[v] = None
            self.last_use[v] = pos
            live_here += 1
        for o in node.outputs:
            self.last_use[o] = pos
        self.live.append(live_here)
        self.peak = max(self.peak, live_here)
        self.outputs.extend(node.outputs)  # candidates until `settle`
        self.nodes.append(node)

    def settle(self, inside: Callable[[Node], bool], users: dict[Value, list[Node]],
               graph_outputs: set[Value]) -> None:
        """Keep as outputs the results that are graph outputs or have a user outside. Adding nodes only
        ever makes outputs internal, so the candidates are the last outputs and the new results."""
        self.outputs = [o for o in dict.fromkeys(self.outputs)
                        if o in graph_outputs or not all(inside(u) for u in users.get(o, ()))]
        self.graph_outputs = sum(o in graph_outputs for o in self.outputs)


@dataclass(eq=False)
class Cluster:
    """The nodes that will form one Subgraph."""
    boundary: Boundary

    @property
    def nodes(self) -> list[Node]:
        return self.boundary.nodes


class TokenizeSnippets:
    """One run of the tokenizer over one graph (see the module docstring)."""

    def __init__(self, graph: Graph, options: dict | None = None):
        options = options or {}
        self.graph = graph
        self.vector_registers = int(options.get("vector_registers", 32))
        self.fuse_single_nodes = bool(options.get("fuse_single_nodes", True))
        graph.toposort()
        self.index: dict[Node, int] = {n: i for i, n in enumerate(graph.nodes)}
        self.users: dict[Value, list[Node]] = {
            v: list(dict.fromkeys(n for n, _ in uses)) for v, uses in graph.consumers().items()}
        self.graph_outputs: set[Value] = set(graph.outputs)
        self.cluster_of: dict[Node, Cluster] = {}

    def run(self) -> Graph:
        for node in self.graph.nodes:
            if is_supported(node) and not node.meta.get(SKIPPED_BY_PLUGIN, False):
                self.tokenize(node)
        return self.build()

    # ---- the greedy walk -------------------------------------------------------------------------
    def tokenize(self, node: Node) -> None:
        """The guide's step for one node: attach it to its parent subgraph, or merge several parents and
        attach it — joining each parent in turn while the result stays legal — or, when it can join
        none, start a new subgraph."""
        joined: list[Cluster] = []
        boundary = None
        for parent in self.parent_clusters(node):
            trial = self.try_join(joined + [parent], node)
            if trial is not None:
                joined, boundary = joined + [parent], trial
        if boundary is None:
            boundary = self.try_join([], node)  # start
        if boundary is not None:
            self.record(joined, boundary)

    def record(self, joined: list[Cluster], boundary: Boundary) -> None:
        """Make `boundary` the subgraph of its nodes. The largest joined cluster lives on, so only the
        others' nodes and the new node change hands."""
        cluster = max(joined, key=lambda c: len(c.nodes), default=None) or Cluster(boundary)
        moved = [n for c in joined if c is not cluster for n in c.nodes] + [boundary.nodes[-1]]
        cluster.boundary = boundary
        for n in moved:
            self.cluster_of[n] = cluster

    def parent_clusters(self, node: Node) -> list[Cluster]:
        """The distinct subgraphs the node's inputs come from, in input order."""
        found = (self.cluster_of.get(v.producer) for v in node.inputs if v is not None and v.producer)
        return list(dict.fromkeys(c for c in found if c is not None))

    def try_join(self, parents: list[Cluster], node: Node) -> Boundary | None:
        """The boundary of the parents merged with the node attached, or None when that is illegal."""
        boundary = self.merge(parents)
        boundary.attach(node)
        members = set(parents)

        def inside(n: Node) -> bool:
            return n is node or self.cluster_of.get(n) in members

        boundary.settle(inside, self.users, self.graph_outputs)
        legal = (boundary.graph_outputs <= 1 and boundary.registers <= self.vector_registers
                 and not self.creates_cycle(boundary, inside, self.index[node]))
        return boundary if legal else None

    def merge(self, clusters: list[Cluster]) -> Boundary:
        """A new boundary of the clusters' nodes together. When the others' nodes all come after the
        largest cluster's, they are attached to a copy of its boundary; otherwise it is rebuilt."""
        if not clusters:
            return Boundary()
        base = max(clusters, key=lambda c: len(c.nodes))
        rest = sorted((n for c in clusters if c is not base for n in c.nodes), key=self.index.__getitem__)
        if rest and self.index[rest[0]] < self.index[base.nodes[-1]]:
            boundary = Boundary()
            rest = sorted(base.nodes + rest, key=self.index.__getitem__)
        else:
            boundary = base.boundary.copy()
        for n in rest:
            boundary.attach(n)
        return boundary

    def creates_cycle(self, boundary: Boundary, inside: Callable[[Node], bool], newest: int) -> bool:
        """True when a path leaves the subgraph and comes back through a node or subgraph outside it.
        Nodes after the newest member are not in any subgraph yet and only reach later nodes, so the
        search stops there."""
        stack = [u for o in boundary.outputs for u in self.users.get(o, ()) if not inside(u)]
        seen: set[Node | Cluster] = set()
        while stack:
            node = stack.pop()
            group = self.cluster_of.get(node, node)
            if group in seen or self.index[node] > newest:
                continue
            seen.add(group)
            results = group.boundary.outputs if isinstance(group, Cluster) else node.outputs
            for u in (u for o in results for u in self.users.get(o, ())):
                if inside(u):
                    return True
                stack.append(u)
        return False

    # ---- building the Subgraph nodes -------------------------------------------------------------
    def build(self) -> Graph:
        clusters = list(dict.fromkeys(self.cluster_of[n] for n in self.graph.nodes if n in self.cluster_of))
        if not self.fuse_single_nodes:
            clusters = [c for c in clusters if len(c.nodes) > 1]
        fused: set[Node] = set()
        built: dict[Node, Node] = {}  # first member -> its Subgraph node
        for cluster, name in zip(clusters, self.fresh_node_names(len(clusters))):
            b = cluster.boundary
            body = make_body(b.inputs, b.outputs, b.nodes, name)
            built[b.nodes[0]] = Node("Subgraph", list(b.inputs), list(b.outputs), {"body": body}, name)
            fused.update(b.nodes)
        self.graph.nodes = [built.get(n, n) for n in self.graph.nodes if n in built or n not in fused]
        self.graph.toposort()  # a Subgraph's outside users may sit between its members
        for sub in built.values():
            for out, t in zip(sub.outputs, infer_node(sub)):
                out.type = TensorType(t.dtype, merge_shapes(out.type.shape, t.shape))
        self.graph.validate()
        return self.graph

    def fresh_node_names(self, count: int) -> list[str]:
        taken = {n.name for n in self.graph.nodes}
        names: list[str] = []
        k = 0
        while len(names) < count:
            if f"subgraph{k}" not in taken:
                names.append(f"subgraph{k}")
            k += 1
        return names


def make_body(inputs: list[Value], outputs: list[Value], nodes: list[Node], name: str) -> Graph:
    """The body graph of a Subgraph: copies of its nodes over copies of their values (same names)."""
    inner: dict[Value, Value] = {v: Value(v.name, v.type) for v in inputs}

    def copy(v: Value | None) -> Value | None:
        if v is None:
            return None
        if v not in inner:
            inner[v] = Value(v.name, v.type, None, v.data)
        return inner[v]

    copies = [Node(n.op, [copy(v) for v in n.inputs], [copy(o) for o in n.outputs], dict(n.attrs),
                  n.name, n.domain, dict(n.meta)) for n in nodes]
    return Graph([inner[v] for v in inputs], [inner[v] for v in outputs], copies, name)


def tokenize_snippets(graph: Graph, options: dict | None = None) -> Graph:
    return TokenizeSnippets(graph, options).run()


__all__ = ["TokenizeSnippets", "tokenize_snippets", "Boundary", "Cluster"]
