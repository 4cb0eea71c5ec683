"""Validation of a submitted graph document (any shape) into a :class:`~jqcore.graphs.spec.GraphSpec`,
naming every problem at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from jqcore.envelope import Envelope, now_ms
from jqcore.errors import EnvelopeError, FieldError, GraphInvalid
from jqcore.graphs.spec import (
    DEFAULT_RETENTION_MS,
    FEEDS,
    MAX_NODES,
    MAX_RETENTION_MS,
    ON_FAILURE,
    POLICIES,
    Edge,
    GraphSpec,
    Node,
    Policy,
)

__all__ = ["parse", "spec_of"]

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


def spec_of(env: Envelope) -> GraphSpec:
    """The graph a ``jobq.graph`` envelope carries (validated again: any producer may write one)."""
    if not isinstance(env.args, dict):
        raise GraphInvalid(FieldError("args", "a graph envelope carries the graph document in args"))
    return parse(env.args, now=env.enqueued_at)
