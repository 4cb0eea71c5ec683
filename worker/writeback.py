"""Writing a finished handler's :class:`~worker.execute.Outcome` back to Redis (one transition each)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from jqcore import metrics
from jqcore.log import get_logger
from jqengine import TAIL_ID_PREFIX, ClaimedJob, Engine, Settle, check_code
from worker.execute import Outcome
from worker.registry import Registry

__all__ = ["Complete", "Completions", "Refill", "attempts_used_up", "report", "reports", "write_back"]

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
    if outcome.kind == "success":  # counted with its round (Completions), a series' total at once
        await complete(job, outcome.result)
        return
    metrics.child(metrics.JOBS_FINISHED, queue, kind, outcome.label).inc()
    if outcome.kind == "defer" and outcome.child is not None:
        deferred = await engine.tails.defer(
            queue, owner, outcome.child, on_failure=outcome.on_failure, retry_delay_ms=outcome.delay_ms or 0
        )
        child = f"{outcome.child.queue}/{outcome.child.id}"
        log.info("job deferred", job_id=job.id, child=child, then=deferred)
    elif outcome.kind == "snooze":
        await engine.jobs.snooze(queue, owner, outcome.delay_ms or 0)
    elif outcome.kind == "unhandled":
        then = await engine.jobs.hand_back(queue, owner, *unknown_kind)
        log.warning("no handler for this kind; job handed back", job_id=job.id, kind=kind, then=then)
    elif outcome.kind == "cancel":
        await engine.jobs.cancel_running(queue, owner, outcome.error or "canceled by handler")
    else:
        await engine.jobs.fail(
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


@dataclass(frozen=True, slots=True)
class Refill:
    """Complete-and-claim: a single-queue pool's claims ride its completions (``settle_claim``), so a
    busy pool makes one script call per round instead of one per completion plus a claim."""

    queue: str
    room: Callable[[int], int]
    """Jobs to claim with a round that finishes this many (0: none, e.g. while the pool stops)."""
    launch: Callable[[list[ClaimedJob]], None]
    """Start the claimed jobs (called before the round's completions are answered)."""
    lease_ms: int = 0
    worker: str = ""


class Completions:
    """Completions are coalesced: while one batch is on its way to Redis the next ones gather, so a busy
    pool sends one script call per queue for many jobs (``settle``; each job checked and written as
    ``complete`` would), and, with a :class:`Refill`, claims the jobs to replace them in that same call.

    The window a crash leaves: a job whose handler returned is completed only once its round's call
    answered; a pool killed before that leaves it running under its lease, which expires and hands the
    job out again (a legal duplicate: at least once). Jobs a round claimed are leased to the pool before
    the answer reaches it: lost with the pool (or the answer), they come back by lease, like any claim."""

    def __init__(self, engine: Engine, refill: Refill | None = None) -> None:
        self.engine, self.refill = engine, refill
        self._pending: list[tuple[ClaimedJob, bytes | None, asyncio.Future[int]]] = []
        self._ready = asyncio.Event()
        self.idle = asyncio.Event()
        """Set while nothing is gathered or on its way (a stopping pool waits for it before releasing)."""
        self.idle.set()

    async def complete(self, job: ClaimedJob, result: bytes | None) -> None:
        """Complete ``job`` in the next batch (raises StaleLease / JobNotFound); its round counts it
        ``succeeded`` (``jobq_jobs_finished_total``) as it is sent."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append((job, result, fut))
        self.idle.clear()
        self._ready.set()
        check_code(await fut, job.id, "complete")

    async def run(self) -> None:
        """Send the gathered completions, a call per queue, until cancelled (the pool's completer)."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            by_queue: dict[str, list[tuple[ClaimedJob, bytes | None, asyncio.Future[int]]]] = {}
            for item in batch:
                by_queue.setdefault(item[0].queue, []).append(item)
            for queue, items in by_queue.items():
                await self._send(queue, items)
            if not self._pending:
                self.idle.set()
            else:  # the jobs just answered leave the pool (their tasks resume) before the next round counts
                await asyncio.sleep(0)  # the slots it refills: else it claims fewer, the claim loop the rest

    async def _send(
        self, queue: str, items: list[tuple[ClaimedJob, bytes | None, asyncio.Future[int]]]
    ) -> None:
        outcomes = [Settle((j.id, j.attempt, j.token), r) for j, r, _ in items]
        succeeded: dict[str, int] = {}  # per kind: the round's successes, counted as write_back would
        for j, _, _ in items:
            succeeded[j.envelope.kind] = succeeded.get(j.envelope.kind, 0) + 1
        for kind, n in succeeded.items():
            metrics.child(metrics.JOBS_FINISHED, queue, kind, "succeeded").inc(n)
        refill = self.refill if self.refill is not None and self.refill.queue == queue else None
        n = refill.room(len(items)) if refill is not None else 0
        try:
            if refill is not None and n > 0:
                answers, claimed = await self.engine.jobs.settle_claim(
                    queue, outcomes, n, lease_ms=refill.lease_ms, worker=refill.worker
                )
                refill.launch(claimed)
            else:
                answers = await self.engine.jobs.settle(queue, outcomes)
        except Exception as exc:
            for _, _, fut in items:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, _, fut), (code, _) in zip(items, answers, strict=True):
            if not fut.done():
                fut.set_result(code)
