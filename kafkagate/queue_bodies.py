"""The bodies of the administration routes: queues and job types (:mod:`kafkagate.queues`), kill switches
(:mod:`kafkagate.switches`); parsed with :func:`kafkagate.requests.body_model`."""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jqcore import envelope_rules
from jqengine import QueueConfig
from jqruntime.dispatch import DispatchConfig

__all__ = [
    "PURGED_STATES",
    "DeadBody",
    "KindBody",
    "PurgeBody",
    "QueueConfigBody",
    "QueuePatchBody",
    "SwitchBody",
]

M = TypeVar("M", bound=BaseModel)
MAX_DELAY = QueueConfig.MAX_DEFAULT_DELAY_MS


class QueueConfigBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["simple", "exclusive"] = "simple"
    excl_key: str | None = None
    lease_ms: int = Field(30_000, ge=100)
    max_attempts: int = Field(10, ge=1, le=1000)
    filter_keys: list[str] = Field(default_factory=list)
    paused: bool = False
    retention_ms: int = Field(86_400_000, ge=0)
    dead_retention_ms: int = Field(7 * 86_400_000, ge=0)
    dedup: Literal["active", "finished"] = "active"
    dedup_window_ms: int = Field(86_400_000, ge=0)
    id_from: Literal["random", "content"] = "random"
    events_cap: int = Field(100_000, ge=0)
    fair_key: str | None = None
    fair_weights: dict[str, int] = Field(default_factory=dict)
    fair_limits: dict[str, int] = Field(default_factory=dict)
    fair_rates: dict[str, float] = Field(default_factory=dict)
    memory_budget: int = Field(0, ge=0, le=1 << 50)
    default_delay_ms: int = Field(0, ge=0, le=MAX_DELAY)
    """Jobs enqueued without ``run_at``/``delay_ms`` become visible this long after they were accepted."""
    enqueue_blocked: bool = False
    """``POST /v1/queues/{queue}/jobs`` answers 423 ``queue_blocked`` (jobs already in Kafka still go in)."""


class QueuePatchBody(BaseModel):
    """A partial update: only the fields given change; the others keep their current values."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["simple", "exclusive"] | None = None
    excl_key: str | None = None
    lease_ms: int | None = Field(None, ge=100)
    max_attempts: int | None = Field(None, ge=1, le=1000)
    filter_keys: list[str] | None = None
    paused: bool | None = None
    retention_ms: int | None = Field(None, ge=0)
    dead_retention_ms: int | None = Field(None, ge=0)
    dedup: Literal["active", "finished"] | None = None
    dedup_window_ms: int | None = Field(None, ge=0)
    id_from: Literal["random", "content"] | None = None
    events_cap: int | None = Field(None, ge=0)
    fair_key: str | None = None
    fair_weights: dict[str, int] | None = None
    fair_limits: dict[str, int] | None = None
    fair_rates: dict[str, float] | None = None
    memory_budget: int | None = Field(None, ge=0, le=1 << 50)
    default_delay_ms: int | None = Field(None, ge=0, le=MAX_DELAY)
    enqueue_blocked: bool | None = None
    rate: str | None = Field(None, max_length=100)
    """The relays' live rate limit (Consul, not the queue's configuration): ``50/s``, ``3000/m``,
    ``50/s burst 200``, ``paused`` (its jobs wait in the topic's holding lane), ``unlimited``."""


class KindBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queues: list[str] | None = None
    concurrency: int | None = Field(None, ge=1)
    max_attempts: int | None = Field(None, ge=1, le=1000)
    delivery: Literal["at_least_once", "at_most_once"] = "at_least_once"
    dispatch: DispatchConfig | None = None
    """Push mode: ``jobq dispatcher`` POSTs each job of this kind to a URL (``docs/dispatcher.md``).
    Omitted: the kind's jobs are for worker pools (a PUT replaces the whole type, dispatch included)."""
    priority: int | None = Field(None, ge=-(2**53), le=2**53)
    """The priority of its jobs enqueued without one (lower runs first; the default is the enqueue time)."""
    ignore_result: bool = False
    """Drop its jobs' results (kept neither in Redis nor in the history)."""

    @field_validator("queues")
    @classmethod
    def _queue_names(cls, queues: list[str] | None) -> list[str] | None:
        """Queue names as the queue routes take them (a bad one reached Redis and then Consul's key)."""
        for queue in queues or ():
            problem = envelope_rules.check_name("queue", queue)
            if problem:
                raise ValueError(f"queue {queue!r}: {problem}")
        return queues


class DeadBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(default_factory=list)
    limit: int = Field(1000, ge=1, le=100_000)


Waiting = Literal["pending", "delayed", "far"]
PURGED_STATES: tuple[Waiting, ...] = ("pending", "delayed", "far")
"""The states a queue purge cancels: every job waiting to run (running jobs finish; jobs a kill switch
parked wait for it to lift)."""


class PurgeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    states: list[Waiting] = Field(default_factory=lambda: list(PURGED_STATES), min_length=1)
    """Which waiting jobs: ``pending`` (ready), ``delayed`` (due later), ``far`` (the far-future tier)."""
    limit: int = Field(1000, ge=1, le=10_000)
    """At most this many jobs canceled by this call (send it again for more: ``remaining`` says how many
    wait)."""
    reason: str = Field("purged over HTTP", min_length=1, max_length=1000)
    """Kept with each canceled job."""


class SwitchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue: str = "*"
    """A queue name or glob (``billing.*``); ``*``: every queue."""
    kind: str = ""
    """A job kind (exact); empty: every kind."""
    meta: dict[str, str] = Field(default_factory=dict)
    """Meta pairs a job must all carry (as strings) to match."""
    action: Literal["park", "dead"] = "park"
    """``park``: matching jobs wait, no attempt spent, until the switch lifts; ``dead``: they go to the
    dead letters with the reason ``kill switch <name>``."""
