"""Where the pipeline's shared state and streams live, read by the services that keep them and by whoever
shows or changes them: the relays' Consul keys (:class:`RelayKeys`), cron schedules (:class:`CronSettings`),
the far-future tier (:class:`FarSettings`), the lifecycle events (:class:`EventSettings`), the audit trail
(:class:`AuditSettings`), the history tables (:class:`HistorySettings`) and the bounds of a queue's
configuration (:class:`QueueBounds`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings.common import CommaList
from jqcore.settings.kafka import ProduceBatching

__all__ = [
    "AuditSettings",
    "CronSettings",
    "EventSettings",
    "FarSettings",
    "HistorySettings",
    "QueueBounds",
    "RelayKeys",
]


class RelayKeys(BaseSettings):
    """Where the relays keep their state (``JOBQ_RELAY_*``): read by the relay itself (which adds its own
    settings, ``jqrelay.settings``) and by whoever shows or changes it (``jobq status``, the dashboard)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_RELAY_", extra="ignore", populate_by_name=True)

    topics: CommaList = Field(default_factory=list)
    """Topics to relay (comma-separated); empty: every topic of the routes (JOBQ_ROUTES)."""
    kv_prefix: str = "jobq"
    """Consul KV root: locks at ``<prefix>/locks/<topic>``, rate limits at ``<prefix>/rates/<topic>`` (per
topic) and ``<prefix>/queue-rates/<queue>`` (per queue)."""
    group_prefix: str = "jobq-relay"
    """Kafka consumer group per topic: ``<group_prefix>.<topic>`` (offsets are committed there)."""

    def lock_key(self, topic: str) -> str:
        return f"{self.kv_prefix}/locks/{topic}"

    def rate_key(self, topic: str) -> str:
        return f"{self.kv_prefix}/rates/{topic}"

    def queue_rates_folder(self) -> str:
        """Per-queue limits: one key per queue, ``<prefix>/queue-rates/<queue>``."""
        return f"{self.kv_prefix}/queue-rates/"

    def queue_rate_key(self, queue: str) -> str:
        return f"{self.queue_rates_folder()}{queue}"

    def group(self, topic: str) -> str:
        return f"{self.group_prefix}.{topic}"

    def lane_group(self, topic: str) -> str:
        """The consumer group whose committed offsets (and their metadata) say what of the topic's holding
        lane ``<topic>.held`` is drained and which queues wait there (``jqcore.lane``)."""
        return f"{self.group_prefix}.{topic}.held"


class CronSettings(BaseSettings):
    """Where cron schedules live (Consul KV ``<kv_prefix>/cron/<name>``): read by the scheduler service,
    written by ``jobq cron`` and the gateway's ``/v1/cron`` routes. The same root keeps the queues'
    configurations and the kinds' options (``jqruntime.stores.config``; ``jobq rebuild`` restores them)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_CRON_", extra="ignore")

    kv_prefix: str = Field("jobq", min_length=1)
    """Consul KV root: schedules at ``<prefix>/cron/<name>``, their state at ``<prefix>/cron-state/<name>``
    (the scheduler, the gateway and ``jobq cron``); queue configurations at ``<prefix>/queue-config/<q>`` and
    kind options at ``<prefix>/kind-config/<kind>/<queue or *>`` (the gateway, the dashboard, ``jobq
    rebuild``, and the relay: before its first write to a queue Redis does not know). Set it when several jobq
    installations share one Consul."""


class FarSettings(BaseSettings):
    """The far-future tier (``docs/scheduler.md``): jobs due later than ``horizon_s`` are kept in the
    compacted ``topic`` instead of Redis. Relays split them off, scheduler instances
    move them into the engine once they are due within the horizon, the gateway unschedules them."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_FAR_", extra="ignore")

    horizon_s: float = Field(3600.0, ge=0)
    """Jobs due further ahead than this go to the tier (0: the tier is off, every job goes to Redis). Lower it
    to keep less of a large far-future backlog in Redis's memory."""
    topic: str = Field("jobq.schedule", min_length=1)
    """The compacted schedule topic, keyed ``<queue>/<id>``. Set it when several jobq installations share one
    Kafka cluster."""
    partitions: int = Field(24, ge=1, le=1000)
    """Partitions of the schedule topic when jobq creates it (the unit the schedulers share: many more than
    instances, so rendezvous deals them evenly; a topic keeps the count it was created with). Raise it before
    creating the topic when many scheduler instances will share the tier."""

    @property
    def enabled(self) -> bool:
        return self.horizon_s > 0


class EventSettings(BaseSettings, ProduceBatching):
    """Lifecycle events (``docs/history.md``): every transition of a job is recorded in its queue's Redis
    stream by the script that makes it; scheduler instances ship each owned queue's stream to ``topic``
    (a record per partition and round: a JSON array of the events, each on its job id's partition;
    ``jqcore.events.pack``) and trim what Kafka acknowledged."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_EVENTS_", extra="ignore")

    topic: str = Field("jobq.events", min_length=1)
    """The lifecycle events topic (``docs/history.md``): records of JSON arrays of events, each on its job
    id's partition. Set it when several jobq installations share one Kafka cluster."""
    partitions: int = Field(6, ge=1, le=1000)
    """Partitions of the events topic when jobq creates it. Raise it before creating the topic when the
    events' readers need more parallel partitions."""
    batch: int = Field(1000, ge=1, le=100_000)
    """Events read from one queue's stream and produced per round (a record per partition). Raise it when a
    busy queue's events back up in Redis (fewer, larger rounds); lower it to keep each round short."""
    payload_max_bytes: int = Field(65_536, ge=0, le=524_288)
    """The job's args, meta and result an event that ends it carries into the history (the archive,
    ``docs/history.md``): each kept up to this many bytes of JSON; a longer one is cut there and named in the
    event's ``truncated`` (GET from the archive shows it; a job whose args or meta were cut cannot be replayed
    from the archive). 0: the history keeps no payload. Lower it (or 0) to keep less job data in the history
    (storage, personal data); raise it to replay larger jobs from the archive."""
    produce_linger_ms: int = Field(5, ge=0, le=1000)
    """How long the shipper's producer waits for more events before it sends a batch (librdkafka's
    ``linger.ms``): no request waits on it, so longer than the gateway's. Raise it for fewer, larger requests
    when many events are shipped."""


class AuditSettings(BaseSettings):
    """The audit trail (``docs/security.md``): every dashboard action, gateway admin call and CLI repair is
    a record in a capped Redis stream (what the dashboard's audit page reads) and also on ``topic`` in
    Kafka, which an admin of Redis cannot erase (``jqruntime.stores.audit``)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_AUDIT_", extra="ignore")

    topic: str = Field("jobq.audit", min_length=1)
    """The audit topic: one JSON record per action, keyed by its Redis stream id; retained by time (never
    compacted: a tombstone could erase a record). Set it when several jobq installations share one Kafka
    cluster."""
    retention_days: int = Field(365, ge=0, le=36_500)
    """How long the audit topic keeps a record (0: forever). Set it to what your audit policy keeps."""
    who: str = ""
    """Who the CLI's repair commands (rebuild, replay, reconcile) are recorded as; empty: the OS user. Set it
    where the OS user does not name the person (a shared admin host, a CI job)."""
    ship_timeout_ms: int = Field(30_000, ge=1000, le=600_000)
    """How long the producer retries sending one audit record to Kafka before counting it failed
    (``jobq_audit_shipped_total{outcome="failed"}``; the Redis record is kept either way). Raise it when Kafka
    may be away longer and the records must still reach it."""


class HistorySettings(BaseSettings):
    """The history tables (``docs/history.md``): built by ``jobq history run`` (PySpark), read by the CLI
    and the gateway's archive through DuckDB."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_HISTORY_", extra="ignore")

    path: str = ""
    """Folder of the tables ('' = the default local stack's: ``<JOBQ_HOME>/stacks/default/history``, where
    `jobq demo` keeps the history of that stack's events). Set it to the shared folder the history job writes
    and the servers read."""
    retention_days: int = Field(30, ge=1)
    """Days of events kept in the historic table (and of finished jobs in the current table). Set it to how
    far back your reports and replays must reach."""
    trigger_s: float = Field(5.0, gt=0)
    """How often the streaming query picks up new events. Raise it for fewer, larger micro-batches (less Spark
    work); lower it for a fresher history."""
    metrics_port: int | None = Field(None, ge=1, le=65_535)
    """``jobq history run`` serves Prometheus ``/metrics`` on ``JOBQ_METRICS_HOST``:PORT (the history's lag
    behind the events topic: ``jobq_history_lag_records``, ``jobq_history_progress_timestamp_seconds``). Set
    it so Prometheus can watch the history's lag."""
    query_memory_mb: int = Field(256, ge=16, le=1_048_576)
    """Memory one history query may use (DuckDB's ``memory_limit``, MiB) before it spills to
    ``query_temp_dir`` or fails. Each query of the gateway's archive and job search, the dashboard and the
    CLI has its own DuckDB; ``query_slots`` of them run at once. Raise it when large reports fail with an
    out-of-memory error; keep ``query_slots`` times this well under the pod's memory limit."""
    query_threads: int = Field(1, ge=1, le=64)
    """Threads one history query may use (DuckDB's ``threads``; its own default is every core, for each
    query). Raise it for faster ad-hoc reports on a machine that serves nothing else."""
    query_temp_dir: str = ""
    """Where a history query spills what does not fit in ``query_memory_mb`` ('' = ``jobq-history-spill``
    in the system's temporary folder, e.g. the pod's ``/tmp``; DuckDB's own default is a ``.tmp`` folder
    in the current directory, read-only in the chart's containers). Point it at a larger disk when
    ``query_temp_max_mb`` is raised."""
    query_temp_max_mb: int = Field(1024, ge=0)
    """Most disk one history query may spill to (MiB; 0: none, a query that does not fit in memory fails).
    Bounds the temporary folder's growth under many large queries."""
    query_timeout_s: float = Field(10.0, gt=0, le=3600)
    """Longest a history query of the gateway or the dashboard may run (archive look-ups, job searches,
    timelines): DuckDB is interrupted then and the request answers 504 ``history_timeout``. Raise it when
    legitimate searches over a large history time out; the CLI has no limit."""
    query_slots: int = Field(2, ge=1, le=64)
    """History queries one gateway or dashboard process runs at once, on a pool of threads of their own
    (never the one ``/readyz`` and Kafka metadata use); one more is a 429 (``gateway_busy`` on the
    gateway, ``history_busy`` on the dashboard) with ``Retry-After``. One token holds at most half of them
    (at least one), so one client cannot take the archive from the others. Raise it with
    ``query_memory_mb`` in mind."""

    @property
    def root(self) -> Path:
        return Path(self.path).expanduser() if self.path else _jobq_home() / "stacks" / "default" / "history"


def _jobq_home() -> Path:
    """``JOBQ_HOME`` (default ``~/.cache/jobq``), read here rather than from the local stack's package
    (``jqstack.paths.home``, which computes the same path): the kernel imports no other jobq package."""
    return Path(os.environ.get("JOBQ_HOME", Path.home() / ".cache" / "jobq")).expanduser()


class QueueBounds(BaseSettings):
    """What a queue's configuration may ask for, whoever asks (``JOBQ_QUEUE_MAX_*``): the gateway's
    ``PUT``/``PATCH /v1/queues/{queue}`` and the dashboard's settings form refuse more (400
    ``queue_config_invalid`` naming the field and the bound), so a queue's admin cannot lift the limits that
    keep one tenant from filling Redis for everyone (``docs/security.md``)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_QUEUE_MAX_", extra="ignore")

    retention_ms: int = Field(30 * 86_400_000, ge=0)
    """Longest a finished job's record stays in Redis. Raise it when teams must read finished jobs from
    Redis longer (the history keeps them anyway)."""
    dead_retention_ms: int = Field(90 * 86_400_000, ge=0)
    """Longest a dead letter stays in Redis. Raise it when teams repair dead letters later than that."""
    events_cap: int = Field(1_000_000, ge=0)
    """Most lifecycle events a queue's stream holds before shipping. Raise it when a queue's bursts pass it
    while the schedulers' shipping is slow."""
    memory_share: float = Field(0.5, gt=0, le=1)
    """A queue's ``memory_budget`` at most this share of Redis's ``maxmemory`` (no bound when Redis has none).
    Raise it for a deployment where one queue may rightly use most of Redis."""

    def problems(self, changes: Mapping[str, Any], maxmemory: int) -> list[tuple[str, str]]:
        """``(field, problem)`` for each value of ``changes`` past its bound (``maxmemory``: Redis's)."""
        bounds = {
            "retention_ms": (self.retention_ms, "RETENTION_MS"),
            "dead_retention_ms": (self.dead_retention_ms, "DEAD_RETENTION_MS"),
            "events_cap": (self.events_cap, "EVENTS_CAP"),
            "memory_budget": (int(self.memory_share * maxmemory) if maxmemory else None, "MEMORY_SHARE"),
        }
        out = []
        for name, (bound, setting) in bounds.items():
            value = changes.get(name)
            if bound is not None and isinstance(value, int) and value > bound:
                out.append((name, f"at most {bound} here (an operator's bound: JOBQ_QUEUE_MAX_{setting})"))
        return out
