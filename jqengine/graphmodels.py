"""What the graph operations (:mod:`jqengine.graphs`) return and read: a node's inputs, a graph as an
admin sees it, and the decoding of the graph scripts' replies and stored node definitions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from jqcore.graphs import Node
from jqengine import codes
from jqengine.redisconn import text

__all__ = [
    "GraphInfo",
    "NodeInfo",
    "NodeInputs",
    "ParentOutcome",
    "Reply",
    "node_of",
    "parse_edges",
    "parse_reply",
]


@dataclass(frozen=True, slots=True)
class ParentOutcome:
    """What a node receives of one parent: its state, its result (decoded JSON) or its error."""

    state: str
    result: Any = None
    error: str | None = None
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class NodeInputs:
    """A running node's view of its graph (``current_job().graph``)."""

    graph_id: str
    node: str
    feed: str = "none"
    parents: Mapping[str, ParentOutcome] = field(default_factory=dict)
    """Parent name → outcome, in the node's parent order (a failed ``ignore`` parent is left out)."""
    failures: Sequence[Mapping[str, Any]] = ()
    """For the ``on_failure`` node: every node that did not complete (node, state, error, attempt)."""

    def fed(self) -> list[Any]:
        """The values appended to the handler's positional args, per ``feed``."""
        values = [p.result if p.state == "completed" else _failure_doc(n, p) for n, p in self.parents.items()]
        if self.failures:
            return [list(self.failures)]
        if self.feed == "last" and values:
            return [values[-1]]
        if self.feed == "list":
            return [values]
        return []

    def as_dict(self) -> dict[str, Any]:
        """This view as JSON (what an HTTP worker's claim carries as ``graph``): the parents by name in
        parent order, and ``fed``, the values a Python handler gets appended to its positional args."""
        return {
            "id": self.graph_id,
            "node": self.node,
            "feed": self.feed,
            "parents": {
                name: {"state": p.state, "result": p.result, "error": p.error, "attempt": p.attempt}
                for name, p in self.parents.items()
            },
            "failures": [dict(f) for f in self.failures],
            "fed": self.fed(),
        }


def _failure_doc(node: str, p: ParentOutcome) -> dict[str, Any]:
    return {"node": node, "state": p.state, "error": p.error, "attempt": p.attempt}


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    queue: str
    kind: str
    state: str
    job_id: str
    parents: list[tuple[str, str]]
    gen: int = 0
    result: Any = None
    error: Mapping[str, Any] | None = None
    released_at: int | None = None
    finished_at: int | None = None


@dataclass(frozen=True, slots=True)
class GraphInfo:
    id: str
    queue: str
    state: str
    created_at: int
    finished_at: int | None
    deadline_at: int | None
    reason: str | None
    on_failure: str | None
    counts: Mapping[str, int]
    nodes: list[NodeInfo]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": self.queue,
            "state": self.state,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "deadline_at": self.deadline_at,
            "reason": self.reason,
            "on_failure": self.on_failure,
            "counts": dict(self.counts),
            "nodes": [
                {
                    "name": n.name,
                    "queue": n.queue,
                    "kind": n.kind,
                    "state": n.state,
                    "job_id": n.job_id,
                    "parents": [{"node": p, "policy": pol} for p, pol in n.parents],
                    "run": n.gen + 1,
                    "result": n.result,
                    "error": n.error,
                    "released_at": n.released_at,
                    "finished_at": n.finished_at,
                }
                for n in self.nodes
            ],
        }


@dataclass
class Reply:
    code: codes.Code
    state: str = ""
    released: list[str] = field(default_factory=list)
    to_cancel: list[str] = field(default_factory=list)


def parse_reply(raw: Any) -> Reply:
    code = codes.Code(int(raw[0]))
    if len(raw) < 3:
        return Reply(code)
    n = int(raw[2])
    names = [text(x) for x in raw[3:]]
    return Reply(code, text(raw[1]), names[:n], names[n:])


def parse_edges(lines: Any) -> list[tuple[str, str]]:
    out = []
    for line in text(lines or b"").splitlines():
        parent, _, policy = line.partition(" ")
        out.append((parent, policy))
    return out


_NODE_OWN = ("name", "queue", "kind", "args", "feed", "parents")


def node_of(raw: Any) -> Node:
    """A stored node definition (validated when its graph was submitted)."""
    doc = orjson.loads(raw)
    options = {k: v for k, v in doc.items() if k not in _NODE_OWN}
    return Node(doc["name"], doc["queue"], doc["kind"], doc.get("args"), (), doc.get("feed", "none"), options)
