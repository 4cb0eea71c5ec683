"""The bodies the gateway answers (and the enqueue and graph bodies it takes), as pydantic models.

They are the HTTP contract's one definition: :mod:`kafkagate.openapi` generates ``/openapi.json`` from
them and the route declarations (:mod:`kafkagate.api`), and each carries an example. Answers may gain
fields (``additionalProperties``); request bodies refuse unknown ones. The bodies the handlers parse with
``parse_model`` live beside their handlers (``ClaimBody`` in :mod:`kafkagate.claims`...); the admin
routes' answers are in :mod:`kafkagate.admin_models`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jqcore import envelope_rules as rules
from jqcore.envelope import MAX_DEDUP_KEY
from kafkagate.workmodels import ClaimedGraph

Millis = int
"""Milliseconds since the epoch."""


def shape(example: dict[str, Any], *, closed: bool = False) -> ConfigDict:
    return ConfigDict(extra="forbid" if closed else "allow", json_schema_extra={"examples": [example]})


def example_of(model: type[BaseModel] | None) -> Any:
    """The first example a model declares (None: none)."""
    extra = model.model_config.get("json_schema_extra") if model is not None else None
    examples = extra.get("examples") if isinstance(extra, dict) else None
    return examples[0] if isinstance(examples, list) and examples else None


def _id(description: str = "") -> Any:
    return Field(pattern=f"^{rules.ID_PATTERN}$", description=description)


# --- what clients send ---------------------------------------------------------------------------------


class JobIn(BaseModel):
    """A job to enqueue: the client's fields of the envelope (``jqcore.envelope``), with its limits."""

    model_config = shape(
        {"kind": "email.send", "args": {"to": "a@example.com"}, "meta": {"tenant": "a"}}, closed=True
    )

    id: str | None = Field(
        None, pattern=f"^{rules.ID_PATTERN}$", description="client id: the idempotency key"
    )
    kind: str = _id("the job type: which handler runs it")
    args: Any = Field(None, description="any JSON (nested at most 64 levels)")
    priority: int | None = Field(None, ge=rules.INT64_MIN, le=rules.INT64_MAX, description="lower runs first")
    run_at: Millis | None = Field(None, ge=0, le=rules.MAX_TS_MS, description="ms since the epoch")
    delay_ms: int | None = Field(None, ge=0, description="run this long from now (not with run_at)")
    expires_at: Millis | None = Field(None, ge=0, le=rules.MAX_TS_MS, description="never run after it")
    max_attempts: int | None = Field(None, ge=1, le=rules.MAX_ATTEMPTS_LIMIT)
    lease_ms: int | None = Field(None, ge=rules.MIN_LEASE_MS, le=rules.MAX_LEASE_MS)
    meta: dict[str, str] | None = Field(
        None,
        max_length=rules.MAX_META_ENTRIES,
        description=f"string pairs (keys {rules.META_KEY_PATTERN}, values 1-{rules.MAX_META_VALUE} chars)",
    )
    excl: str | None = Field(None, pattern=f"^{rules.ID_PATTERN}$", description="exclusivity value")
    trace: str | None = Field(None, pattern=f"^{rules.TRACEPARENT_PATTERN}$", description="W3C traceparent")
    partition: int | None = Field(None, ge=0, description="explicit Kafka partition (canaries)")
    canary: bool | None = None
    dedup_key: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_DEDUP_KEY,
        description="the job's id is then derived from queue, kind, args and this key (not with id)",
    )


class JobBatch(BaseModel):
    """Several jobs in one request: all are accepted or none (every bad field named ``jobs[i].field``)."""

    model_config = shape({"jobs": [{"kind": "email.send", "args": {"to": "a@example.com"}}]}, closed=True)

    jobs: list[JobIn] = Field(min_length=1)


# --- what the gateway answers --------------------------------------------------------------------------


class Health(BaseModel):
    model_config = shape({"status": "ok", "az": "az1"})
    status: str
    az: str


class Ready(BaseModel):
    model_config = shape({"status": "ready", "az": "az1", "topics": ["jobs"]})
    status: str
    az: str
    topics: list[str]


class Delivered(BaseModel):
    model_config = shape({"id": "01J0", "topic": "jobs", "partition": 0, "offset": 42})
    id: str
    topic: str
    partition: int
    offset: int


class Accepted(BaseModel):
    """Kafka has every job of the request (each job's record named)."""

    model_config = shape(
        {
            "ids": ["01J0"],
            "jobs": [{"id": "01J0", "topic": "jobs", "partition": 0, "offset": 42}],
            "az": "az1",
        }
    )
    ids: list[str]
    jobs: list[Delivered]
    az: str | None = None
    replay_of: str | None = Field(None, description="a replay: the job it was made from")


class ReplayAccepted(Accepted):
    """Kafka has the new job; ``source``: where the old one was read (Redis, or the history's archive)."""

    model_config = shape(
        {
            "ids": ["01J1"],
            "jobs": [{"id": "01J1", "topic": "jobs", "partition": 0, "offset": 43}],
            "az": "az1",
            "replay_of": "01J0",
            "source": "redis",
        }
    )
    replay_of: str
    source: Literal["redis", "archive"]


class Replayed(BaseModel):
    """This replay was made before (same Idempotency-Key): the job it made."""

    model_config = shape({"ids": ["rp-3f2a"], "replay_of": "01J0", "state": "completed", "changed": False})
    ids: list[str]
    replay_of: str
    state: str
    changed: bool


class Job(BaseModel):
    """A job, live (``source: redis``) or from the history once Redis forgot it (``source: archive``, fewer
    fields). ``result`` is the handler's result as JSON text."""

    model_config = shape(
        {
            "id": "01J0",
            "queue": "default",
            "state": "pending",
            "kind": "email.send",
            "attempt": 0,
            "source": "redis",
        }
    )
    id: str
    queue: str
    state: str
    kind: str | None = None
    attempt: int = 0
    max_attempts: int | None = None
    version: int | None = None
    priority: int | None = None
    enqueued_at: Millis | None = None
    run_at: Millis | None = None
    started_at: Millis | None = None
    finished_at: Millis | None = None
    updated_at: Millis | None = None
    lease_deadline: Millis | None = None
    reason: str | None = None
    last_error: str | None = None
    result: str | None = None
    cancel_requested: bool | None = None
    history: list[dict[str, Any]] | None = None
    origin: str | None = None
    worker: str | None = None
    source: Literal["redis", "archive"] = "redis"
    duplicates: int | None = None
    last_duplicate_at: Millis | None = None
    handed_back_since: Millis | None = None
    args: Any = None
    meta: dict[str, str] | None = None
    excl: str | None = None


class JobPage(BaseModel):
    model_config = shape({"jobs": [example_of(Job)], "next": None})
    jobs: list[Job]
    next: str | None = Field(None, description="the next page's cursor (?after=), null on the last")


class Canceled(BaseModel):
    model_config = shape({"id": "01J0", "outcome": "canceled", "changed": True})
    id: str
    outcome: str = Field(description="canceled, unscheduled, tombstoned; already_<state> when unchanged")
    changed: bool
    state: str | None = None


class ClaimedJob(BaseModel):
    """A job claimed for this worker: complete, fail or extend it with its ``attempt`` and ``token``."""

    model_config = shape(
        {
            "id": "01J0",
            "kind": "email.send",
            "args": {"to": "a@example.com"},
            "meta": {},
            "attempt": 1,
            "token": "9f1c",
            "lease_deadline_ms": 1767225630000,
            "lease_ms": 30000,
            "envelope_b64": "eyJ2IjoxfQ==",
        }
    )
    id: str
    kind: str
    args: Any = None
    meta: dict[str, str]
    attempt: int
    token: str
    lease_deadline_ms: Millis
    lease_ms: int
    envelope_b64: str = Field(description="the envelope as the relay stored it (base64 of its JSON)")
    graph: ClaimedGraph | None = Field(None, description="a graph node's job: its parents' outcomes")


class Claimed(BaseModel):
    model_config = shape({"jobs": []})
    jobs: list[ClaimedJob]


class LeaseExtended(BaseModel):
    model_config = shape({"id": "01J0", "lease_deadline_ms": 1767225660000})
    id: str
    lease_deadline_ms: Millis


class Completed(BaseModel):
    model_config = shape({"id": "01J0", "state": "completed"})
    id: str
    state: str


class Failed(BaseModel):
    model_config = shape({"id": "01J0", "outcome": "retry"})
    id: str
    outcome: str = Field(description="retry (pending again, after its backoff), errored (dead) or canceled")


class Depth(BaseModel):
    model_config = shape(
        {
            "pending": 3,
            "delayed": 0,
            "running": 1,
            "blocked": 0,
            "errored": 0,
            "finished": 9,
            "oldest_pending_age_ms": 120,
        }
    )
    pending: int
    delayed: int
    running: int
    blocked: int
    errored: int
    finished: int
    oldest_pending_age_ms: int | None = None
    by_filter: int | None = None
    far: int = 0


class QueueConfig(BaseModel):
    """A queue's configuration in force (the fields of ``PUT /v1/queues/{queue}``)."""

    model_config = shape(
        {"mode": "simple", "lease_ms": 30000, "max_attempts": 10, "filter_keys": [], "paused": False}
    )
    mode: str
    excl_key: str | None = None
    lease_ms: int
    max_attempts: int
    filter_keys: list[str]
    paused: bool
    retention_ms: int | None = None
    dead_retention_ms: int | None = None
    dedup: str | None = None
    dedup_window_ms: int | None = None
    events_cap: int | None = None
    fair_key: str | None = None
    fair_weights: dict[str, int] | None = None
    fair_limits: dict[str, int] | None = None
    fair_rates: dict[str, float] | None = None
    id_from: str | None = None
    memory_budget: int | None = None
    default_delay_ms: int | None = None
    enqueue_blocked: bool | None = None
