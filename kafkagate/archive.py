"""The archive (Rickover), as the gateway reads it: a job Redis forgot, from the history tables
(``jqruntime.stores.history``, DuckDB in a worker thread), in the shape of a live ``GET``."""

from __future__ import annotations

import asyncio
from typing import Any

from jqcore.events import TERMINAL
from jqruntime.stores.history import HistoryStore, JobSnapshot

__all__ = ["archived", "archived_snapshot", "job_dict"]


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


async def archived_snapshot(store: HistoryStore | None, queue: str, job_id: str) -> JobSnapshot | None:
    """The job's latest row in the history, or None (no history configured, or it never saw the job)."""
    if store is None:
        return None
    return await asyncio.to_thread(store.current, queue, job_id)


async def archived(store: HistoryStore | None, queue: str, job_id: str) -> dict[str, Any] | None:
    """The archived job with its payload, or None (no history configured, or it never saw the job)."""
    job = await archived_snapshot(store, queue, job_id)
    return job_dict(job, payload=True) if job is not None else None
