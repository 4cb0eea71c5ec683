"""A worker pool's configuration and the signals it gives tests (:mod:`worker.pool`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jqcore.testsignal import TestSignal

__all__ = ["PoolConfig", "PoolSignals"]


@dataclass(frozen=True, slots=True)
class PoolConfig:
    queues: Sequence[str]
    concurrency: int = 10
    lease_ms: int | None = None
    """Lease per claim; ``None``: each job's own ``lease_ms``, else the queue's default."""
    grace_s: float = 30.0
    burst: bool = False
    """Exit once the queues hold nothing pending, delayed, blocked or running (scripts and tests)."""
    idle_wait_s: float = 30.0
    process_workers: int = 0
    """Size of the process pool for ``mode="process"`` handlers (0: the CPU count)."""
    filter: Mapping[str, str] | None = None
    """Claim only jobs whose ``meta`` has all these pairs (each key must be one of the queue's
    ``filter_keys``)."""
    unknown_kind_retry_ms: int = 5_000
    unknown_kind_dead_after_ms: int = 3_600_000
    prefetch: int = 0
    """Jobs claimed beyond the concurrency, each started the moment a handler's slot frees (no round trip
    to Redis between one job's end and the next one's start). Leased like running jobs; one that found no
    slot within half its lease is handed back (attempt refunded)."""


@dataclass
class PoolSignals:
    """What a pool reports to a test that listens (:mod:`jqcore.testsignal`)."""

    extended: TestSignal[list[str]]
    """Its lease keeper's extend rounds (:class:`worker.lease.LeaseSignals`)."""
    finished: TestSignal[tuple[str, str]] = field(default_factory=lambda: TestSignal("pool finished"))
    """A job's outcome was written and acknowledged by Redis (a graph node's also handed to its graph):
    (job id, its metric label: ``succeeded``, ``failed``, ``retried``, ``timeout``, ``canceled``...)."""
    quiet: TestSignal[bool] = field(default_factory=lambda: TestSignal("pool quiet"))
    """The claim loop went quiet (True: it left the hand-off list and claims nothing) or claims again."""
