"""The bodies of the admin routes (queues, dead letters, job types, graphs, cron, kill switches): what they
answer, and the graph bodies they take; the contract's other models are :mod:`kafkagate.models`'."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jqcore.cron import CronSchedule
from jqcore.graphs.spec import MAX_NODES, MAX_RETENTION_MS
from kafkagate.models import Depth, Job, Millis, QueueConfig, example_of, shape

_CONFIG = example_of(QueueConfig)


class GraphIn(BaseModel):
    """A task graph, whole: exactly one of nodes, pipeline, chain, group, map (see docs/graphs.md)."""

    model_config = shape({"id": "g-1", "queue": "default", "chain": [{"kind": "a"}, {"kind": "b"}]})

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}$")
    queue: str | None = Field(None, description="home queue: routes the graph, default of its nodes")
    nodes: list[dict[str, Any]] | None = Field(None, max_length=MAX_NODES)
    pipeline: list[dict[str, Any]] | None = None
    chain: list[dict[str, Any]] | None = None
    group: list[dict[str, Any]] | None = None
    map: dict[str, Any] | None = Field(None, description="{kind, items, queue?, job options}")
    callback: dict[str, Any] | None = None
    on_failure: dict[str, Any] | None = None
    deadline_ms: int | None = Field(None, ge=1)
    deadline_at: Millis | None = None
    cancel_on_failure: bool = False
    retention_ms: int | None = Field(None, ge=0, le=MAX_RETENTION_MS)


class GraphActionIn(BaseModel):
    """Optional body of a graph's cancel (``reason``) or retry (``deadline_ms``)."""

    model_config = shape({"reason": "no longer needed"})

    reason: str | None = None
    deadline_ms: int | None = Field(None, ge=1)


class QueueList(BaseModel):
    model_config = shape({"queues": ["default", "billing"]})
    queues: list[str]


class RateLimit(BaseModel):
    """A queue's live rate limit, applied by the relays (``docs/relay.md``, "Holding lane")."""

    model_config = shape({"limit": "50/s burst 200", "per_s": 50.0, "burst": 200, "paused": False})
    limit: str
    """The canonical text: ``unlimited``, ``paused``, ``50/s``, ``50/s burst 200``, ``paused 50/s``."""
    per_s: float | None
    """Jobs a second (null: unlimited)."""
    burst: int | None
    """Jobs at once (null: one second's worth)."""
    paused: bool
    """Held: the queue's jobs wait in its topic's holding lane in Kafka until resumed."""


_RATE = {"limit": "unlimited", "per_s": None, "burst": None, "paused": False}


class QueueInfo(BaseModel):
    model_config = shape(
        {
            "queue": "default",
            "topic": "jobs",
            "acks": "all",
            "config": _CONFIG,
            "depth": example_of(Depth),
            "rate": _RATE,
        }
    )
    queue: str
    topic: str
    acks: str
    config: QueueConfig
    depth: Depth
    rate: RateLimit | None = None
    """The relays' live limit (null: Consul did not answer)."""


class QueueConfigured(BaseModel):
    model_config = shape({"queue": "default", "config": _CONFIG, "rate": _RATE})
    queue: str
    config: QueueConfig
    rate: RateLimit | None = None
    """The rate limit now (only when the request set ``rate``)."""


class DeadJobs(BaseModel):
    model_config = shape({"queue": "default", "jobs": []})
    queue: str
    jobs: list[Job]


class DeadRetried(BaseModel):
    model_config = shape({"queue": "default", "retried": 2})
    queue: str
    retried: int


class DeadPurged(BaseModel):
    model_config = shape({"queue": "default", "purged": 2})
    queue: str
    purged: int


class QueuePurged(BaseModel):
    model_config = shape(
        {
            "queue": "default",
            "canceled": 120,
            "by_state": {"pending": 100, "delayed": 20, "far": 0},
            "remaining": 0,
        }
    )
    queue: str
    canceled: int = Field(description="jobs this call canceled")
    by_state: dict[str, int] = Field(description="of them, per state they waited in")
    remaining: int = Field(description="jobs still waiting in the states purged (call again for more)")


class KindOptions(BaseModel):
    model_config = shape({"concurrency": 4, "max_attempts": None, "delivery": "at_least_once"})
    concurrency: int | None = None
    max_attempts: int | None = None
    delivery: str | None = None
    running: int | None = Field(None, description="per queue: how many of the kind run now")


class KindInQueue(KindOptions):
    model_config = shape(
        {"concurrency": 4, "delivery": "at_least_once", "running": 1, "dispatch": {"url": "https://h/…"}}
    )
    dispatch: dict[str, Any] | None = Field(
        None,
        description="the push dispatch its jobs of this queue go by (the queue's own, else the one for every"
        " queue; docs/dispatcher.md), its auth value masked, its URL's path and query too without admin;"
        " null: worker pools",
    )


class Kind(BaseModel):
    model_config = shape(
        {"kind": "email.send", "defaults": {"concurrency": 4, "delivery": "at_least_once"}, "queues": {}}
    )
    kind: str
    defaults: KindOptions | None = Field(None, description="for every queue; null when set for some only")
    queues: dict[str, KindInQueue] = Field(default_factory=dict)
    dispatch: dict[str, Any] | None = Field(
        None,
        description="push dispatch for every queue without one of its own (docs/dispatcher.md), its auth"
        " value masked, its URL's path and query too without admin; null: none for every queue",
    )


class KindList(BaseModel):
    model_config = shape({"kinds": []})
    kinds: list[Kind]


class KindConfigured(BaseModel):
    model_config = shape(
        {
            "kind": "email.send",
            "queues": None,
            "concurrency": 4,
            "max_attempts": None,
            "delivery": "at_least_once",
        }
    )
    kind: str
    queues: list[str] | None = None
    concurrency: int | None = None
    max_attempts: int | None = None
    delivery: str
    dispatch: dict[str, Any] | None = Field(None, description="push dispatch, its auth value masked")


class GraphAccepted(BaseModel):
    model_config = shape(
        {
            "id": "g-1",
            "queue": "default",
            "topic": "jobs",
            "partition": 0,
            "offset": 7,
            "nodes": {"a": "g-1.a"},
        }
    )
    id: str
    queue: str
    topic: str
    partition: int
    offset: int
    nodes: dict[str, str] = Field(description="node name -> its job id")


class GraphParent(BaseModel):
    node: str
    policy: str


class GraphNode(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    queue: str
    kind: str
    state: str
    job_id: str
    parents: list[GraphParent]
    run: int
    result: Any = None
    error: dict[str, Any] | None = None
    released_at: Millis | None = None
    finished_at: Millis | None = None


class Graph(BaseModel):
    model_config = shape(
        {
            "id": "g-1",
            "queue": "default",
            "state": "running",
            "created_at": 1767225600000,
            "counts": {},
            "nodes": [],
        }
    )
    id: str
    queue: str
    state: str
    created_at: Millis
    finished_at: Millis | None = None
    deadline_at: Millis | None = None
    reason: str | None = None
    on_failure: str | None = None
    counts: dict[str, int]
    nodes: list[GraphNode]


class GraphCanceled(BaseModel):
    model_config = shape({"canceled": True, "state": "canceled"})
    canceled: bool
    state: str


class GraphRetried(BaseModel):
    model_config = shape({"id": "g-1", "state": "running", "released": ["b"]})
    id: str
    state: str
    released: list[str]


_SCHEDULE = {"name": "nightly", "cron": "0 3 * * *", "tz": "UTC", "queue": "default", "kind": "report"}


class Schedule(CronSchedule):
    """A cron schedule as stored (``PUT``, ``pause``, ``resume`` answer it)."""

    model_config = shape(_SCHEDULE)


class ScheduleRun(CronSchedule):
    """A cron schedule with its last and next run."""

    model_config = shape({**_SCHEDULE, "schedule": "at 03:00", "next_slot_ms": 1767236400000, "fires": 3})
    schedule: str
    last_slot_ms: Millis | None = None
    last_fired_at_ms: Millis | None = None
    next_slot_ms: Millis | None = None
    fires: int = 0
    dropped: int = 0


class ScheduleList(BaseModel):
    model_config = shape({"schedules": []})
    schedules: list[ScheduleRun]


class ScheduleRemoved(BaseModel):
    model_config = shape({"name": "nightly", "removed": True})
    name: str
    removed: bool


class ScheduleTriggered(BaseModel):
    model_config = shape({"name": "nightly", "queue": "default", "id": "cron:nightly:1767225600000:manual"})
    name: str
    queue: str
    id: str


class Switch(BaseModel):
    model_config = shape(
        {"name": "stop-pdf", "action": "park", "queue": "*", "kind": "pdf.render", "meta": {}}
    )
    name: str
    action: str
    queue: str
    kind: str
    meta: dict[str, str]
    set_at_ms: Millis = 0
    by: str = ""


_SWITCH = example_of(Switch)


class SwitchList(BaseModel):
    model_config = shape({"switches": [_SWITCH]})
    switches: list[Switch]


class SwitchSet(BaseModel):
    model_config = shape({"switch": _SWITCH, "queues": ["default"]})
    switch: Switch
    queues: list[str] = Field(description="the queues it applies to now")


class SwitchLifted(BaseModel):
    model_config = shape({"name": "stop-pdf", "lifted": True, "jobs_released": 3})
    name: str
    lifted: bool
    jobs_released: int
