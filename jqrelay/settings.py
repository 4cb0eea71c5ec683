"""The relay's settings (``JOBQ_RELAY_*``)."""

from __future__ import annotations

import os
import socket

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from jqcore.settings.pipeline import RelayKeys

CEILING_MARGIN = 0.02
"""The relay writes no job above ``memory_slow_at`` − this (never below the pool; ``jqrelay.budgets``)."""

__all__ = ["RelaySettings"]


class RelaySettings(RelayKeys):
    """Where the relay keeps its state (:class:`jqcore.settings.pipeline.RelayKeys`) and how it runs."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_RELAY_", extra="ignore", populate_by_name=True)

    holder: str = Field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}",
        json_schema_extra={"doc_default": "`<host>:<pid>`"},
    )
    """This process's name in the Consul locks (shown by ``jobq status``)."""
    batch: int = Field(500, ge=1, le=50_000)
    """Records per consume call, written with one engine call per queue."""
    session_ttl_s: int = Field(15, ge=10, le=86_400)
    """TTL of the Consul session holding the relay's locks."""
    lock_delay_s: int = Field(5, ge=0, le=60)
    """Consul lock-delay: how long a lock lost with its session stays untaken."""
    shadow: bool = False
    """Read and count, write nothing into Redis, commit under a separate group (double-write migrations)."""
    memory_slow_at: float = Field(0.80, gt=0, lt=1)
    """Redis used/maxmemory above which the relay slows down..."""
    memory_stop_at: float = Field(0.90, gt=0, lt=1)
    """...and above which it stops writing until workers drained below ``memory_slow_at``."""
    queue_memory_share: float = Field(0.35, gt=0, le=1)
    """A queue's memory budget unless its configuration sets ``memory_budget``: this share of Redis's
    ``maxmemory``; a queue over its budget steps aside into the topic's holding lane in Kafka, its
    neighbours flow (1: no default budget). Two backlogs at this share stay within the pool."""
    queue_memory_pool: float = Field(0.70, gt=0, lt=1)
    """Above this share of ``maxmemory`` the big queues share the pool fairly: a queue holding more than
    ``(pool − rest) / n`` (n: the queues holding 1 % or more; rest: what Redis holds besides them) steps
    aside until workers drained it, so the room up to the ceiling (``memory_slow_at`` − 0.02, where the
    relay writes no job) is left to the small queues and relayed jobs never reach the slow mark."""
    wait_replicas: int | None = Field(None, ge=0, le=16, json_schema_extra={"doc_default": "auto"})
    """Replicas that must hold a batch's writes (``WAIT`` on each Redis master the batch wrote) before its
    Kafka offsets are committed. Unset: 1 on each master that reports a connected replica (a Redis Cluster
    with replicas, a Redis with a replica), none elsewhere; 0: off, and a master killed right after a
    commit can take the batch's last writes with it when its replica is promoted."""
    wait_replicas_ms: int = Field(1000, ge=10, le=30_000)
    """How long one ``WAIT`` waits; a batch not confirmed in time is written again (what Redis kept counts
    as a duplicate) and waited for again, with backoff; nothing is committed meanwhile."""
    metrics_port: int | None = Field(None, ge=1, le=65_535)
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` on ``JOBQ_METRICS_HOST``:PORT."""

    @model_validator(mode="after")
    def _order(self) -> RelaySettings:
        if self.memory_slow_at >= self.memory_stop_at:
            raise ValueError("JOBQ_RELAY_MEMORY_SLOW_AT must be below JOBQ_RELAY_MEMORY_STOP_AT")
        if self.queue_memory_pool >= self.memory_slow_at:
            raise ValueError("JOBQ_RELAY_QUEUE_MEMORY_POOL must be below JOBQ_RELAY_MEMORY_SLOW_AT")
        if self.queue_memory_share < 1 and self.queue_memory_share > self.queue_memory_pool:
            raise ValueError(
                "JOBQ_RELAY_QUEUE_MEMORY_SHARE must be at most JOBQ_RELAY_QUEUE_MEMORY_POOL (or 1: none)"
            )
        return self
