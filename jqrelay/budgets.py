"""Per-queue Redis memory budgets: one queue's backlog holds only the batches that carry its jobs, never
the whole relay (the isolation of many teams on one jobq).

Every queue has a budget: its own ``memory_budget`` (queue configuration, bytes) or else
``JOBQ_RELAY_QUEUE_MEMORY_SHARE`` of Redis's ``maxmemory`` (none without a ``maxmemory``). Before a batch is
written, each queue it carries is checked against its budget with the engine's estimate of the queue's
memory (:meth:`jqengine.Engine.memory`, sampled at most every :data:`SAMPLE_S` per queue). A queue at or
over its budget holds the batch — Kafka keeps the jobs, the partition waits, the offsets stay uncommitted —
until workers drained the queue below :data:`RESUME_AT` of its budget (hysteresis, so it does not flap).
Relays of other topics, and batches of the same topic without that queue, keep flowing: isolation is per
topic, so a tenant that must never wait on another's backlog gets a topic of its own (``JOBQ_ROUTES``), as
with the queue rate limits. The global memory guard (:mod:`jqrelay.backpressure`) stays the last margin.

While a queue is over, ``jobq_relay_queue_over_budget{queue}`` is 1 (the alert ``JobqQueueOverMemoryBudget``),
and its held batches count as ``jobq_relay_held_batches{reason="queue_memory"}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from jqcore import metrics
from jqcore.log import get_logger
from jqcore.testsignal import TestSignal
from jqengine import Engine
from jqrelay.backpressure import MemoryGuard, held

__all__ = ["RESUME_AT", "SAMPLE_S", "BudgetSignals", "QueueBudgets", "budget_of", "is_over", "projected"]

log = get_logger("jqrelay.budgets")

SAMPLE_S = 2.0
"""A queue's memory is estimated at most this often (two pipelined round trips on its slot)."""
RESUME_AT = 0.9
"""A queue over its budget is relayed again once its memory is below this fraction of the budget."""
JOB_OVERHEAD = 300
"""Bytes a job record takes in Redis beyond its envelope, at the least (its hash's other fields, the
index entries): what a queue without a sample of its own is projected to grow by per job."""


def budget_of(configured: int, share: float, maxmemory: int) -> int:
    """The queue's budget in bytes: its own when configured, else ``share`` of ``maxmemory`` (0: none)."""
    if configured > 0:
        return configured
    return int(share * maxmemory) if maxmemory > 0 and share < 1 else 0


def is_over(was_over: bool, used: int, budget: int) -> bool:
    """Whether the queue is (still) over its budget: over at the budget, back under :data:`RESUME_AT`."""
    if budget <= 0:
        return False
    return used >= RESUME_AT * budget if was_over else used >= budget


@dataclass
class BudgetSignals:
    """What the budgets report to a test that listens (:mod:`jqcore.testsignal`)."""

    over: TestSignal[tuple[str, bool]] = field(default_factory=lambda: TestSignal("queue over budget"))
    """(queue, True) when a queue went over its budget, (queue, False) when it came back under."""
    sampled: TestSignal[tuple[str, int, int]] = field(default_factory=lambda: TestSignal("queue sampled"))
    """(queue, estimated bytes, budget) after each sample."""


@dataclass
class _Sample:
    at: float = float("-inf")
    used: int = 0
    """The estimate of the last sample."""
    per_job: float = 0.0
    """Bytes per job record then (0: the queue held none)."""
    added: int = 0
    """Bytes the relay wrote into the queue since (projected: :func:`projected`)."""
    budget: int = 0
    over: bool = False


def projected(jobs: int, size: int, per_job: float) -> int:
    """Redis bytes that ``jobs`` new jobs of ``size`` record bytes will take: the queue's own mean per job
    when it has one, never less than the records plus :data:`JOB_OVERHEAD` each."""
    return max(size + JOB_OVERHEAD * jobs, round(per_job * jobs))


class QueueBudgets:
    """The relay's view of every queue it writes: estimated memory, budget, over or not (shared by the
    topic relays of one process). Between two samples of a queue, what the relay wrote into it counts too,
    so a fast relay cannot run a sample interval's worth of jobs past the budget."""

    def __init__(
        self,
        engine: Engine,
        guard: MemoryGuard,
        share: float,
        sample_s: float = SAMPLE_S,
        signals: BudgetSignals | None = None,
    ) -> None:
        self.engine, self.guard, self.share, self.sample_s = engine, guard, share, sample_s
        self.signals = signals if signals is not None else BudgetSignals()
        self._samples: dict[str, _Sample] = {}

    async def _refresh(self, queue: str, s: _Sample) -> None:
        """A new estimate when the last is older than ``sample_s`` (on a Redis error the last stands: the
        write will meet the error anyway)."""
        now = time.monotonic()
        if now - s.at < self.sample_s:
            return
        try:
            found = await self.engine.reads.memory(queue)
        except RedisError as exc:
            log.warning("queue memory not sampled", queue=queue, error=repr(exc))
            return
        s.at, s.used, s.added = now, found.bytes, 0
        s.per_job = found.bytes / found.jobs if found.jobs else 0.0
        s.budget = budget_of(found.budget, self.share, self.guard.maxmemory)
        metrics.child(metrics.RELAY_QUEUE_MEMORY, queue).set(found.bytes)
        metrics.child(metrics.RELAY_QUEUE_BUDGET, queue).set(s.budget)
        self.signals.sampled.signal((queue, found.bytes, s.budget))

    async def _over(self, queue: str) -> bool:
        """Whether ``queue`` is over its budget now (the last estimate plus what was written since)."""
        s = self._samples.setdefault(queue, _Sample())
        await self._refresh(queue, s)
        over = is_over(s.over, s.used + s.added, s.budget)
        if over != s.over:
            s.over = over
            metrics.child(metrics.RELAY_QUEUE_OVER, queue).set(int(over))
            self.signals.over.signal((queue, over))
            used = s.used + s.added
            if over:
                log.warning(
                    "queue over its memory budget; its jobs wait in Kafka",
                    queue=queue,
                    used=used,
                    budget=s.budget,
                )
            else:
                log.info(
                    "queue back under its memory budget; relaying it again",
                    queue=queue,
                    used=used,
                    budget=s.budget,
                )
        return over

    async def over(self, queues: Iterable[str]) -> list[str]:
        """The queues among ``queues`` that are over their budgets."""
        return [q for q in sorted(set(queues)) if await self._over(q)]

    async def acquire(
        self,
        topic: str,
        sizes: Mapping[str, tuple[int, int]],
        keep_waiting: Callable[[], bool] = lambda: True,
    ) -> bool:
        """Wait until no queue of this batch (``sizes``: queue → its jobs and their record bytes) is over
        its budget, then count the batch as written into each; False as soon as ``keep_waiting()`` says to
        give up (the term ended, the relay stops). The wait counts as ``topic``'s batch held."""
        if await self.over(sizes):
            with held(topic, "queue_memory"):
                while await self.over(sizes):
                    if not keep_waiting():
                        return False
                    await asyncio.sleep(self.sample_s)
        for queue, (jobs, size) in sizes.items():
            s = self._samples[queue]
            s.added += projected(jobs, size, s.per_job)
        return True
