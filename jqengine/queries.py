"""Reads (plain commands: they change nothing), the blocking waits and the lifecycle event streams of
the queues, over :mod:`jqengine.reads` and :mod:`jqengine.waiting`; the jobs' leases (what a
dispatcher's callbacks check)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jqengine import codes, farreads, memory, reads, signals, waiting
from jqengine.core import EngineCore
from jqengine.keys import QueueKeys
from jqengine.memory import QueueMemory
from jqengine.models import JobInfo, JobLease, QueueConfig, QueueDepth, StreamEvent
from jqengine.redisconn import text
from jqengine.signals import QueueSignals

__all__ = ["Queries"]


class Queries(EngineCore):
    """Reads, waits and event streams (a part of :class:`jqengine.Engine`)."""

    async def get_job(self, queue: str, job_id: str) -> JobInfo | None:
        """The job as an admin sees it; None when there is no such job (or GC removed it)."""
        return await reads.get_job(self._client, queue, job_id)

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[JobInfo | None]:
        """Many jobs of one queue, pipelined (benchmarks read thousands)."""
        return await reads.get_jobs(self._client, queue, ids)

    async def job_fields(
        self, queue: str, ids: Sequence[str], names: Sequence[str]
    ) -> list[list[bytes | None]]:
        """Raw fields of the jobs' records (None where absent), one pipelined read."""
        return await reads.job_fields(self._client, queue, ids, names)

    async def far_jobs(self, queue: str, ids: Sequence[str]) -> list[JobInfo | None]:
        """Far-future jobs by id (``list_ids(queue, "far")``), ``scheduled`` with their ``run_at``."""
        return await reads.far_jobs(self._client, queue, ids)

    async def far_next(self, queue: str) -> int | None:
        """The earliest ``run_at`` of the queue's far-future jobs (None: none, or too many to read)."""
        return await farreads.far_next(self._client, queue)

    async def queues_holding(self, queues: Sequence[str], job_id: str) -> list[str]:
        """Which of ``queues`` hold a job with this id (the dashboard's search by exact id)."""
        return await reads.queues_holding(self._client, queues, job_id)

    async def depth(
        self, queue: str, filter: Mapping[str, str] | None = None, *, now: int | None = None
    ) -> QueueDepth:
        """Jobs per state (``by_filter``: pending jobs having every declared ``meta`` pair of ``filter``,
        exact; :class:`FilterInvalid` for a key the queue does not index)."""
        return await reads.depth(self._client, queue, filter, now=now or await self.now())

    async def list_ids(
        self, queue: str, state: str, offset: int = 0, limit: int = 100, *, newest: bool = False
    ) -> tuple[list[str], int]:
        """Ids of the jobs in one listed state (``reads.LISTED``: pending, delayed, far, running, done,
        dead) in that state's order (far: unordered, each page by run_at), and the state's total: the
        dashboard's lists and searches."""
        return await reads.list_ids(self._client, queue, state, offset, limit, newest=newest)

    async def dead_counts(self, queues: Sequence[str]) -> dict[str, int]:
        """Errored jobs per queue (the dead-letter lists' sizes), pipelined."""
        return await reads.dead_counts(self._client, queues)

    async def dead_list(self, queue: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
        """Errored jobs, oldest first."""
        return await reads.dead_list(self._client, queue, offset, limit)

    async def leases(self, queue: str, ids: Sequence[str]) -> list[JobLease | None]:
        """Each job's state, attempt, kind and lease token (None: no such job), one pipelined round trip.
        A job not running has the token its current attempt wrote its outcome with ('' if none): a write
        sent again with it is answered as the first time (the scripts' idempotent retries)."""
        if not ids:
            return []
        keys = QueueKeys(queue)
        pipe = self._client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(keys.job(job_id), "state", "attempt", "token", "kind", "history")
        async with codes.redis_errors("leases"):
            rows = await pipe.execute()
        out: list[JobLease | None] = []
        for state, attempt, token, kind, history in rows:
            if state is None:
                out.append(None)
                continue
            n = int(attempt or 0)
            owner = text(token) if token else _written_by(history, n)
            out.append(JobLease(text(state), n, owner, text(kind or b"")))
        return out

    async def memory(self, queue: str) -> QueueMemory:
        """The queue's estimated share of Redis memory and its ``memory_budget`` (:mod:`.memory`)."""
        return await memory.queue_memory(self._client, queue)

    async def queue_config(self, queue: str) -> QueueConfig:
        return await reads.queue_config(self._client, queue)

    async def configured(self, queues: list[str]) -> set[str]:
        """Which of ``queues`` have a configuration set in Redis (not only the defaults)."""
        return await reads.configured(self._client, queues)

    async def queue_signals(self, queues: Sequence[str], *, now: int | None = None) -> list[QueueSignals]:
        """Depths, the head's wait since it was due, pause and outcome counters of ``queues``: two
        pipelined round trips, O(1) a queue (:mod:`jqengine.signals`; the scheduler's metrics)."""
        return await signals.queue_signals(self._client, queues, now or await self.now())

    async def queue_stats(self, queue: str) -> dict[str, int]:
        """The queue's lifetime counters (enqueued, duplicates, claimed, completed, errored, ...)."""
        return await reads.queue_stats(self._client, queue)

    async def kinds(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        """Every configured job type, its defaults and its options per queue (see :func:`reads.kinds`)."""
        return await reads.kinds(self._client, queues)

    # ---- waits ------------------------------------------------------------------------------------
    async def wait_for_work(self, queues: Sequence[str], timeout_s: float) -> str | None:
        """Block until one of ``queues`` signals work; that queue, or None after ``timeout_s``."""
        return await waiting.wait_for_work(self._client, queues, timeout_s)

    async def past_due(self, queue: str, late_ms: int = 1000, *, now: int | None = None) -> int:
        """Delayed jobs past ``run_at`` and leases past their deadline by more than ``late_ms``."""
        return await reads.past_due(self._client, queue, late_ms, now or await self.now())

    async def wait_for_due(self, queues: Sequence[str], timeout_s: float) -> str | None:
        """Block until a script signals an earlier due time in one of ``queues`` (that queue), or
        ``timeout_s`` passed (None)."""
        return await waiting.wait_for_due(self._client, queues, timeout_s)

    # ---- lifecycle events (jqcore.events; shipped to Kafka by the scheduler service) -----------------
    async def events(self, queue: str, count: int = 1000) -> list[StreamEvent]:
        """The oldest unshipped events of ``queue``: whole stream entries (one script call's events
        each) until at least ``count`` events (``events_read.lua``)."""
        out: list[StreamEvent] = []
        for entry, fields in await self._run("events_read", queue, [count], None):
            out.extend(reads.decode_entry(entry, fields, queue))
        return out

    async def trim_events(self, queue: str, shipped: Sequence[StreamEvent]) -> int:
        """Forget ``shipped`` (the oldest events :meth:`events` read; Kafka has them): the stream's
        entries up to the last one's, counted off its ``events_waiting``. Returns the entries removed."""
        if not shipped:
            return 0
        entries, upto = len({e.entry for e in shipped}), reads.next_entry(shipped[-1].entry)
        reply = await self._run("events_trim", queue, [upto, entries, len(shipped)], None)
        return int(reply[1])

    async def events_backlog(self, queues: Sequence[str]) -> dict[str, int]:
        return await reads.events_backlog(self._client, queues)

    async def wait_for_events(self, queues: Sequence[str], timeout_s: float) -> bool:
        return await waiting.wait_for_events(self._client, queues, timeout_s)

    def block_limit_s(self, wanted_s: float) -> float:
        """``wanted_s`` capped below the client's socket timeout (see :func:`waiting.block_limit_s`)."""
        return waiting.block_limit_s(self._client, wanted_s)


def _written_by(history: bytes | str | None, attempt: int) -> str:
    """The lease token attempt ``attempt`` wrote its outcome with, from the job's history ('' if none)."""
    try:
        entries = orjson.loads(history or b"[]")
    except orjson.JSONDecodeError:
        return ""
    for entry in reversed(entries if isinstance(entries, list) else []):
        if isinstance(entry, dict) and entry.get("attempt") == attempt and entry.get("token"):
            return str(entry["token"])
    return ""
