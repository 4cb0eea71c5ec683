"""Giving claimed jobs back to Redis unfinished (:mod:`worker.pool`): at a stop, and a prefetched job that
found no slot in time. A job whose handler never started is given back with its attempt refunded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from jqcore.log import get_logger
from jqengine import Engine
from worker.running import Running

__all__ = ["hand_back_unstarted", "release_rest"]

log = get_logger("worker.pool")


async def release_rest(engine: Engine, runs: Iterable[Running]) -> None:
    """A stopping pool's jobs not abandoned yet: stopped, released (per queue), their tasks awaited."""
    rest = [r for r in runs if not r.abandoned]
    for run in rest:
        run.abandoned = True
        if run.task is not None:
            run.task.cancel()
    by_queue: dict[str, list[tuple[str, int, str, bool]]] = {}
    for run in rest:
        by_queue.setdefault(run.job.queue, []).append(
            (run.job.id, run.job.attempt, run.job.token, run.started)
        )
    for queue, jobs in by_queue.items():
        outcome = await engine.jobs.release(queue, jobs)
        log.info("released jobs at shutdown", queue=queue, jobs=outcome)
    await asyncio.gather(*(r.task for r in rest if r.task), return_exceptions=True)


async def hand_back_unstarted(engine: Engine, run: Running) -> None:
    """A prefetched job found no slot within half its lease: back to the queue, attempt refunded, for a
    pool with room (this one keeps claiming as its slots free)."""
    run.abandoned = True
    job = run.job
    try:
        await engine.jobs.release(job.queue, [(job.id, job.attempt, job.token, False)])
        log.info("prefetched job handed back: no free slot within half its lease", job_id=job.id)
    except Exception as exc:  # Redis away: its lease expires and it is handed out again
        log.warning("handing back a prefetched job failed", job_id=job.id, error=repr(exc))
