"""A task graph's model: its nodes and edges, the validated :class:`GraphSpec`, node job ids, and the one
Kafka record that carries a whole graph (:func:`graph_envelope`). The package docstring
(:mod:`jqcore.graphs`) describes graphs as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from jqcore.envelope import MAX_ENVELOPE_BYTES, Envelope, encoded, new_envelope
from jqcore.errors import FieldError, GraphInvalid

__all__ = [
    "DEFAULT_RETENTION_MS",
    "FEEDS",
    "GRAPH_KIND",
    "MAX_NODES",
    "MAX_RETENTION_MS",
    "NODE_STATES",
    "ON_FAILURE",
    "POLICIES",
    "Edge",
    "Feed",
    "GraphSpec",
    "Node",
    "Policy",
    "graph_envelope",
    "node_job_id",
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
