"""The archive (Rickover), as the gateway reads it: a job Redis forgot, from the history tables
(``jqruntime.stores.history``, DuckDB on the process's history pool: ``jqruntime.historypool``), in the
shape of a live ``GET``; a miss is remembered a few seconds (``jqruntime.historypool.MISS_TTL_S``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from jqcore.events import TERMINAL
from jqruntime.http import TOKEN_NAME
from jqruntime.stores.history import JobSnapshot
from kafkagate.state import GATE, Gate

__all__ = ["archived", "archived_snapshot", "asker", "job_dict"]


def job_dict(job: JobSnapshot, *, payload: bool = False) -> dict[str, Any]:
    """A job of the archive in the shape of a live ``GET`` (the fields the history keeps), marked
    ``source: archive``; ``payload``: with args, meta, result and the envelope fields the history kept."""
    final = job.to_state in TERMINAL
    out = {
        "id": job.id,
        "queue": job.queue,
        "state": job.to_state,
        "kind": job.kind or None,
        "attempt": job.attempt,
        "version": job.v,
        "enqueued_at": job.accepted_at or job.first_at,
        "run_at": job.run_at or None,
        "finished_at": job.at_ms if final else None,
        "updated_at": job.at_ms,
        "reason": job.message or None,
        "last_error": f"{job.error}: {job.message}" if job.error else None,
        "worker": job.worker or None,
        "origin": job.origin or None,
        "source": "archive",
    }
    if payload:
        out.update(job.payload().as_dict())
    return out


def asker(request: web.Request) -> str:
    """Whose share of the history pool a request uses: its token's name."""
    name: str = request.get(TOKEN_NAME, "anonymous")
    return name


async def archived_snapshot(request: web.Request, queue: str, job_id: str) -> JobSnapshot | None:
    """The job's latest row in the history, or None (no history configured, or it never saw the job: a
    miss is remembered for ``jqruntime.historypool.MISS_TTL_S``)."""
    gate: Gate = request.app[GATE]
    store = gate.history()
    if store is None:
        return None
    misses = gate.archive_misses()
    if misses.missed(queue, job_id):
        return None
    job = await gate.history_pool().run(asker(request), lambda: store.current(queue, job_id))
    if job is None:
        misses.note(queue, job_id)
    return job


async def archived(request: web.Request, queue: str, job_id: str) -> dict[str, Any] | None:
    """The archived job with its payload, or None (no history configured, or it never saw the job)."""
    job = await archived_snapshot(request, queue, job_id)
    return job_dict(job, payload=True) if job is not None else None
