"""Task graphs (Chapman): the submitted shape, its validation and the Python sugar that builds it.

A graph is a DAG of nodes; every node is one job of any queue and kind. It travels whole, as one Kafka
record (an envelope of kind ``jobq.graph`` whose ``args`` is the normalized graph document, routed by the
graph's home ``queue``), so a 2xx means Kafka has every node. The engine creates the graph's record in
Redis from it (idempotent by graph id) and releases each node into its queue once its parents finished
(``jqcore.state.graphs``). A node's job id is derived from the graph id, the node name and the node's
run generation (:func:`node_job_id`), so a redelivered graph or a repeated release never makes a second job.

Edges carry a policy for when the parent does not complete (fails, is canceled or skipped):

* ``require`` (the default): the child is skipped — and so, transitively, are its own dependents;
* ``always``: the child runs anyway and receives the failure as that parent's input (``on_complete``);
* ``ignore``: the child runs anyway, without that parent's input.

``feed`` says how parents' results reach a handler besides ``current_job().graph.parents``: ``none``,
``last`` (the last parent's result appended to the positional args: a pipeline) or ``list`` (every
parent's result, in parent order, appended as one list: a chord's callback). An ``on_failure`` node runs
once when every other node finished and at least one failed, with every failure appended as a list.

Shapes (the same in HTTP bodies and here): ``nodes`` (any DAG), ``pipeline`` (each result feeds the next),
``chain`` (one after another, no results passed), ``group`` with an optional ``callback`` (a chord), and
``map`` (one node per item of one kind, optional ``callback``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from jqcore.envelope import MAX_ENVELOPE_BYTES, Envelope, encoded, new_envelope, now_ms
from jqcore.errors import EnvelopeError, FieldError, GraphInvalid

__all__ = [
    "GRAPH_KIND",
    "MAX_NODES",
    "NODE_STATES",
    "Edge",
    "Feed",
    "Graph",
    "GraphSpec",
    "Node",
    "Policy",
    "Step",
    "chain",
    "fan_out",
    "graph_envelope",
    "group",
    "node_job_id",
    "parse",
    "pipeline",
    "spec_of",
]

GRAPH_KIND = "jobq.graph"
"""The kind of the envelope that carries a whole graph through Kafka (never run by a worker)."""
MAX_NODES = 10_000
MAX_RETENTION_MS = 90 * 86_400_000
DEFAULT_RETENTION_MS = 7 * 86_400_000
ON_FAILURE = "on_failure"
"""The default name of the ``on_failure`` node."""

Policy = Literal["require", "always", "ignore"]
Feed = Literal["none", "last", "list"]
POLICIES: tuple[str, ...] = get_args(Policy)
FEEDS: tuple[str, ...] = get_args(Feed)
NODE_STATES = ("waiting", "ready", "completed", "failed", "canceled", "skipped")
"""A node in its graph: waiting for parents, ready (released into its queue: pending or running there),
then one terminal state."""

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NODE_FIELDS = frozenset(
    {
        "name",
        "queue",
        "kind",
        "args",
        "parents",
        "feed",
        "priority",
        "max_attempts",
        "lease_ms",
        "meta",
        "excl",
    }
)
_GRAPH_FIELDS = frozenset(
    {"id", "queue", "nodes", "pipeline", "chain", "group", "map", "callback", "on_failure", "deadline_ms",
     "deadline_at", "cancel_on_failure", "retention_ms"}
)  # fmt: skip
_SHAPES = ("nodes", "pipeline", "chain", "group", "map")


def _name_problem(value: object, limit: int) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > limit or not set(value) <= _NAME_CHARS or not value[0].isalnum():
        return f"must be 1-{limit} characters of [A-Za-z0-9_.-] starting with a letter or digit"
    return None


def node_job_id(graph_id: str, node: str, gen: int = 0) -> str:
    """The job id of ``node``'s run number ``gen`` (0: the first; a graph retry runs failed nodes again
    under ``<graph>:<node>@<gen>``): the same inputs always give the same id."""
    return f"{graph_id}:{node}" if gen == 0 else f"{graph_id}:{node}@{gen}"


@dataclass(frozen=True, slots=True)
class Edge:
    parent: str
    policy: Policy = "require"

    def to_doc(self) -> str | dict[str, str]:
        return self.parent if self.policy == "require" else {"node": self.parent, "policy": self.policy}


@dataclass(frozen=True, slots=True)
class Node:
    """One node: a job (queue, kind, args and job options) and the edges from its parents."""

    name: str
    queue: str
    kind: str
    args: Any = None
    parents: tuple[Edge, ...] = ()
    feed: Feed = "none"
    options: Mapping[str, Any] = field(default_factory=dict)
    """Job options passed to the node's envelope: priority, max_attempts, lease_ms, meta, excl."""

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "queue": self.queue, "kind": self.kind, "args": self.args}
        if self.parents:
            doc["parents"] = [e.to_doc() for e in self.parents]
        if self.feed != "none":
            doc["feed"] = self.feed
        doc.update(self.options)
        return doc

    def envelope(self, graph_id: str, gen: int = 0, *, at_ms: int | None = None) -> Envelope:
        """The node's job for run ``gen`` (validated like any envelope)."""
        return new_envelope(
            self.queue,
            self.kind,
            self.args,
            id=node_job_id(graph_id, self.name, gen),
            graph={"id": graph_id, "node": self.name},
            at_ms=at_ms,
            **self.options,
        )


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """A validated graph: nodes in a topological order, the optional ``on_failure`` node, options."""

    id: str
    queue: str
    nodes: tuple[Node, ...]
    on_failure: Node | None = None
    deadline_at: int | None = None
    cancel_on_failure: bool = False
    retention_ms: int = DEFAULT_RETENTION_MS

    def to_doc(self) -> dict[str, Any]:
        """The normalized document (what the graph envelope carries; :func:`parse` reads it back)."""
        doc: dict[str, Any] = {"id": self.id, "queue": self.queue, "nodes": [n.to_doc() for n in self.nodes]}
        if self.on_failure is not None:
            doc["on_failure"] = self.on_failure.to_doc()
        if self.deadline_at is not None:
            doc["deadline_at"] = self.deadline_at
        if self.cancel_on_failure:
            doc["cancel_on_failure"] = True
        if self.retention_ms != DEFAULT_RETENTION_MS:
            doc["retention_ms"] = self.retention_ms
        return doc

    def all_nodes(self) -> tuple[Node, ...]:
        return self.nodes + ((self.on_failure,) if self.on_failure is not None else ())

    def children(self) -> dict[str, list[tuple[str, Policy]]]:
        out: dict[str, list[tuple[str, Policy]]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for e in n.parents:
                out[e.parent].append((n.name, e.policy))
        return out


# --- parsing ----------------------------------------------------------------------------------------


class _Problems:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, where: str, problem: str) -> None:
        if len(self.items) < 50:
            self.items.append(FieldError(where, problem))

    def raise_if_any(self) -> None:
        if self.items:
            raise GraphInvalid(self.items)


def parse(doc: object, *, queue: str | None = None, now: int | None = None) -> GraphSpec:
    """Validate a graph document (any shape) into a :class:`GraphSpec`; raises :class:`GraphInvalid`
    naming every problem. ``queue``: the default queue of nodes without one (e.g. the URL's)."""
    bad = _Problems()
    if not isinstance(doc, dict):
        raise GraphInvalid(FieldError("$", "must be a JSON object"))
    home, shape = _check_top(doc, queue, bad)
    gid: str = doc["id"]
    raw_nodes = _expand(shape, doc, bad)
    bad.raise_if_any()
    nodes = [_node(f"nodes[{i}]", raw, home, bad) for i, raw in enumerate(raw_nodes)]
    on_failure = _on_failure(doc.get("on_failure"), home, bad)
    bad.raise_if_any()
    ordered = _check_dag(cast("list[Node]", nodes), on_failure, bad)
    now = now_ms() if now is None else now
    deadline_at = _deadline(doc, now, bad)
    retention = doc.get("retention_ms", DEFAULT_RETENTION_MS)
    if not _is_int(retention) or not 0 <= retention <= MAX_RETENTION_MS:
        bad.add("retention_ms", f"must be an integer between 0 and {MAX_RETENTION_MS}")
    if not isinstance(doc.get("cancel_on_failure", False), bool):
        bad.add("cancel_on_failure", "must be a boolean")
    bad.raise_if_any()
    spec = GraphSpec(
        id=gid,
        queue=home if home is not None else ordered[0].queue,
        nodes=tuple(ordered),
        on_failure=on_failure,
        deadline_at=deadline_at,
        cancel_on_failure=bool(doc.get("cancel_on_failure", False)),
        retention_ms=retention,
    )
    for i, n in enumerate(spec.all_nodes()):  # each node must make a valid job (queue, kind, args, options)
        try:
            n.envelope(gid, at_ms=now)
        except EnvelopeError as exc:
            for f in exc.fields:
                bad.add(f"{'on_failure' if n is on_failure else f'nodes[{i}]'}.{f.field}", f.problem)
    bad.raise_if_any()
    return spec


def _check_top(doc: Mapping[str, Any], queue: str | None, bad: _Problems) -> tuple[str | None, str]:
    """(home queue, shape) of a graph document; raises for an unknown field, a bad id or shape."""
    for key in doc:
        if key not in _GRAPH_FIELDS:
            bad.add(str(key)[:64], f"unknown field; allowed: {', '.join(sorted(_GRAPH_FIELDS))}")
    if (p := _name_problem(doc.get("id"), 60)) is not None:
        bad.add("id", p)
    home = doc.get("queue", queue)
    if home is not None and not isinstance(home, str):
        bad.add("queue", "must be a string")
        home = None
    shapes = [s for s in _SHAPES if s in doc]
    if len(shapes) != 1:
        bad.add("nodes", f"give exactly one of {', '.join(_SHAPES)} (got {', '.join(shapes) or 'none'})")
    if "callback" in doc and shapes and shapes[0] not in ("group", "map"):
        bad.add("callback", "only a group or a map has a callback")
    bad.raise_if_any()
    return home, shapes[0]


def _on_failure(raw: object, home: str | None, bad: _Problems) -> Node | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        bad.add("on_failure", "must be a node object")
        return None
    if "parents" in raw:
        bad.add("on_failure.parents", "an on_failure node follows every node; it takes no parents")
        return None
    return _node("on_failure", {"name": ON_FAILURE, **raw}, home, bad)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _deadline(doc: Mapping[str, Any], now: int, bad: _Problems) -> int | None:
    if "deadline_ms" in doc and "deadline_at" in doc:
        bad.add("deadline_ms", "give deadline_ms or deadline_at, not both")
        return None
    if "deadline_ms" in doc:
        value = doc["deadline_ms"]
        if not _is_int(value) or value <= 0:
            bad.add("deadline_ms", "must be a positive integer (milliseconds from now)")
            return None
        return now + int(value)
    value = doc.get("deadline_at")
    if value is None:
        return None
    if not _is_int(value) or value <= now:
        bad.add("deadline_at", "must be a time in the future (ms since the epoch)")
        return None
    return int(value)


def _steps(shape: str, value: object, bad: _Problems) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        bad.add(shape, "must be a non-empty list of jobs")
        return []
    if len(value) > MAX_NODES:
        bad.add(shape, f"at most {MAX_NODES} nodes")
        return []
    out = []
    for i, step in enumerate(value):
        if not isinstance(step, dict):
            bad.add(f"{shape}[{i}]", "must be a job object")
        elif "parents" in step and shape != "nodes":
            bad.add(f"{shape}[{i}].parents", f"a {shape} sets the parents itself")
        else:
            out.append(dict(step))
    return out


def _expand(shape: str, doc: Mapping[str, Any], bad: _Problems) -> list[dict[str, Any]]:
    """The ``nodes`` list of any shape."""
    steps = _map_steps(doc["map"], bad) if shape == "map" else _steps(shape, doc[shape], bad)
    prefix = {"pipeline": "step", "chain": "step", "group": "task", "map": "item"}.get(shape)
    for i, step in enumerate(steps):
        if prefix is not None:
            step.setdefault("name", f"{prefix}-{i + 1}")
        if shape in ("pipeline", "chain") and i:
            step["parents"] = [steps[i - 1]["name"]]
            if shape == "pipeline":
                step.setdefault("feed", "last")
    if shape in ("group", "map") and doc.get("callback") is not None:
        callback = doc["callback"]
        if not isinstance(callback, dict) or "parents" in callback:
            bad.add("callback", "must be a job object (its parents are the group's nodes)")
        else:
            steps.append(
                {"name": "callback", "feed": "list", **callback, "parents": [s["name"] for s in steps]}
            )
    return steps


def _map_steps(spec: object, bad: _Problems) -> list[dict[str, Any]]:
    if not isinstance(spec, dict) or not isinstance(spec.get("items"), list) or "kind" not in spec:
        bad.add("map", 'must be {"kind": ..., "items": [...]} (queue and job options optional)')
        return []
    base = {k: v for k, v in spec.items() if k != "items"}
    return _steps("map.items", [{**base, "args": [item]} for item in spec["items"]], bad)


def _node(where: str, raw: object, home: str | None, bad: _Problems) -> Node | None:
    if not isinstance(raw, dict):
        bad.add(where, "must be a job object")
        return None
    for key in raw:
        if key not in _NODE_FIELDS:
            bad.add(f"{where}.{str(key)[:64]}", f"unknown field; allowed: {', '.join(sorted(_NODE_FIELDS))}")
    if (p := _name_problem(raw.get("name"), 60)) is not None:
        bad.add(f"{where}.name", p)
    q = raw.get("queue", home)
    if q is None:
        bad.add(f"{where}.queue", "required (or give the graph a queue)")
    if not isinstance(raw.get("kind"), str):
        bad.add(f"{where}.kind", "required: a string")
    feed = raw.get("feed", "none")
    if feed not in FEEDS:
        bad.add(f"{where}.feed", f"must be one of {', '.join(FEEDS)}")
    if feed != "none" and raw.get("args") is not None and not isinstance(raw.get("args"), list):
        bad.add(f"{where}.args", "a node fed its parents' results takes positional args (a list) or none")
    edges = _edges_of(where, raw.get("parents", []), bad)
    if bad.items:
        return None
    options = {k: v for k, v in raw.items() if k not in ("name", "queue", "kind", "args", "parents", "feed")}
    return Node(raw["name"], str(q), raw["kind"], raw.get("args"), tuple(edges), feed, options)


def _edges_of(where: str, parents: object, bad: _Problems) -> list[Edge]:
    if not isinstance(parents, list):
        bad.add(f"{where}.parents", "must be a list of node names or {node, policy} objects")
        return []
    edges: list[Edge] = []
    for j, item in enumerate(parents):
        if isinstance(item, str):
            edges.append(Edge(item))
        elif isinstance(item, dict) and isinstance(item.get("node"), str) and set(item) <= {"node", "policy"}:
            policy = item.get("policy", "require")
            if policy not in POLICIES:
                bad.add(f"{where}.parents[{j}].policy", f"must be one of {', '.join(POLICIES)}")
                continue
            edges.append(Edge(item["node"], cast("Policy", policy)))
        else:
            bad.add(f"{where}.parents[{j}]", "must be a node name or {node, policy}")
    return edges


def _check_dag(nodes: list[Node], on_failure: Node | None, bad: _Problems) -> list[Node]:
    """Unique names, known parents, no self-edge, no duplicate edge, acyclic. Returns the nodes in a
    topological order (Kahn), roots first in submission order."""
    by_name = _check_names(nodes, on_failure, bad)
    for i, n in enumerate(nodes):
        seen: set[str] = set()
        for e in n.parents:
            if e.parent not in by_name:
                bad.add(f"nodes[{i}].parents", f"unknown node {e.parent!r}")
            elif e.parent == n.name:
                bad.add(f"nodes[{i}].parents", f"{n.name!r} cannot be its own parent")
            elif e.parent in seen:
                bad.add(f"nodes[{i}].parents", f"{e.parent!r} listed twice")
            seen.add(e.parent)
    bad.raise_if_any()
    return [by_name[name] for name in _topological(nodes, bad)]


def _check_names(nodes: list[Node], on_failure: Node | None, bad: _Problems) -> dict[str, Node]:
    by_name: dict[str, Node] = {}
    for i, n in enumerate(nodes):
        if n.name in by_name:
            bad.add(f"nodes[{i}].name", f"duplicate node name {n.name!r}")
        by_name[n.name] = n
    if on_failure is not None and on_failure.name in by_name:
        bad.add("on_failure.name", f"{on_failure.name!r} is also the name of a node")
    if len(nodes) + (on_failure is not None) > MAX_NODES:
        bad.add("nodes", f"{len(nodes)} nodes; at most {MAX_NODES}")
    return by_name


def _topological(nodes: list[Node], bad: _Problems) -> list[str]:
    indegree = {n.name: len(n.parents) for n in nodes}
    children: dict[str, list[str]] = {n.name: [] for n in nodes}
    for n in nodes:
        for e in n.parents:
            children[e.parent].append(n.name)
    order = [n.name for n in nodes if indegree[n.name] == 0]
    for name in order:  # grows while iterating: Kahn's queue
        for c in children[name]:
            indegree[c] -= 1
            if indegree[c] == 0:
                order.append(c)
    if len(order) != len(nodes):
        cyclic = sorted(name for name, d in indegree.items() if d > 0)
        bad.add("nodes", f"the graph has a cycle through {', '.join(cyclic[:10])}")
        bad.raise_if_any()
    return order


# --- the record that carries a graph through Kafka ---------------------------------------------------


def graph_envelope(spec: GraphSpec, *, at_ms: int | None = None) -> Envelope:
    """The one Kafka record of a graph (routed by its home queue). Raises :class:`GraphInvalid` when
    the whole graph is larger than one envelope may be."""
    env = new_envelope(spec.queue, GRAPH_KIND, spec.to_doc(), id=f"{spec.id}@graph", at_ms=at_ms)
    env = encoded(env)  # the record value, encoded once
    size = len(env.raw or b"")
    if size > MAX_ENVELOPE_BYTES:
        raise GraphInvalid(
            FieldError("$", f"the graph is {size} bytes; at most {MAX_ENVELOPE_BYTES} (args included)"),
            code="graph_too_large",
        )
    return env


def spec_of(env: Envelope) -> GraphSpec:
    """The graph a ``jobq.graph`` envelope carries (validated again: any producer may write one)."""
    if not isinstance(env.args, dict):
        raise GraphInvalid(FieldError("args", "a graph envelope carries the graph document in args"))
    return parse(env.args, now=env.enqueued_at)


# --- Python sugar (Celery canvas, Dramatiq pipelines) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One job of a shape: ``Step("etl.load", [day])``, or from a registered handler
    ``Step.of(load, day)`` (its kind and queue, args as the handler takes them)."""

    kind: str
    args: Any = None
    queue: str | None = None
    name: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, handler: Any, *args: Any, **kwargs: Any) -> Step:
        """A step calling a registered handler (``worker.Registry.job``'s :class:`JobSpec`)."""
        message = handler.message(*args, **kwargs)
        return cls(message["kind"], message["args"], queue=handler.queue)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "args": self.args, **self.options}
        if self.queue is not None:
            doc["queue"] = self.queue
        if self.name is not None:
            doc["name"] = self.name
        return doc


NodeRef = str | Node


class Graph:
    """Build any DAG in Python::

    g = Graph("etl-2026-11-24", queue="etl")
    raw = g.add("extract", "etl.extract", ["2026-11-24"])
    clean = g.add("clean", "etl.clean", parents=[raw], feed="last")
    g.add("report", "etl.report", parents=[clean, g.always(raw)])
    g.on_failure("etl.alert", ["etl-2026-11-24"])
    await client.submit_graph(g)
    """

    def __init__(
        self,
        id: str,
        *,
        queue: str | None = None,
        deadline_ms: int | None = None,
        cancel_on_failure: bool = False,
        retention_ms: int | None = None,
    ) -> None:
        self.id, self.queue = id, queue
        self.options: dict[str, Any] = {"cancel_on_failure": cancel_on_failure}
        if deadline_ms is not None:
            self.options["deadline_ms"] = deadline_ms
        if retention_ms is not None:
            self.options["retention_ms"] = retention_ms
        self._nodes: list[dict[str, Any]] = []
        self._on_failure: dict[str, Any] | None = None

    def add(
        self,
        name: str,
        kind: str,
        args: Any = None,
        *,
        queue: str | None = None,
        parents: Iterable[str | Edge] = (),
        feed: Feed = "none",
        **options: Any,
    ) -> str:
        """Add a node; returns its name (to use in later ``parents``)."""
        doc: dict[str, Any] = {"name": name, "kind": kind, "args": args, **options}
        if queue is not None:
            doc["queue"] = queue
        edges = [Edge(p) if isinstance(p, str) else p for p in parents]
        if edges:
            doc["parents"] = [e.to_doc() for e in edges]
        if feed != "none":
            doc["feed"] = feed
        self._nodes.append(doc)
        return name

    def step(self, name: str, step: Step, *, parents: Iterable[str | Edge] = (), feed: Feed = "none") -> str:
        return self.add(
            name, step.kind, step.args, queue=step.queue, parents=parents, feed=feed, **step.options
        )

    @staticmethod
    def always(parent: str) -> Edge:
        """An edge whose child runs even when ``parent`` fails (receiving the failure)."""
        return Edge(parent, "always")

    @staticmethod
    def ignore(parent: str) -> Edge:
        """An edge whose child runs even when ``parent`` fails (without its input)."""
        return Edge(parent, "ignore")

    def on_complete(self, parent: str, name: str, step: Step) -> str:
        """Run ``step`` once ``parent`` finished, whatever its outcome (Chapman's chain)."""
        return self.step(name, step, parents=[self.always(parent)])

    def map(self, kind: str, items: Sequence[Any], *, prefix: str = "item", **options: Any) -> list[str]:
        """One node per item (``args`` = ``[item]``); returns their names."""
        return [self.add(f"{prefix}-{i + 1}", kind, [item], **options) for i, item in enumerate(items)]

    def on_failure(self, kind: str, args: Any = None, *, queue: str | None = None, **options: Any) -> None:
        doc: dict[str, Any] = {"kind": kind, "args": args, **options}
        if queue is not None:
            doc["queue"] = queue
        self._on_failure = doc

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.id, "nodes": list(self._nodes), **self.options}
        if self.queue is not None:
            doc["queue"] = self.queue
        if self._on_failure is not None:
            doc["on_failure"] = self._on_failure
        return doc

    def spec(self, *, now: int | None = None) -> GraphSpec:
        return parse(self.to_doc(), now=now)


def _shape(shape: str, id: str, steps: Sequence[Step], queue: str | None, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": id, shape: [s.to_doc() for s in steps], **extra}
    if queue is not None:
        doc["queue"] = queue
    return doc


def pipeline(id: str, *steps: Step, queue: str | None = None, **options: Any) -> dict[str, Any]:
    """Each step's result is appended to the next step's args (Dramatiq's pipeline, Celery's chain)."""
    return _shape("pipeline", id, steps, queue, **options)


def chain(id: str, *steps: Step, queue: str | None = None, **options: Any) -> dict[str, Any]:
    """Each step starts once the previous one completed; no results passed."""
    return _shape("chain", id, steps, queue, **options)


def group(
    id: str, steps: Sequence[Step], *, callback: Step | None = None, queue: str | None = None, **options: Any
) -> dict[str, Any]:
    """Run ``steps`` in parallel; then ``callback`` with the list of their results (Celery's chord)."""
    if callback is not None:
        options["callback"] = callback.to_doc()
    return _shape("group", id, steps, queue, **options)


def fan_out(
    id: str,
    kind: str,
    items: Sequence[Any],
    *,
    callback: Step | None = None,
    queue: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """``map(kind, items)``: one job per item, then ``callback`` with every result, in item order."""
    doc: dict[str, Any] = {"id": id, "map": {"kind": kind, "items": list(items)}, **options}
    if queue is not None:
        doc["map"]["queue"] = queue
        doc["queue"] = queue
    if callback is not None:
        doc["callback"] = callback.to_doc()
    return doc
