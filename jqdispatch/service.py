"""The dispatcher: claims the jobs of dispatch kinds and POSTs each to its kind's URL.

* **Configuration**: a job of queue Q and kind K is pushed with (Q, K)'s dispatch configuration, else
  (``*``, K)'s (:func:`jqruntime.dispatch.pick`); read every :data:`REFRESH_S`.
* **Egress**: each POST's host is resolved once, its addresses checked against the egress policy
  (``allow_nets``) and the connection pinned to them (:mod:`jqdispatch.egress`); a refused URL or auth
  fails the attempt without sending anything.
* **Claims** are made like a worker pool's (:meth:`jqengine.Engine.claim`): batches sized to the free
  slots of ``concurrency``, each job leased and fenced by its attempt and token; a kind's ``concurrency``
  limit is the claim script's, across every claimer. With nothing claimable it blocks on the queues' wake
  list. A job of a kind without dispatch configuration is handed back (attempt refunded) for a pool.
* **Leases** are kept by :class:`jqruntime.leases.LeaseKeeper` while the POST runs and while a 202'd job
  awaits its callback; a lost lease (reaped, canceled) abandons the job: nothing is written back.
* **Outcomes**: 2xx → completed; 4xx/5xx/timeout/unreachable → a failed attempt, retried after the kind's
  backoff until its attempts run out; 202 → the job waits for its callback through the gateway
  (:mod:`kafkagate.callbacks`) — seen done when its lease changes hands, failed when
  ``callback_timeout_s`` passes first.
* **Shutdown**: stop claiming, let POSTs finish within ``grace_s``, release the rest (POSTs cut short and
  the jobs awaiting callbacks: a callback for a released attempt is then answered 409 ``callback_stale``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from jqcore import metrics
from jqcore.aio import cancel_and_wait
from jqcore.clock import now_ms
from jqcore.errors import ConfigError
from jqcore.log import get_logger
from jqcore.testsignal import TestSignal
from jqdispatch.egress import Egress, EgressPolicy
from jqdispatch.push import Answer, Sender, job_body, post_job
from jqdispatch.settings import DispatcherSettings
from jqengine import ClaimedJob, Engine, RedisClient, StaleLease
from jqruntime.dispatch import EVERY_QUEUE, DispatchConfig, load_configs, pick
from jqruntime.health import Readiness, ping
from jqruntime.leases import LeaseKeeper
from jqruntime.lifecycle import Service
from jqruntime.stores import dispatch as dispatch_store
from jqruntime.stores.presence import Presence, process_name

__all__ = ["Dispatcher", "DispatcherSignals"]

log = get_logger("jqdispatch")

REFRESH_S = 2.0
"""Seconds between two reads of the dispatch kinds' configurations (a PUT takes effect within)."""
CALLBACK_CHECK_S = 0.5
"""Seconds between two looks at the jobs awaiting a callback (done by their callback, or overdue)."""
IDLE_WAIT_S = 5.0
"""Longest blocking wait for new work before claiming again (a claimable job wakes it earlier)."""
WRITES_AT_ONCE = 32
"""Outcomes written to Redis at once: a burst of answers waits for a slot instead of taking a connection
each (the process's pool is bounded: ``jqdispatch.main``)."""


@dataclass(eq=False)
class Held:
    job: ClaimedJob
    config: DispatchConfig
    task: asyncio.Task[None] | None = None
    started_at: float = field(default_factory=time.monotonic)
    callback_by: float | None = None
    """Awaiting a callback (202) until this ``time.monotonic()``; None while the POST runs."""
    abandoned: bool = False


@dataclass
class DispatcherSignals:
    """What a dispatcher reports to a test that listens (:mod:`jqcore.testsignal`)."""

    finished: TestSignal[tuple[str, int, str]] = field(
        default_factory=lambda: TestSignal("dispatch finished")
    )
    """An attempt left the dispatcher: (job id, attempt, its ``jobq_dispatch_outcomes_total`` label)."""
    handed_back: TestSignal[tuple[str, str]] = field(
        default_factory=lambda: TestSignal("dispatch handed back")
    )
    """A job was handed back: its kind is not pushed from its queue (job id, kind)."""


def _log_answer(job: ClaimedJob, answer: Answer) -> None:
    facts = {"job_id": job.id, "queue": job.queue, "kind": job.envelope.kind, "attempt": job.attempt}
    if answer.outcome == "refused":  # the operator's to fix: what was refused (no secret in it)
        log.warning("dispatch refused", **facts, error=answer.error)
    else:
        log.info("dispatched", **facts, outcome=answer.outcome, status=answer.status)


class Dispatcher(Service):
    health_name = "dispatcher"

    def __init__(self, engine: Engine, settings: DispatcherSettings, *, redis: RedisClient) -> None:
        if not settings.callback_secret.get_secret_value().strip():
            raise ConfigError(
                "JOBQ_CALLBACK_SECRET is empty: set it (or JOBQ_CALLBACK_SECRET_FILE) to the gateways'"
                " callback secret"
            )
        super().__init__()
        self.engine, self.settings = engine, settings
        self.redis = redis
        """The engine's Redis: the push-dispatch configurations and this process's presence heartbeat."""
        self.held: dict[str, Held] = {}
        self.configs: dict[tuple[str, str], DispatchConfig] = {}
        """The dispatch configurations of this dispatcher's queues and of every queue (``*``), by (queue,
        kind)."""
        self.egress = Egress(EgressPolicy.parse(settings.allow_nets))
        self.signals = DispatcherSignals()
        self._secret = settings.callback_secret.get_secret_value()
        self._slot_freed = asyncio.Event()
        self._writes = asyncio.Semaphore(WRITES_AT_ONCE)
        self._tasks: list[asyncio.Task[None]] = []
        self._sender: Sender | None = None
        self._keeper = LeaseKeeper(engine, self._owned, self._lost)
        self._presence = Presence(
            redis,
            "dispatcher",
            process_name(",".join(settings.queues)),
            queues=settings.queues,
            load=lambda: (len(self.held), self.settings.concurrency),
            facts=self._facts,
        )
        self.processed = 0
        """Jobs that left this dispatcher (answered, called back, timed out or lost), for its record."""
        self._stopping = False
        self._claim_error: str | None = None

    # ---- lifecycle ------------------------------------------------------------------------------
    async def _start(self) -> None:
        # the connector resolves through the egress policy, never from a cache: each new connection goes
        # to the addresses checked for its POST (jqdispatch.egress)
        connector = aiohttp.TCPConnector(resolver=self.egress, use_dns_cache=False)
        http = aiohttp.ClientSession(headers={"User-Agent": "jobq-dispatcher"}, connector=connector)
        self._sender = Sender(http, self.egress, self.settings.secrets_dir)
        await self.refresh()
        await self._keeper.start()
        await self._presence.start()
        for name, loop in (("claim", self._claim_loop), ("refresh", self._refresh_loop)):
            self._tasks.append(asyncio.create_task(loop(), name=f"dispatcher:{name}"))
        self._tasks.append(asyncio.create_task(self._callback_loop(), name="dispatcher:callbacks"))

    async def _stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            await cancel_and_wait(task)
        posting = [h.task for h in self.held.values() if h.task is not None and h.callback_by is None]
        if posting:
            await asyncio.wait(posting, timeout=self.settings.grace_s)
        await self._release_rest()
        await self._keeper.stop()
        await self._presence.stop()
        if self._sender is not None:
            await self._sender.http.close()
        await self.egress.close()

    async def _release_rest(self) -> None:
        rest = [h for h in self.held.values() if not h.abandoned]
        by_queue: dict[str, list[tuple[str, int, str, bool]]] = {}
        for held in rest:
            held.abandoned = True
            if held.task is not None:
                held.task.cancel()
            by_queue.setdefault(held.job.queue, []).append(
                (held.job.id, held.job.attempt, held.job.token, True)
            )
        for queue, jobs in by_queue.items():
            try:
                log.info(
                    "released jobs at shutdown", queue=queue, jobs=await self.engine.jobs.release(queue, jobs)
                )
            except Exception as exc:  # Redis away: the leases expire and the reaper hands the jobs out
                log.warning("releasing at shutdown failed", queue=queue, error=repr(exc))
        await asyncio.gather(*(h.task for h in rest if h.task), return_exceptions=True)

    async def _readiness(self, found: Readiness) -> None:
        found.facts.update(
            queues=list(self.settings.queues),
            held=len(self.held),
            concurrency=self.settings.concurrency,
            kinds=sorted({kind for _, kind in self.configs}),
        )
        if await ping("Redis", self.engine.ping(), found, code="redis_unreachable") and self._claim_error:
            found.add("claims_failing", f"the last claim failed: {self._claim_error}")

    # ---- configuration --------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Read the dispatch kinds' configurations (a PUT /v1/kinds takes effect within :data:`REFRESH_S`)."""
        mine = {*self.settings.queues, EVERY_QUEUE}
        stored = await dispatch_store.configs(self.redis)
        self.configs = load_configs({key: text for key, text in stored.items() if key[0] in mine})

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self.refresh()
            except Exception as exc:  # Redis away: keep the configurations read last
                log.warning("reading the dispatch configurations failed", error=repr(exc))

    # ---- claiming -------------------------------------------------------------------------------
    async def _claim_loop(self) -> None:
        while not self._stopping:
            try:
                full = await self._claim_once()
                self._claim_error = None
                if not full:
                    await self.engine.jobs.wait_for_work(
                        self.settings.queues, self.engine.block_limit_s(IDLE_WAIT_S)
                    )
            except Exception as exc:  # Redis away: back off, keep the held jobs going
                log.warning("claim failed", error=repr(exc))
                self._claim_error = repr(exc)
                await asyncio.sleep(1.0)

    async def _claim_once(self) -> bool:
        """Claim up to the free slots; True when a queue filled them all (it may hold more)."""
        while len(self.held) >= self.settings.concurrency:
            self._slot_freed.clear()
            await self._slot_freed.wait()
        for queue in self.settings.queues:
            free = self.settings.concurrency - len(self.held)
            if free <= 0:
                return True
            jobs = await self.engine.jobs.claim(
                queue, free, lease_ms=self.settings.lease_ms, worker=self._presence.name
            )
            for job in jobs:
                await self._launch(job)
            if len(jobs) == free:
                return True
        return False

    async def _launch(self, job: ClaimedJob) -> None:
        self._presence.claimed(job.queue, now_ms())
        config = pick(self.configs, job.queue, job.envelope.kind)
        if config is None:
            await self._hand_back(job)
            return
        held = self.held[job.id] = Held(job, config)
        metrics.DISPATCH_IN_FLIGHT.set(len(self.held))
        held.task = asyncio.create_task(self._dispatch(held), name=f"dispatch:{job.id}")

    async def _hand_back(self, job: ClaimedJob) -> None:
        then = await self.engine.jobs.hand_back(
            job.queue,
            (job.id, job.attempt, job.token),
            round(self.settings.unknown_kind_retry_s * 1000),
            round(self.settings.unknown_kind_dead_after_s * 1000),
        )
        metrics.child(metrics.DISPATCH_OUTCOMES, job.queue, job.envelope.kind, "unknown_kind").inc()
        if self.signals.handed_back.enabled:
            self.signals.handed_back.signal((job.id, job.envelope.kind))
        log.warning(
            "kind has no dispatch configuration; job handed back",
            job_id=job.id,
            kind=job.envelope.kind,
            then=then,
        )

    # ---- one attempt ----------------------------------------------------------------------------
    async def _dispatch(self, held: Held) -> None:
        job, config = held.job, held.config
        try:
            body = job_body(job, config, self._secret, self.settings.callback_url, await self.engine.now())
            assert self._sender is not None
            answer = await post_job(self._sender, job, config, body)
            if held.abandoned:
                return
            _log_answer(job, answer)
            if answer.outcome == "accepted":
                held.callback_by = time.monotonic() + config.callback_timeout_s
                return  # held until its callback (or callback_timeout_s): _callback_loop
            await self._write(held, answer)
            self._done(held, answer.outcome)
        except asyncio.CancelledError:
            pass
        except StaleLease:  # the lease was lost meanwhile (reaped, canceled): that attempt is not ours
            self._lose(held)
        except Exception as exc:  # Redis away while writing: the lease expires, the job is handed out again
            log.warning("writing the outcome failed", job_id=job.id, error=repr(exc))
            self._lose(held)

    async def _write(self, held: Held, answer: Answer) -> None:
        job = held.job
        owner = (job.id, job.attempt, job.token)
        async with self._writes:
            if answer.outcome == "succeeded":
                await self.engine.jobs.complete(job.queue, owner, answer.result)
            else:
                delay = held.config.backoff.policy().delay_ms(job.attempt)
                await self.engine.jobs.fail(
                    job.queue, owner, answer.error or answer.outcome, retry_delay_ms=delay
                )
            if job.envelope.graph:  # hand a graph node's outcome on now (else the scheduler's repair does)
                try:
                    await self.engine.graphs.report_finished(job.queue, [job.id])
                except Exception as exc:
                    log.warning("graph report left to the scheduler", job_id=job.id, error=repr(exc))

    def _facts(self) -> dict[str, Any]:
        """What its presence record says (the dashboard's Workers page)."""
        return {
            "kind": "dispatcher",
            "queues": list(self.settings.queues),
            "processed": self.processed,
            "state": "stopping" if self._stopping else "running",
        }

    def _done(self, held: Held, outcome: str) -> None:
        if self.held.get(held.job.id) is held:
            del self.held[held.job.id]
            self.processed += 1
        held.abandoned = True
        metrics.DISPATCH_IN_FLIGHT.set(len(self.held))
        self._slot_freed.set()
        if self.signals.finished.enabled:
            self.signals.finished.signal((held.job.id, held.job.attempt, outcome))

    # ---- awaiting callbacks ---------------------------------------------------------------------
    async def _callback_loop(self) -> None:
        while True:
            await asyncio.sleep(CALLBACK_CHECK_S)
            try:
                await self.check_awaiting()
            except Exception as exc:
                log.warning("checking the awaited callbacks failed", error=repr(exc))

    async def check_awaiting(self) -> None:
        """Drop the 202'd jobs whose callback came (their lease changed hands); fail the overdue ones."""
        by_queue: dict[str, list[Held]] = {}
        for held in list(self.held.values()):
            if held.callback_by is not None and not held.abandoned:
                by_queue.setdefault(held.job.queue, []).append(held)
        now = time.monotonic()
        for queue, waiting in by_queue.items():
            leases = await self.engine.reads.leases(queue, [h.job.id for h in waiting])
            for held, lease in zip(waiting, leases, strict=True):
                job = held.job
                if lease is None or (lease.state, lease.attempt, lease.token) != (
                    "running",
                    job.attempt,
                    job.token,
                ):
                    self._called_back(held)
                elif held.callback_by is not None and now >= held.callback_by:
                    await self._callback_overdue(held)

    def _called_back(self, held: Held) -> None:
        job = held.job
        if self.held.get(job.id) is not held:
            return
        metrics.child(metrics.DISPATCH_OUTCOMES, job.queue, job.envelope.kind, "called_back").inc()
        self._done(held, "called_back")

    async def _callback_overdue(self, held: Held) -> None:
        job, config = held.job, held.config
        error = f"callback_timeout: no callback within {config.callback_timeout_s} s of the 202"
        try:
            await self._write(held, Answer("failed", error=error))
        except StaleLease:  # the callback came in between
            self._called_back(held)
            return
        metrics.child(metrics.DISPATCH_OUTCOMES, job.queue, job.envelope.kind, "callback_timeout").inc()
        log.info(
            "callback overdue", job_id=job.id, queue=job.queue, kind=job.envelope.kind, attempt=job.attempt
        )
        self._done(held, "callback_timeout")

    # ---- leases ---------------------------------------------------------------------------------
    def _owned(self) -> list[tuple[ClaimedJob, float]]:
        return [(h.job, h.started_at) for h in self.held.values() if not h.abandoned]

    def _lost(self, job_id: str, why: str) -> None:
        """The lease keeper could not extend this job's lease: a 202'd job whose extend was refused was
        called back meanwhile; otherwise the lease was lost (reaped after a stall, lapsed without an
        acknowledged extend, or the job canceled): nothing is written."""
        held = self.held.get(job_id)
        if held is None or held.abandoned:
            return
        if held.callback_by is not None and why.startswith("extend:") and "canceled" not in why:
            self._called_back(held)
            return
        log.warning("abandoning job", job_id=job_id, reason=why)
        if held.task is not None:
            held.task.cancel()
        self._lose(held)

    def _lose(self, held: Held) -> None:
        """Nothing (more) is written for this attempt: its lease expires or has changed hands."""
        if self.held.get(held.job.id) is not held:
            return  # already let go (the lease keeper and the write can both find the lease gone)
        metrics.child(metrics.DISPATCH_OUTCOMES, held.job.queue, held.job.envelope.kind, "lost").inc()
        self._done(held, "lost")
