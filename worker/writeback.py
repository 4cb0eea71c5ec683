"""Writing a finished handler's :class:`~worker.execute.Outcome` back to Redis (one transition each)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from jqcore import metrics
from jqcore.log import get_logger
from jqcore.state import TAIL_ID_PREFIX, ClaimedJob, Engine, check_code
from worker.execute import Outcome
from worker.registry import Registry

__all__ = ["Complete", "Completions", "attempts_used_up", "report", "reports", "write_back"]

log = get_logger("worker.pool")

Complete = Callable[[ClaimedJob, bytes | None], Awaitable[None]]


async def write_back(
    engine: Engine,
    registry: Registry,
    job: ClaimedJob,
    outcome: Outcome,
    complete: Complete,
    unknown_kind: tuple[int, int],
) -> None:
    """``complete``: the pool's coalesced completion; ``unknown_kind``: (retry after, dead after) ms."""
    owner = (job.id, job.attempt, job.token)
    kind, queue = job.envelope.kind, job.queue
    metrics.child(metrics.JOBS_FINISHED, queue, kind, outcome.label).inc()
    if outcome.kind == "success":
        await complete(job, outcome.result)
    elif outcome.kind == "defer" and outcome.child is not None:
        deferred = await engine.tails.defer(
            queue, owner, outcome.child, on_failure=outcome.on_failure, retry_delay_ms=outcome.delay_ms or 0
        )
        child = f"{outcome.child.queue}/{outcome.child.id}"
        log.info("job deferred", job_id=job.id, child=child, then=deferred)
    elif outcome.kind == "snooze":
        await engine.snooze(queue, owner, outcome.delay_ms or 0)
    elif outcome.kind == "unhandled":
        then = await engine.hand_back(queue, owner, *unknown_kind)
        log.warning("no handler for this kind; job handed back", job_id=job.id, kind=kind, then=then)
    elif outcome.kind == "cancel":
        await engine.cancel_running(queue, owner, outcome.error or "canceled by handler")
    else:
        await engine.fail(
            queue,
            owner,
            outcome.error or "failed",
            retry_delay_ms=outcome.delay_ms,
            permanent=outcome.permanent or attempts_used_up(registry, job),
        )


def reports(job: ClaimedJob) -> bool:
    """Does this job's end go on to another slot (a graph node's, a tail call's child's)?"""
    return bool(job.envelope.graph) or job.id.startswith(TAIL_ID_PREFIX)


async def report(engine: Engine, job: ClaimedJob) -> None:
    """A graph node's or a tail call's child's job finished (or not: a retry leaves nothing to report):
    hand its outcome to its graph or parent now. On failure the scheduler finds the outcome in the
    queue's ``gdone`` and hands it on."""
    try:
        await engine.graphs.report_finished(job.queue, [job.id])
    except Exception as exc:
        log.warning("report left to the scheduler", job_id=job.id, error=repr(exc))


def attempts_used_up(registry: Registry, job: ClaimedJob) -> bool:
    """The handler's ``max_attempts`` counts even for jobs stored before the pool registered its kind
    (the engine fixes a job's attempt budget at enqueue; the envelope's own value always wins)."""
    spec = registry.get(job.envelope.kind)
    limit = spec.max_attempts if spec is not None else None
    return job.envelope.max_attempts is None and limit is not None and job.attempt >= limit


class Completions:
    """Completions are coalesced: while one batch is on its way to Redis the next ones gather, so a busy
    pool sends one pipelined round trip for many jobs (each completion still its own script)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pending: list[tuple[ClaimedJob, bytes | None, asyncio.Future[int]]] = []
        self._ready = asyncio.Event()

    async def complete(self, job: ClaimedJob, result: bytes | None) -> None:
        """Complete ``job`` in the next batch (raises StaleLease / JobNotFound)."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append((job, result, fut))
        self._ready.set()
        check_code(await fut, job.id, "complete")

    async def run(self) -> None:
        """Send the gathered completions, a batch per queue, until cancelled (the pool's completer)."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            by_queue: dict[str, list[tuple[ClaimedJob, bytes | None, asyncio.Future[int]]]] = {}
            for item in batch:
                by_queue.setdefault(item[0].queue, []).append(item)
            for queue, items in by_queue.items():
                try:
                    results = await self.engine.complete_many(
                        queue, [((j.id, j.attempt, j.token), r) for j, r, _ in items]
                    )
                except Exception as exc:
                    for _, _, fut in items:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, _, fut), code in zip(items, results, strict=True):
                    if not fut.done():
                        fut.set_result(code)
