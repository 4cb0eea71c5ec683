"""Typed values the engine returns (plain dataclasses; JSON-friendly through ``as_dict``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal, NamedTuple

import orjson

from jqcore.envelope import Envelope

__all__ = [
    "CancelOutcome",
    "CancelResult",
    "ClaimedJob",
    "EnqueueOutcome",
    "EnqueueResult",
    "Failed",
    "Forgotten",
    "HandedBack",
    "JobInfo",
    "NotExtended",
    "Promoted",
    "QueueConfig",
    "QueueDepth",
    "Released",
    "Settle",
]

Outcome = Literal["stored", "delayed", "duplicate", "canceled", "expired", "refused"]


@dataclass(frozen=True, slots=True)
class EnqueueOutcome:
    id: str
    queue: str
    outcome: Outcome
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    outcomes: list[EnqueueOutcome]
    created_queues: list[str] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job handed to a worker: everything needed to run it and to write its outcome back."""

    envelope: Envelope
    attempt: int
    token: str
    lease_deadline_ms: int
    lease_ms: int = 0
    """The lease this claim got (the claimer's, else the job's own ``lease_ms``, else the queue's)."""

    @property
    def id(self) -> str:
        return self.envelope.id

    @property
    def queue(self) -> str:
        return self.envelope.queue


class Settle(NamedTuple):
    """One job's outcome in a batch write (:meth:`jqengine.Engine.settle`): completed when ``error``
    is None (``result`` kept), else failed: retried after ``delay_ms`` or errored (``permanent``, attempts
    used up, an ``at_most_once`` kind)."""

    job: tuple[str, int, str]
    result: bytes | None = None
    error: str | None = None
    delay_ms: int = 0
    permanent: bool = False


class Promoted(NamedTuple):
    """What ``promote_due`` did: jobs promoted, the next ``run_at`` (ms, -1 when none is delayed), and
    per promoted job how late it was promoted (ms; never negative)."""

    promoted: int
    next_run_at: int
    lateness_ms: tuple[int, ...]


class NotExtended(StrEnum):
    """Why ``extend`` did not extend a job's lease (the worker must stop it)."""

    STALE = "stale"
    """The lease was lost: another attempt owns the job now."""
    MISSING = "missing"
    CANCELED = "canceled"
    """A cancel was requested: the job is canceled now."""


class Failed(StrEnum):
    """What a failed attempt led to."""

    RETRY = "retry"
    ERRORED = "errored"
    """Attempts used up, a permanent failure or an at_most_once kind: the dead-letter list."""
    CANCELED = "canceled"
    """A cancel was requested while it ran: canceled, not retried."""


class HandedBack(StrEnum):
    """What handing back a job of an unknown kind led to."""

    HANDED_BACK = "handed_back"
    ERRORED = "errored"
    """No pool ran its kind for the dead-after time."""


class Released(StrEnum):
    """What giving a running job back at shutdown did to it."""

    RELEASED = "released"
    ERRORED = "errored"
    """An at_most_once job that had started: never handed out twice."""
    STALE = "stale"
    MISSING = "missing"


class Forgotten(StrEnum):
    """What ``forget`` did with one id."""

    FORGOTTEN = "forgotten"
    ACTIVE = "active"
    """Not finished: left alone."""
    MISSING = "missing"


class CancelOutcome(StrEnum):
    CANCELED = "canceled"
    FLAGGED = "flagged"
    """Running: its worker stops it (at its next extend, or when it fails)."""
    TOMBSTONED = "tombstoned"
    """Not in Redis yet (still in Kafka): refused as ``canceled`` when the relay brings it."""
    FINAL = "final"
    """Already finished: nothing changed."""


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a cancel did, and the state the job was in before it (``missing`` for a tombstone)."""

    outcome: CancelOutcome
    state: str

    @property
    def changed(self) -> bool:
        return self.outcome is not CancelOutcome.FINAL

    def __str__(self) -> str:
        return self.outcome.value if self.changed else f"already {self.state}"


@dataclass(slots=True)
class JobInfo:
    """A job as an admin sees it (live or finished, until GC)."""

    id: str
    queue: str
    state: str
    kind: str | None
    attempt: int
    max_attempts: int | None
    version: int
    priority: int | None
    enqueued_at: int | None
    run_at: int | None
    started_at: int | None
    finished_at: int | None
    lease_deadline: int | None
    reason: str | None
    last_error: str | None
    result: str | None
    cancel_requested: bool
    history: list[dict[str, Any]]
    origin: str | None = None
    """The Kafka record it came from (``topic/partition/offset``), when the relay wrote it."""
    worker: str | None = None
    """The worker that claimed it last (``host:pid:queues``)."""
    source: str = "redis"
    """Where this answer came from: ``redis`` (live), ``archive`` (the history tables, after GC)."""
    duplicates: int = 0
    """Enqueues of this id that were dropped as duplicates (see the queue's dedup policy)."""
    last_duplicate_at: int | None = None
    handed_back_since: int | None = None
    """Set while pools without a handler for its kind keep handing it back (rolling deploys)."""
    tail: str | None = None
    """``<queue>/<id>`` of the job its handler deferred to (``worker.defer_to``; state ``deferred`` while
    that job runs)."""
    tail_of: str | None = None
    """``<queue>/<id>`` of the job that deferred to this one (it finishes with this job's outcome)."""
    envelope: bytes | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["envelope"] = self.envelope.decode("utf-8", "replace") if self.envelope else None
        return out


class StreamEvent:
    """One lifecycle event waiting in a queue's stream: its stream entry id (what the shipper trims up
    to; the events of one script call share one entry), the job id (what picks its partition of the events
    topic) and the event's JSON (``jqcore.events``; an element of a Kafka record's array)."""

    __slots__ = ("_value", "entry", "fields", "job_id")

    def __init__(
        self, entry: str, job_id: str, value: bytes | None, fields: Mapping[str, Any] | None = None
    ) -> None:
        self.entry, self.job_id, self._value = entry, job_id, value
        self.fields = fields
        """The event already decoded, when it came in an entry of several (decoded once for all of
        them; its JSON is then made only when asked for)."""

    @property
    def value(self) -> bytes:
        if self._value is None:
            self._value = orjson.dumps(self.fields)
        return self._value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamEvent):
            return NotImplemented
        return (self.entry, self.job_id, self.value) == (other.entry, other.job_id, other.value)

    def __hash__(self) -> int:
        return hash((self.entry, self.job_id, self.value))

    def __repr__(self) -> str:
        return f"StreamEvent(entry={self.entry!r}, job_id={self.job_id!r})"


@dataclass(slots=True)
class QueueDepth:
    pending: int
    delayed: int
    running: int
    blocked: int
    errored: int
    finished: int
    oldest_pending_age_ms: int | None
    by_filter: int | None = None
    far: int = 0
    """Far-future jobs kept in the schedule topic (their index entries)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Mode = Literal["simple", "exclusive"]
Dedup = Literal["active", "finished"]
IdFrom = Literal["random", "content"]


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Per-queue options (Timestone): simple or exclusive on a meta key, defaults, filter keys, pause."""

    mode: Mode = "simple"
    excl_key: str | None = None
    lease_ms: int = 30_000
    max_attempts: int = 10
    filter_keys: tuple[str, ...] = ()
    paused: bool = False
    retention_ms: int = 86_400_000
    dead_retention_ms: int = 7 * 86_400_000
    dedup: Dedup = "active"
    """``active``: an id is a duplicate while its job is queued or running (Slack's rule); once it
    finished, enqueuing it again runs it again. ``finished``: also for ``dedup_window_ms`` after it
    finished (at most ``retention_ms``: the window needs the finished job's record). Either way the same
    Kafka record read twice (a relay re-read, a replay) is absorbed."""
    dedup_window_ms: int = 86_400_000
    id_from: IdFrom = "random"
    """``content``: a job that arrives at the gateway without an id gets one derived from queue + kind +
    canonical args (:func:`jqcore.envelope.content_id`), so identical enqueues are one job under the
    dedup policy above (Slack's rule); ``random``: a fresh id each time."""
    events_cap: int = 100_000
    """Lifecycle events waiting in Redis for the shipper at most (``docs/history.md``): at the cap a new
    event is counted in the queue's ``events_dropped`` stat instead of stored. 0: no events."""
    fair_key: str | None = None
    """A meta key (e.g. ``tenant``): claims deal jobs round-robin across its values instead of in one
    priority order (priority still orders each value's own jobs); jobs without it share the value ``''``."""
    fair_weights: Mapping[str, int] = field(default_factory=dict)
    """Value → weight (1-1000, default 1): a value of weight 3 gets three claims to another's one."""
    fair_limits: Mapping[str, int] = field(default_factory=dict)
    """Value → how many of its jobs may run at once (across every worker)."""
    fair_rates: Mapping[str, float] = field(default_factory=dict)
    """Value → jobs per second it may start (0.001-1,000,000; a burst of one second's worth, at least 1),
    across every worker: a value over its rate waits out of the round until its next job may start."""
    memory_budget: int = 0
    """Bytes of Redis memory the queue's unfinished jobs may hold (estimated, :mod:`jqengine.memory`;
    finished jobs kept until GC do not count: holding the queue would not free them): above it the relay
    sets the queue's jobs aside until workers drained it below 90 % of it (0: the relay's default,
    ``JOBQ_RELAY_QUEUE_MEMORY_SHARE`` of Redis's ``maxmemory``)."""
    default_delay_ms: int = 0
    """Timestone's default invisibility: a job that comes without ``run_at`` or ``delay_ms`` becomes
    visible this long after it was accepted (its ``enqueued_at``), never earlier. Applied where every
    producer's jobs enter Redis (``enqueue_batch``: the relay, replays, the rebuild, graphs, tail calls),
    with the configuration in force then. An explicit ``run_at`` or ``delay_ms`` wins (``delay_ms: 0``:
    now). 0: no default delay."""
    enqueue_blocked: bool = False
    """The gateway refuses new jobs (``POST /v1/queues/{q}/jobs``: 423 ``queue_blocked``), read through
    its cached configuration (for 5 s; with Redis unreachable it accepts). Jobs
    already in Kafka still go in, and so do the other writers (the Spark writer, cron fires, replays, the
    rebuild, task graphs' nodes, tail calls); claims go on (``paused`` stops those)."""

    MAX_FILTER_KEYS = 4
    MAX_DEFAULT_DELAY_MS = 30 * 86_400_000

    def as_dict(self) -> dict[str, Any]:
        """The configuration as JSON shows it (the gateway's ``GET /v1/queues/{queue}``, the dashboard):
        every field, ``filter_keys`` as a list."""
        out = asdict(self)
        out["filter_keys"] = list(self.filter_keys)
        out["fair_weights"], out["fair_limits"] = dict(self.fair_weights), dict(self.fair_limits)
        out["fair_rates"] = dict(self.fair_rates)
        return out


@dataclass(frozen=True, slots=True)
class JobLease:
    """Who may write a job's outcome now: its state, its current attempt and that attempt's lease token
    (a push dispatcher watches these; the gateway fences a dispatch callback with them)."""

    state: str
    attempt: int
    token: str
    kind: str
