"""``engine.reads``: what the queues hold, read with plain commands that change nothing (over the
functions of :mod:`jqengine.reads`; many records' fields with one read-only script): jobs, depths, lists,
dead letters, configuration, counters, memory, signals, and the jobs' leases (what a dispatcher's callbacks
check)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jqengine import codes, farreads, memory, reads, signals
from jqengine.core import Part
from jqengine.keys import QueueKeys
from jqengine.memory import QueueMemory
from jqengine.models import JobInfo, JobLease, QueueConfig, QueueDepth
from jqengine.redisconn import text
from jqengine.signals import QueueSignals

__all__ = ["Reads"]


class Reads(Part):
    """Reads of queue state (``engine.reads``)."""

    async def queues(self) -> list[str]:
        """Every known queue, by name."""
        return await self._core.queues()

    async def get_job(self, queue: str, job_id: str) -> JobInfo | None:
        """The job as an admin sees it; None when there is no such job (or GC removed it)."""
        return await reads.get_job(self._client, queue, job_id)

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[JobInfo | None]:
        """Many jobs of one queue, pipelined (benchmarks read thousands)."""
        return await reads.get_jobs(self._client, queue, ids)

    async def job_fields(
        self, queue: str, ids: Sequence[str], names: Sequence[str]
    ) -> list[list[bytes | None]]:
        """Raw fields of the jobs' records (None where absent, or no record), one script call
        (``job_fields.lua``: one command on the wire, not one a job)."""
        if not ids:
            return []
        flat = await self._core.run("job_fields", queue, [len(names), *names, *ids], None)
        n = len(names)
        return [
            [v if isinstance(v, bytes) else None for v in flat[i : i + n]] for i in range(0, len(flat), n)
        ]

    async def far_jobs(self, queue: str, ids: Sequence[str]) -> list[JobInfo | None]:
        """Far-future jobs by id (``list_ids(queue, "far")``), ``scheduled`` with their ``run_at``."""
        return await reads.far_jobs(self._client, queue, ids)

    async def far_next(self, queue: str) -> int | None:
        """The earliest ``run_at`` of the queue's far-future jobs (None: none, or too many to read)."""
        return await farreads.far_next(self._client, queue)

    async def far_run_at(self, queue: str, job_id: str) -> int | None:
        """The ``run_at`` of a far-future job still in the schedule topic (None: not there)."""
        async with codes.redis_errors("far"):
            return await farreads.far_run_at(self._client, queue, job_id)

    async def queues_holding(self, queues: Sequence[str], job_id: str) -> list[str]:
        """Which of ``queues`` hold a job with this id (the dashboard's search by exact id)."""
        return await reads.queues_holding(self._client, queues, job_id)

    async def depth(
        self, queue: str, filter: Mapping[str, str] | None = None, *, now: int | None = None
    ) -> QueueDepth:
        """Jobs per state (``by_filter``: pending jobs having every declared ``meta`` pair of ``filter``,
        exact; :class:`FilterInvalid` for a key the queue does not index)."""
        return await reads.depth(self._client, queue, filter, now=now or await self._core.now())

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
        return await signals.queue_signals(self._client, queues, now or await self._core.now())

    async def queue_stats(self, queue: str) -> dict[str, int]:
        """The queue's lifetime counters (enqueued, duplicates, claimed, completed, errored, ...)."""
        return await reads.queue_stats(self._client, queue)

    async def kinds(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        """Every configured job type, its defaults and its options per queue (see :func:`reads.kinds`)."""
        return await reads.kinds(self._client, queues)


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
