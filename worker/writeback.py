"""Writing a finished handler's :class:`~worker.execute.Outcome` back to Redis (one transition each)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from jqcore import metrics
from jqcore.log import get_logger
from jqcore.state import TAIL_ID_PREFIX, ClaimedJob, Engine
from worker.execute import Outcome
from worker.registry import Registry

__all__ = ["reports", "write_back"]

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
            permanent=outcome.permanent or _attempts_used_up(registry, job),
        )


def reports(job: ClaimedJob) -> bool:
    """Does this job's end go on to another slot (a graph node's, a tail call's child's)?"""
    return bool(job.envelope.graph) or job.id.startswith(TAIL_ID_PREFIX)


def _attempts_used_up(registry: Registry, job: ClaimedJob) -> bool:
    """The handler's ``max_attempts`` counts even for jobs stored before the pool registered its kind
    (the engine fixes a job's attempt budget at enqueue; the envelope's own value always wins)."""
    spec = registry.get(job.envelope.kind)
    limit = spec.max_attempts if spec is not None else None
    return job.envelope.max_attempts is None and limit is not None and job.attempt >= limit
