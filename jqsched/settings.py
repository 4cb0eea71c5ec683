"""The scheduler service's settings (``JOBQ_SCHEDULER_*``)."""

from __future__ import annotations

import fnmatch
import os
import socket

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings.common import CommaList

__all__ = ["SchedulerSettings"]


class SchedulerSettings(BaseSettings):
    """The scheduler service (``jqsched``, ``jobq scheduler``, ``docs/scheduler.md``): the timers (delays,
    retries, expired leases, garbage collection), cron, the far-future tier, event shipping and graph
    repair of the queues its group keeps."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_SCHEDULER_", extra="ignore", populate_by_name=True)

    name: str = Field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}",
        json_schema_extra={"doc_default": "`<host>:<pid>`"},
    )
    """This instance's name among the group's members (shown by ``jobq status``)."""
    group: str = Field("default", min_length=1)
    """Instances of one group split its queues among themselves; a separate group keeps its own. Give some
    queues a group of their own to keep their timers on instances of their own."""
    queues: CommaList = Field(default_factory=list)
    """Queue name patterns (``fnmatch``, comma-separated) whose timers this group keeps; empty: all. Set it to
    give a group part of the queues."""
    beat_s: float = Field(1.0, gt=0, le=60)
    """Seconds between heartbeats; each beat also re-reads the queue list (new queues are kept from the next
    beat on). Lower it (with ``stale_s``) for faster failover."""
    stale_s: float = Field(3.0, gt=0, le=600)
    """Seconds without a heartbeat after which an instance is dead and its queues are re-dealt (at least twice
    ``beat_s``). Lower it for faster failover; raise it when Redis's latency spikes make live instances look
    dead."""
    batch: int = Field(1000, ge=1, le=50_000)
    """Jobs moved per script call; more due than this: the queue is stepped again at once. Lower it when one
    script call must hold Redis shorter (latency-sensitive neighbours); raise it to catch up a large due
    backlog in fewer calls."""
    late_after_s: float = Field(1.0, ge=0)
    """A delayed job promoted later than this after its run_at counts in ``jobq_scheduler_late_total``. Set it
    to the lateness your users notice."""
    far: bool = True
    """Move far-future jobs from the schedule topic (JOBQ_FAR_*; needs Kafka) for the partitions this instance
    owns. Turn it off on instances that must not need Kafka, or to leave the tier to other instances."""
    cron: bool = True
    """Fire the cron schedules this instance owns (Consul KV, ``JOBQ_CRON_KV_PREFIX``). Turn it off on
    instances that must not need Consul, or to leave cron to other instances."""
    events: bool = True
    """Ship the owned queues' lifecycle events to Kafka (``JOBQ_EVENTS_*``; needs Kafka). Turn it off on
    instances that must not need Kafka, or when no history is kept."""
    series_every_s: float = Field(60.0, ge=1, le=3600)
    """Seconds between two samples of the owned queues' counters (the dashboard's rate charts, kept 25 h in
    ``jobq:series:<queue>``). Lower it for finer charts (more samples in Redis), raise it for fewer."""
    metrics_port: int | None = Field(None, ge=1, le=65_535)
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` on ``JOBQ_METRICS_HOST``:PORT. Set it so probes and
    Prometheus can reach the process."""

    @model_validator(mode="after")
    def _beats_before_stale(self) -> SchedulerSettings:
        if self.stale_s < 2 * self.beat_s:
            raise ValueError(
                "JOBQ_SCHEDULER_STALE_S must be at least twice JOBQ_SCHEDULER_BEAT_S "
                "(one late beat would otherwise drop a live instance)"
            )
        return self

    def keeps(self, queue: str) -> bool:
        """Whether ``queue`` is this group's (matches one of ``queues``; every queue when empty)."""
        return not self.queues or any(fnmatch.fnmatchcase(queue, p) for p in self.queues)
