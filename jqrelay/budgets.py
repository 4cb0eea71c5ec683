"""Per-queue Redis memory budgets, sized so that the relay's own writes never reach the global guard.

A queue's memory here is its unfinished jobs' (pending, delayed, running, blocked; their records and
indexes): its finished ones wait for GC (``retention_ms``), not for workers, so holding the queue would not
free them — they count in the rest of Redis, like anything else the relay does not write.

Every queue has a cap: its own ``memory_budget`` (queue configuration, bytes) or else
``JOBQ_RELAY_QUEUE_MEMORY_SHARE`` (0.35) of Redis's ``maxmemory`` (none without a ``maxmemory``). Above the
**pool** (``JOBQ_RELAY_QUEUE_MEMORY_POOL``, 0.70 of ``maxmemory``) there is fair-share pressure: a queue's
budget is then at most ``(pool − rest) / n`` (n: the queues holding at least 1 % of ``maxmemory``, counted
over every relay process through a shared hash; rest: what Redis holds besides them), so the big backlogs
stop growing with Redis at the pool and the band up to the **ceiling**
is left to the small queues. At the ceiling (``JOBQ_RELAY_MEMORY_SLOW_AT`` − :data:`CEILING_MARGIN`) the
relay writes no job at all. Between two samples of Redis's memory, what the relay wrote counts too, so the
relay's writes stop short of the global guard's slow mark (:mod:`jqrelay.backpressure`), which stays the
last margin for what others write (graph releases, tails, the gateway's idempotency keys).

None of it blocks: a queue over its budget **steps aside** — its jobs go to the topic's holding lane in
Kafka (:mod:`jqrelay.lane`) and come back when workers drained it below :data:`RESUME_AT` of its budget
(hysteresis, so it does not flap) — and the other queues of the topic keep flowing. Queue estimates come
from :meth:`jqengine.Engine.memory`, refreshed at most every :data:`SAMPLE_S` per queue before a batch is
planned (:meth:`QueueBudgets.refresh`); the decisions themselves (:meth:`QueueBudgets.over_now`) are
synchronous.

While a queue is over, ``jobq_relay_queue_over_budget{queue}`` is 1 (the alert
``JobqQueueOverMemoryBudget``), and the holding lane says it is held for ``memory``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from jqcore import metrics
from jqcore.keys import QUEUE_MEMORY_KEY
from jqcore.log import get_logger
from jqcore.testsignal import TestSignal
from jqengine import Engine, RedisClient
from jqrelay.backpressure import MemoryGuard
from jqrelay.settings import CEILING_MARGIN

__all__ = [
    "BIG_SHARE",
    "CEILING_MARGIN",
    "RESUME_AT",
    "SAMPLE_S",
    "BudgetSignals",
    "QueueBudgets",
    "budget_of",
    "effective_budget",
    "is_over",
    "projected",
]

log = get_logger("jqrelay.budgets")

SAMPLE_S = 2.0
"""A queue's memory is estimated at most this often (two pipelined round trips on its slot)."""
RESUME_AT = 0.9
"""A queue over its budget is relayed again once its memory is below this fraction of the budget."""
JOB_OVERHEAD = 300
"""Bytes a job record takes in Redis beyond its envelope, at the least (its hash's other fields, the
index entries): what a queue without a sample of its own is projected to grow by per job."""
BIG_SHARE = 0.01
"""Under pressure, the pool is shared by the queues holding at least this share of ``maxmemory``."""
PRESSURE_ENDS_AT = 0.95
"""Pressure, once on, lasts until Redis's memory is below this fraction of the pool."""
SHARED_STALE_S = 30.0
"""Another relay's sample of a queue counts for the fair share this long."""


def budget_of(configured: int, share: float, maxmemory: int) -> int:
    """The queue's cap in bytes: its own when configured, else ``share`` of ``maxmemory`` (0: none)."""
    if configured > 0:
        return configured
    return int(share * maxmemory) if maxmemory > 0 and share < 1 else 0


def effective_budget(cap: int, pressure: bool, pool_bytes: int, big_queues: int) -> int:
    """The budget a queue is held to now: its cap, or under pressure at most the fair level
    ``pool_bytes / big_queues`` (``pool_bytes``: what of the pool is left to the big queues; a queue without
    a cap gets the fair level then; 0: none)."""
    if not pressure:
        return cap
    fair = max(1, pool_bytes // max(1, big_queues))
    return min(cap, fair) if cap > 0 else fair


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
    cap: int = 0
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
        pool: float = 0.70,
        sample_s: float = SAMPLE_S,
        signals: BudgetSignals | None = None,
        shared: RedisClient | None = None,
    ) -> None:
        """``shared``: the Redis client whose hash (:data:`jqcore.keys.QUEUE_MEMORY_KEY`) every relay process
        publishes its samples to, so that all count the same queues for the fair share (None: this
        process's samples only)."""
        self.engine, self.guard, self.share, self.pool, self.sample_s = engine, guard, share, pool, sample_s
        self.signals = signals if signals is not None else BudgetSignals()
        self._samples: dict[str, _Sample] = {}
        self._shared_client = shared
        self._others: dict[str, int] = {}
        """Other relays' latest samples (queue → bytes), read with this process's samples."""
        self._others_at = float("-inf")
        self.pressure = False

    @property
    def ceiling(self) -> float:
        """The share of ``maxmemory`` above which the relay writes no job."""
        return max(self.pool, self.guard.slow_at - CEILING_MARGIN)

    # ---- samples (async, before a batch is planned) ------------------------------------------------
    async def refresh(self, queues: Iterable[str]) -> None:
        """New estimates of ``queues`` whose last is older than ``sample_s`` (on a Redis error the last
        stands: the write will meet the error anyway), then the pressure and the over-budget marks."""
        now = time.monotonic()
        stale = [
            q
            for q in dict.fromkeys(queues)
            if now - self._samples.setdefault(q, _Sample()).at >= self.sample_s
        ]
        for queue in stale:
            await self._sample(queue, self._samples[queue], now)
        if stale:
            await self._share(stale, now)
        self._pressure()
        for queue in stale:
            self._judge(queue)

    async def _sample(self, queue: str, s: _Sample, now: float) -> None:
        try:
            found = await self.engine.reads.memory(queue)
        except RedisError as exc:
            log.warning("queue memory not sampled", queue=queue, error=repr(exc))
            return
        # what holding the queue can change: its unfinished jobs (finished ones wait for GC, events for
        # the shipper: not for its workers)
        unfinished, jobs = found.bytes - found.retained, found.jobs - found.finished_jobs
        s.at, s.used, s.added = now, unfinished, 0
        s.per_job = unfinished / jobs if jobs > 0 else 0.0
        s.cap = budget_of(found.budget, self.share, self.guard.maxmemory)
        metrics.child(metrics.RELAY_QUEUE_MEMORY, queue).set(unfinished)
        metrics.child(metrics.RELAY_QUEUE_BUDGET, queue).set(self.budget(queue))
        self.signals.sampled.signal((queue, unfinished, self.budget(queue)))

    async def _share(self, queues: list[str], now: float) -> None:
        """Publish this process's fresh samples and, once per ``sample_s``, read every relay's."""
        client = self._shared_client
        if client is None or self.guard.maxmemory <= 0:
            return
        at_ms = int(time.time() * 1000)
        try:
            await client.hset(
                QUEUE_MEMORY_KEY, mapping={q: f"{self._samples[q].used}:{at_ms}" for q in queues}
            )
            if now - self._others_at >= self.sample_s:
                raw = await client.hgetall(QUEUE_MEMORY_KEY)
                self._others_at = now
                self._others = _fresh(raw, at_ms)
        except RedisError as exc:
            log.warning("shared queue memory samples not exchanged", error=repr(exc))

    def _pressure(self) -> None:
        pool = self.pool * self.guard.maxmemory
        usage = self.guard.used_bytes + self.guard.added
        if pool <= 0:
            self.pressure = False
        elif not self.pressure and usage >= pool:
            self.pressure = True
            log.warning(
                "Redis memory over the queues' pool: big queues get a fair share", big=self.big_queues()
            )
        elif self.pressure and usage < PRESSURE_ENDS_AT * pool:
            self.pressure = False
            log.info("Redis memory back under the queues' pool")

    def _big(self) -> list[int]:
        """The memory of each queue holding at least :data:`BIG_SHARE` of ``maxmemory`` (every relay's
        samples)."""
        mine = {q: s.used + s.added for q, s in self._samples.items() if s.at > float("-inf")}
        every = {**self._others, **mine}
        floor = BIG_SHARE * self.guard.maxmemory
        return [used for used in every.values() if used >= floor]

    def big_queues(self) -> int:
        """How many queues hold at least :data:`BIG_SHARE` of ``maxmemory`` (every relay's samples)."""
        return len(self._big())

    def budget(self, queue: str) -> int:
        """The budget ``queue`` is held to now (its cap, or the fair share under pressure; 0: none). The big
        queues share what of the pool the rest of Redis (its own overhead, the small queues, what the relay
        does not write) leaves them, so that under pressure Redis stays near the pool, under the ceiling."""
        s = self._samples.get(queue)
        cap = s.cap if s is not None else budget_of(0, self.share, self.guard.maxmemory)
        big = self._big()
        rest = max(0, self.guard.used_bytes + self.guard.added - sum(big))
        pool = max(0, int(self.pool * self.guard.maxmemory) - rest)
        return effective_budget(cap, self.pressure, pool, len(big))

    def _judge(self, queue: str) -> bool:
        s = self._samples[queue]
        used, budget = s.used + s.added, self.budget(queue)
        over = is_over(s.over, used, budget)
        if over != s.over:
            s.over = over
            metrics.child(metrics.RELAY_QUEUE_OVER, queue).set(int(over))
            self.signals.over.signal((queue, over))
            if over:
                log.warning(
                    "queue over its memory budget; its jobs wait in Kafka",
                    queue=queue,
                    used=used,
                    budget=budget,
                    pressure=self.pressure,
                )
            else:
                log.info("queue back under its memory budget", queue=queue, used=used, budget=budget)
        return over

    # ---- decisions (synchronous) ---------------------------------------------------------------------
    def over_now(self, queue: str) -> bool:
        """Whether ``queue`` must step aside for memory now: over its budget (by the last sample plus what
        was written since), or Redis at the ceiling."""
        if queue in self._samples and self._judge(queue):
            return True
        return self.at_ceiling()

    def at_ceiling(self) -> bool:
        """Whether Redis's memory (the last sample plus what the relay wrote since) reached the ceiling."""
        limit = self.guard.maxmemory
        return limit > 0 and self.guard.used_bytes + self.guard.added >= self.ceiling * limit

    def account(self, queue: str, jobs: int, size: int) -> None:
        """Count ``jobs`` jobs of ``size`` record bytes as written into ``queue`` (and into Redis)."""
        s = self._samples.setdefault(queue, _Sample())
        grown = projected(jobs, size, s.per_job)
        s.added += grown
        self.guard.added += grown


def _fresh(raw: Mapping[bytes | str, bytes | str], now_ms: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in raw.items():
        queue = k.decode() if isinstance(k, bytes) else k
        text = v.decode() if isinstance(v, bytes) else v
        used, _, at = text.partition(":")
        try:
            if now_ms - int(at) <= SHARED_STALE_S * 1000:
                out[queue] = int(used)
        except ValueError:
            continue
    return out
