"""Python sugar for task graphs (Celery canvas, Dramatiq pipelines): :class:`Graph` builds any DAG,
:func:`pipeline`, :func:`chain`, :func:`group` and :func:`fan_out` the shapes, from :class:`Step` objects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jqcore.graphs.parse import parse
from jqcore.graphs.spec import Edge, Feed, GraphSpec, Node

__all__ = ["Graph", "Step", "chain", "fan_out", "group", "pipeline"]


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
