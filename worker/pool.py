"""A worker pool: claims jobs from Redis for its queues and runs their handlers with bounded concurrency.

* **Claims** are batches sized to the free slots; with nothing to do the pool blocks in Redis
  (:meth:`jqengine.Engine.wait_for_work`) instead of polling. A pool serving one queue without a
  filter registers for **hand-off claims** with its short claim: the transition that makes a job ready
  (enqueue, promotion) claims it for the pool at once, leased like any claim, and the pool's blocking pop
  returns the job itself — no wake-then-claim round trip before it starts. Jobs handed to a pool that
  dies before running them come back when their leases expire, like any claimed job. Such a pool's
  **claims ride its completions**: a round of finished jobs is written and replaced by one script call
  (``settle_claim``, :class:`worker.writeback.Refill`); the claim loop claims only when a round came back
  short.
* **Prefetch** (``PoolConfig.prefetch``): a pool may hold more claimed jobs than it runs; each waits for a
  handler's slot (:class:`worker.slots.HandlerSlots`, first come first served) and starts the moment one
  frees, while the finished job's outcome is still on its way to Redis. Held jobs are leased and kept
  alive like running ones; one that found no slot within half its lease, or that a stop catches waiting,
  is handed back with its attempt refunded.
* **Handlers** run as coroutines, in a thread pool (sync functions) or in a process pool
  (``mode="process"``). A per-job timeout cancels a coroutine; a thread or process cannot be killed from
  Python, so on timeout its result is discarded, the attempt is failed as ``timeout`` and the function
  runs on to its end in the background (documented in ``docs/workers.md``).
* **Outcomes**: return → complete (a JSON-serialisable return value is kept as the result);
  ``Retry(delay)`` → retry after that delay; ``Cancel`` → canceled, never retried (one transition,
  ``cancel_running``); ``Snooze(delay)`` → back later without spending an attempt; any other exception →
  failed with its traceback, retried with the kind's backoff until attempts run out (then errored, the
  dead-letter list).
* **Unknown kinds** (a rolling deploy: a job of a kind this pool's version does not know) are handed
  back with the attempt refunded and claimable again after ``unknown_kind_retry_ms``; only when no pool
  ran it for ``unknown_kind_dead_after_ms`` is it dead-lettered.
* **Leases** are kept alive by :class:`worker.lease.LeaseKeeper`; a job whose lease was lost or which was
  canceled meanwhile is abandoned (its task cancelled) and never completed by this worker.
* **Shutdown** (:meth:`Pool.stop`): stop claiming, let running jobs finish within ``grace_s``, then
  cancel them and release them back to Redis (not counted as an attempt). :meth:`Pool.hard_stop` cancels
  without releasing: leases expire and the reaper hands the jobs out again, as after SIGKILL.
* **Quiet and stop from the dashboard**: the pool's presence record (:mod:`jqruntime.stores.presence`)
  says its queues, claimed jobs and capacity, jobs running, processed and its state; at each heartbeat it
  reads the control the dashboard may have left for it. ``quiet``: claim nothing more (the hand-off
  registration is left at once), finish what runs, claim again when the control is taken back; ``stop``:
  quiet, then :attr:`Pool.done` is set and the process shuts down as on SIGTERM (``worker/main.py``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from jqcore import metrics
from jqcore.aio import cancel_and_wait, wait_event
from jqcore.log import get_logger
from jqengine import ClaimedJob, Engine, RedisClient, StaleLease
from jqruntime.health import Readiness, ping
from jqruntime.lifecycle import Service
from jqruntime.stores.presence import Control, Presence, process_name
from worker.batch import Batches
from worker.checks import check_filter, queues_empty
from worker.config import PoolConfig, PoolSignals
from worker.execute import Outcome, run_handler
from worker.handback import hand_back_unstarted, release_rest
from worker.hooks import WorkerContext, run_shutdown, run_startup
from worker.lease import LeaseKeeper
from worker.registry import Registry
from worker.running import Running
from worker.slots import HandlerSlots
from worker.writeback import Completions, Refill, report, reports, write_back

__all__ = ["Pool", "PoolConfig", "PoolSignals"]

log = get_logger("worker.pool")

HANDOFF_WAIT_S = 5.0
"""A pool registered for hand-offs waits at most this long before it claims (and registers) again: a
pool killed while registered is handed at most its registered slots' jobs, within this window (a pool
killed at full load holds as many); they come back when their leases expire."""
COMPLETIONS_WAIT_S = 5.0
"""A stopping pool waits this long for its completions on their way (they may bring claimed jobs, which it
then releases with the rest) before it releases what it holds."""
HANDOFF_MARGIN_MS = 1_000
"""A hand-off registration outlives the blocking pop it is for by this much (the pop's round trip)."""
HANDOFF_MIN_WAIT_S = 0.05
"""A registration with less time left than this is renewed by a claim rather than waited on."""


class Pool(Service):
    """Runs the handlers of ``registry`` for ``config.queues``; ``redis`` is the engine's Redis, where the
    pool's presence heartbeat goes (:mod:`jqruntime.stores.presence`)."""

    health_name = "worker"

    def __init__(self, registry: Registry, engine: Engine, config: PoolConfig, *, redis: RedisClient) -> None:
        super().__init__()
        self.registry, self.engine, self.config = registry, engine, config
        self.in_flight: dict[str, Running] = {}
        self.concurrency = config.concurrency
        """Jobs run at once; :meth:`set_concurrency` changes it while the pool runs."""
        self._resized = False
        """A change of concurrency (or quiet) since the claim round began: its wait ends at once."""
        self._waiting: asyncio.Future[None] | None = None
        """Set when the claim loop's current wait ends (its own answer, or :meth:`_end_wait`)."""
        self._slot_freed = asyncio.Event()
        self._slots = HandlerSlots(lambda: self.concurrency)
        self.drained = asyncio.Event()
        self.claimed_once = asyncio.Event()
        """Set when the pool's first claim round has ended (or failed, or found the pool quiet): its health
        routes are served from then on (``worker/main.py``), their server's making never delaying it."""
        self.done = asyncio.Event()
        """Set when the pool has nothing more to do: a burst pool drained its queues, or a stop was asked
        from the dashboard (``worker/main.py`` stops the pool then, as on SIGTERM)."""
        self.processed = 0
        """Jobs whose outcome this pool wrote (its presence record shows it)."""
        self._quiet = False
        self._loud = asyncio.Event()
        self._loud.set()
        self._asked: Control | None = None
        self._threads: Executor | None = None
        self._processes: Executor | None = None
        self._fetcher: asyncio.Task[None] | None = None
        self._keeper = LeaseKeeper(engine, self._owned, self.abandon)
        self.signals = PoolSignals(extended=self._keeper.signals.extended)
        self._stopping = False
        self._hard = False
        self._claim_error: str | None = None
        """Why the last claim round failed (Redis away), until one succeeds."""
        self._presence = Presence(
            redis,
            "worker",
            process_name(",".join(config.queues)),
            queues=config.queues,
            load=lambda: (len(self.in_flight), self._capacity()),
            filtered=bool(config.filter),
            facts=self._facts,
            on_control=self.control,
        )
        handoff = len(config.queues) == 1 and not config.filter
        refill = (
            Refill(
                config.queues[0],
                self._refill_room,
                self._launch_all,
                config.lease_ms or 0,
                self._presence.name,
            )
            if handoff
            else None
        )
        self._completions = Completions(engine, refill)
        self._completer: asyncio.Task[None] | None = None
        self.context = WorkerContext(self._presence.name, tuple(config.queues))
        """What the registry's hooks and the handlers share (``current_job().worker``)."""
        complete = self._completions.complete
        self._batches = Batches(
            registry, engine, config.queues, self.context, self._executor, complete, self._done
        )
        self._hooks_started = False
        self._waiter = f"{self._presence.name}/{secrets.token_hex(4)}" if handoff else ""
        """This pool's id for hand-off claims ('' = none: several queues or a filter)."""
        self._registered = (0, 0.0)
        """Slots this pool's hand-off registration has left, and until when (monotonic) it may wait on it
        without a claim: a hand-off of fewer jobs than the slots leaves the rest registered
        (``lua/lib/hand_off.lua``), so at a trickle the pool pops job after job with no claim between."""

    # ---- lifecycle ------------------------------------------------------------------------------
    async def _start(self) -> None:
        await check_filter(self.engine, self.config.queues, self.config.filter)
        await self._register_kinds()
        self._hooks_started = True  # from here on the shut-down hooks run at stop, even if this fails
        await run_startup(self.registry.startup_hooks, self.context)
        await self._keeper.start()
        await self._presence.start()
        for queue in self.config.queues:  # every served queue's series from the start, at 0
            metrics.child(metrics.WORKER_CLAIMS, queue)
            metrics.child(metrics.JOBS_IN_FLIGHT, queue)
        self._completer = asyncio.create_task(self._completions.run(), name="worker:completer")
        self._fetcher = asyncio.create_task(self._fetch_loop(), name="worker:fetch")

    def _facts(self) -> dict[str, Any]:
        """What the pool's presence record says of it beside its load (claimed jobs held, capacity):
        :mod:`jqruntime.stores.presence`."""
        state = "stopping" if self._stopping or self.done.is_set() else "quiet" if self._quiet else "running"
        return {
            "kind": "worker pool",
            "queues": list(self.config.queues),
            "running": sum(1 for r in self.in_flight.values() if r.started),
            "concurrency": self.concurrency,
            "processed": self.processed,
            "state": state,
        }

    def control(self, asked: Control | None) -> None:
        """What the dashboard asks now (read at each heartbeat): ``quiet`` stops claiming, ``stop`` also
        ends the pool (:attr:`done`), nothing (the control taken back) claims again."""
        before, self._asked = self._asked, asked
        action = asked.action if asked is not None else None
        if action in ("quiet", "stop"):
            self.quiet(True)
            if action == "stop" and not self.done.is_set():
                log.info("stop asked from the dashboard", by=asked.by if asked else "")
                self.done.set()
        elif before is not None and before.action == "quiet":
            self.quiet(False)

    def quiet(self, on: bool) -> None:
        """Claim nothing more (``on``) and finish what runs, or claim again."""
        if on == self._quiet:
            return
        self._quiet = on
        log.info("pool quiet" if on else "pool claims again", queues=list(self.config.queues))
        if on:
            self._loud.clear()
            self._end_wait()  # ends the wait for work at once
            self._slot_freed.set()
        else:
            self._loud.set()

    async def _readiness(self, found: Readiness) -> None:
        """Ready: claiming — Redis answers, the claim loop is not failing, no stop has begun."""
        found.facts.update(
            queues=list(self.config.queues), running=len(self.in_flight), concurrency=self.concurrency
        )
        if self._stopping:
            found.add("stopping", "the pool is shutting down and claims nothing more")
            return
        if await ping("Redis", self.engine.ping(), found, code="redis_unreachable") and self._claim_error:
            found.add("claims_failing", f"the last claim failed: {self._claim_error}")
        if self._fetcher is not None and self._fetcher.done() and not self.drained.is_set():
            found.add("claims_stopped", "the claim loop ended")

    async def _register_kinds(self) -> None:
        self._batches.load()
        for spec in self.registry.kinds(set(self.config.queues)):
            if (
                spec.concurrency
                or spec.max_attempts
                or spec.delivery != "at_least_once"
                or spec.priority is not None
                or spec.ignore_result
            ):
                await self.engine.admin.configure_kind(
                    spec.kind,
                    queues=[spec.queue],
                    concurrency=spec.concurrency,
                    max_attempts=spec.max_attempts,
                    delivery=spec.delivery,
                    priority=spec.priority,
                    ignore_result=spec.ignore_result,
                )

    async def _stop(self) -> None:
        self._stopping = True
        for run in self.in_flight.values():  # prefetched jobs waiting for a slot: released below, unrun
            if not run.started and not run.batched and run.task is not None:
                run.task.cancel()
        await self._cancel_fetcher()
        self._batches.close()  # the jobs still gathering are released below, attempt refunded
        tasks = [r.task for r in self.in_flight.values() if r.task is not None and (r.started or r.batched)]
        if tasks:  # asyncio.wait, not wait_for(gather): a timeout must not cancel the jobs themselves
            await asyncio.wait(tasks, timeout=self.config.grace_s)
        if not self._hard:  # a round on its way may bring claimed jobs: release them too
            await wait_event(self._completions.idle, COMPLETIONS_WAIT_S)
        await release_rest(self.engine, list(self.in_flight.values()))
        for run in [r for r in self.in_flight.values() if r.task is not None]:  # released unrun: gone
            self._done(run, None)
        if self._hooks_started and not self._hard:
            await run_shutdown(self.registry.shutdown_hooks, self.context)
        await self._shutdown_helpers()

    async def hard_stop(self) -> None:
        """Cancel everything without writing back (leases expire; the reaper hands the jobs out again)."""
        self._stopping = self._hard = True
        for run in self.in_flight.values():
            run.abandoned = True
            if run.task is not None:
                run.task.cancel()
        await self.stop()

    async def _cancel_fetcher(self) -> None:
        if self._fetcher is None:
            return  # never claimed: nothing to deregister
        await cancel_and_wait(self._fetcher)
        if self._waiter and not self._hard:  # deregister; jobs handed meanwhile are ours: released below
            try:
                for job in await self.engine.jobs.unwait(self.config.queues[0], self._waiter):
                    self.in_flight[job.id] = Running(job)
            except Exception as exc:  # Redis away: the registration expires, handed jobs' leases too
                log.warning("leaving the hand-off list failed", error=repr(exc))

    async def _shutdown_helpers(self) -> None:
        await cancel_and_wait(self._completer)
        await self._keeper.stop()
        await self._presence.stop()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
        if self._processes is not None:
            self._processes.shutdown(wait=False, cancel_futures=True)

    # ---- claiming -------------------------------------------------------------------------------
    async def _fetch_loop(self) -> None:
        while not self._stopping:
            try:
                if await self._fetch_and_wait():
                    return
                self._claim_error = None
            except Exception as exc:  # Redis away (claim or wait): back off, keep the running jobs going
                log.warning("claim failed", error=repr(exc))
                self._claim_error = repr(exc)
                await asyncio.sleep(1.0)

    async def _fetch_and_wait(self) -> bool:
        """One claim round, then the wait for more work; True when a burst pool has drained its queues.
        Every Redis call of the loop is in here, so none of their errors can end the loop (a BLPOP on a
        Cluster node that just died used to end it, and the pool never claimed again)."""
        self._resized = False  # a change from here on ends the wait below
        if self._quiet:
            self.claimed_once.set()
            await self._hush()
            return False
        slots, until = self._registered
        # still registered for slots it has free (a refill may have filled some): wait again without a claim
        registered = (
            0 < slots <= self._capacity() - len(self.in_flight)
            and until - time.monotonic() > HANDOFF_MIN_WAIT_S
        )
        try:
            if not registered and await self._fetch_once():
                return False
        finally:
            self.claimed_once.set()
        if self.config.burst and not self.in_flight and await queues_empty(self.engine, self.config.queues):
            self.drained.set()
            self.done.set()
            return True
        wait_s = self._wait_s()
        if self._waiter:
            queue, (slots, until) = self.config.queues[0], self._registered
            if slots > 0:  # no longer than the registration lasts (0 would be a BLPOP without end)
                wait_s = min(wait_s, max(HANDOFF_MIN_WAIT_S, until - time.monotonic()))
            wait = asyncio.ensure_future(self.engine.jobs.wait_for_handoff(queue, self._waiter, wait_s))
            if await self._interrupted(wait):  # resized: wake our own blocking pop (nothing is lost)
                await self.engine.jobs.nudge(queue, self._waiter)
            got = await wait or []
            # what the registration has left, as the hand-off counted it down (nothing: claim again)
            self._registered = (slots - len(got), until) if got else (0, 0.0)
            handed = await self._within_limit(got)
            self._launch(handed)
            if handed:
                await asyncio.sleep(0)  # the jobs start before the next claim is packed and sent
        else:
            wait_for_work = asyncio.ensure_future(self.engine.jobs.wait_for_work(self.config.queues, wait_s))
            if await self._interrupted(wait_for_work):  # resized: a wake token's wait, nothing to lose
                await cancel_and_wait(wait_for_work)
            elif (error := wait_for_work.exception()) is not None:
                raise error  # Redis away: the loop logs it and backs off (it was dropped unread)
        return False

    async def _hush(self) -> None:
        """Quiet: leave the hand-off list (jobs handed meanwhile are ours: they run), then wait until the
        pool may claim again."""
        if self._waiter:
            self._registered = (0, 0.0)
            self._launch(await self.engine.jobs.unwait(self.config.queues[0], self._waiter))
        self.signals.quiet.signal(True)
        await self._loud.wait()
        self.signals.quiet.signal(False)

    async def _interrupted(self, wait: asyncio.Future[Any]) -> bool:
        """Wait for ``wait`` or a change of concurrency; True when the change came first. One plain future
        a wait, set by either (a task waiting on an event, and its cancel, cost a round ~24 µs: at a
        trickle a wait a job)."""
        ended = self._waiting = asyncio.get_running_loop().create_future()

        def answered(_: object) -> None:
            if not ended.done():
                ended.set_result(None)

        if self._resized:
            answered(None)
        wait.add_done_callback(answered)
        try:
            await ended
        except asyncio.CancelledError:  # the pool stops: no wait may outlive the claim loop
            wait.cancel()
            raise
        finally:
            self._waiting = None
        return not wait.done()

    def _end_wait(self) -> None:
        """A change of concurrency or quiet: the claim loop's wait ends now."""
        self._resized = True
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(None)

    async def _within_limit(self, handed: list[ClaimedJob]) -> list[ClaimedJob]:
        """Jobs handed off beyond the free slots (a registration made before the concurrency was lowered)
        go back at once, attempt refunded."""
        keep = max(0, self._capacity() - len(self.in_flight))
        if len(handed) > keep:
            back = [(j.id, j.attempt, j.token, False) for j in handed[keep:]]
            await self.engine.jobs.release(self.config.queues[0], back)
        return handed[:keep]

    def set_concurrency(self, n: int) -> None:
        """Run up to ``n`` jobs at once from now on, without a restart: lowered, the running jobs finish
        and fewer are claimed; raised, more are claimed at once (SIGHUP with a settings file: main.py)."""
        if n < 1:
            raise ValueError(f"concurrency must be at least 1, not {n}")
        before, self.concurrency = self.concurrency, n
        if self._threads is not None and n > before:  # a thread per running job: a bigger executor
            old, self._threads = self._threads, ThreadPoolExecutor(n, thread_name_prefix="jobq")
            old.shutdown(wait=False)  # its running handlers finish on their threads
        log.info("concurrency changed", before=before, now=n)
        self._end_wait()
        self._slot_freed.set()
        self._slots.poke()

    async def _fetch_once(self) -> bool:
        """Claim up to the free slots; True when a queue filled them all (it may hold more). A claim
        that came back short found the claimable jobs exhausted: the pool then blocks on the wake list
        instead of asking again (every enqueue, completion and promotion pushes a wake token)."""
        while len(self.in_flight) >= self._capacity():
            if self._quiet:
                return False
            self._slot_freed.clear()
            await self._slot_freed.wait()
        for queue in self.config.queues:
            free = self._capacity() - len(self.in_flight)
            if free <= 0:
                return True
            wait_ms, asked = self._handoff_ms(), time.monotonic()
            jobs = await self.engine.jobs.claim(
                queue,
                free,
                lease_ms=self.config.lease_ms or 0,
                filter=self.config.filter,
                worker=self._presence.name,
                waiter=self._waiter,
                wait_ms=wait_ms,
            )
            # a short claim registered the pool for hand-offs of its free slots (unless jobs handed earlier
            # wait in its inbox: then it is not registered, and the wake token of the next job says so)
            registered = free - len(jobs) if self._waiter and len(jobs) < free else 0
            self._registered = (registered, asked + (wait_ms - HANDOFF_MARGIN_MS) / 1000)
            self._launch(jobs)
            if len(jobs) == free:
                return True
        return False

    def _capacity(self) -> int:
        """Claimed jobs the pool holds at most: its concurrency, its prefetch, a batch per batch kind."""
        return self.concurrency + self.config.prefetch + self._batches.room

    def _handoff_ms(self) -> int:
        """How long a short claim registers this pool for hand-offs: the wait that follows, plus a margin
        (0 when the pool takes none). A pool that dies while registered is handed jobs until then; they
        come back when their leases expire."""
        if not self._waiter:
            return 0
        return int(self.engine.block_limit_s(self._wait_s()) * 1000) + HANDOFF_MARGIN_MS

    def _wait_s(self) -> float:
        """The idle wait for more work (burst: something runs, wake often)."""
        wait_s = 0.2 if self.config.burst else self.config.idle_wait_s
        return min(wait_s, HANDOFF_WAIT_S) if self._waiter else wait_s

    def _refill_room(self, finished: int) -> int:
        """Jobs to claim with the completions of ``finished`` jobs (complete-and-claim): one for each, up
        to the capacity they leave (none once the pool stops). The slots free before that are the claim
        loop's: the two never claim the same slot."""
        if self._stopping or self._quiet:
            return 0
        return max(0, min(finished, self._capacity() - (len(self.in_flight) - finished)))

    def _launch_all(self, jobs: list[ClaimedJob]) -> None:
        """A round's claimed jobs: started; once a stop began, held for its release (a hard stop leaves
        them to their leases, as a crash would)."""
        if not self._stopping:
            self._launch(jobs)
        elif not self._hard:
            for job in jobs:
                self.in_flight[job.id] = Running(job)

    def _launch(self, jobs: list[ClaimedJob]) -> None:
        """Start a round's claimed jobs: a task each (a batch kind's gather), their queue wait observed
        per job; the claim and in-flight series counted once per queue and round."""
        if not jobs:
            return
        now = time.time()
        per_queue: dict[str, int] = {}
        for job in jobs:
            run = Running(job)
            self.in_flight[job.id] = run
            queue = job.queue
            per_queue[queue] = per_queue.get(queue, 0) + 1
            due = job.envelope.run_at or job.envelope.enqueued_at
            metrics.child(metrics.JOB_QUEUE_WAIT, queue).observe(max(0.0, now - due / 1000))
            if not self._batches.add(run):
                run.task = asyncio.create_task(self._execute(run), name=f"job:{job.id}")
        for queue, n in per_queue.items():
            metrics.child(metrics.JOBS_IN_FLIGHT, queue).inc(n)
            metrics.child(metrics.WORKER_CLAIMS, queue).inc(n)
            self._presence.claimed(queue, int(now * 1000))

    # ---- running --------------------------------------------------------------------------------
    def _executor(self, mode: str) -> Executor:
        if mode == "thread":
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="jobq")
            return self._threads
        if self._processes is None:  # multiprocessing's machinery: imported when a handler first needs it
            from concurrent.futures import ProcessPoolExecutor

            self._processes = ProcessPoolExecutor(max_workers=self.config.process_workers or None)
        return self._processes

    async def _admit(self, run: Running) -> tuple[bool, bool]:
        """With more jobs held than run at once: whether ``run``'s handler starts now, once it has a slot
        (handed back unstarted if none comes within half its lease; held unrun for its release if the stop
        began meanwhile), and whether it holds one. A job whose claim's lease ended before its handler could
        start (the loop was held up) is given up unrun: it may be another attempt's already
        (:meth:`_in_lease`, also without prefetch)."""
        job = run.job
        slot = await self._slots.take(max(job.lease_ms, 1_000) / 2000)
        if not slot:
            await hand_back_unstarted(self.engine, run)
            return False, False
        if self._stopping:
            return False, True
        return self._in_lease(run), True

    def _in_lease(self, run: Running) -> bool:
        """Whether ``run``'s lease still holds for its handler to start (else it is given up unrun)."""
        job = run.job
        if not self._keeper.extended(job.id) and self.engine.core.clock.now() >= job.lease_deadline_ms:
            self.abandon(job.id, "lease ended before its handler started")
            return False
        return True

    async def _execute(self, run: Running) -> None:
        job, label, slot = run.job, None, False
        try:
            if self._capacity() > self.concurrency:  # more held than run: wait for a slot
                start, slot = await self._admit(run)
            else:
                start = self._in_lease(run)
            if not start:
                return
            run.started = True
            graph = job.envelope.graph
            inputs = await self.engine.graphs.inputs(graph["id"], graph["node"]) if graph else None
            outcome = await run_handler(self.registry, job, self._executor, inputs, self.context)
            if slot:  # the next job starts while this one's outcome is on its way
                slot = False
                self._slots.give()
            label = await self._write_outcome(run, outcome)
        except asyncio.CancelledError:
            pass
        except StaleLease:  # the lease expired and the job was handed out again: that attempt owns it now
            log.warning("lease lost before the outcome was written; outcome dropped", job_id=job.id)
            metrics.JOBS_FINISHED.labels(job.queue, job.envelope.kind, "lost").inc()
        except Exception as exc:
            log.error("writing a job's outcome failed", job_id=job.id, error=repr(exc))
        finally:
            if slot:
                self._slots.give()
            if run.started or run.abandoned or not self._stopping:
                self._done(run, label)
            # else: a prefetched job the stop caught waiting: still ours, released unrun (release_rest)

    async def _write_outcome(self, run: Running, outcome: Outcome) -> str | None:
        """Write a finished handler's outcome (not for a job abandoned meanwhile): its metric label."""
        if run.abandoned:
            return None
        run.writing = True
        unknown = (self.config.unknown_kind_retry_ms, self.config.unknown_kind_dead_after_ms)
        await write_back(self.engine, self.registry, run.job, outcome, self._completions.complete, unknown)
        if reports(run.job):
            await report(self.engine, run.job)
        return outcome.label

    def _done(self, run: Running, label: str | None) -> None:
        """A job left the pool; ``label``: its outcome's, when one was written (and acknowledged). Once."""
        if self.in_flight.get(run.job.id) is not run:
            return
        del self.in_flight[run.job.id]
        self._slot_freed.set()
        if label is not None:
            self.processed += 1
        metrics.child(metrics.JOBS_IN_FLIGHT, run.job.queue).dec()
        if label is not None and self.signals.finished.enabled:  # nothing built unless a test listens
            self.signals.finished.signal((run.job.id, label))

    def _owned(self) -> list[tuple[ClaimedJob, float]]:
        """The running jobs whose leases this pool still holds (for the lease keeper), with their starts."""
        return [(run.job, run.started_at) for run in self.in_flight.values() if not run.abandoned]

    def abandon(self, job_id: str, why: str) -> None:
        """The lease keeper lost this job (lease stale, job canceled): stop it, write nothing back."""
        run = self.in_flight.get(job_id)
        if run is None or run.writing:  # finished meanwhile: its own write tells whether the lease held
            return
        run.abandoned = True
        log.warning("abandoning job", job_id=job_id, reason=why)
        metrics.JOBS_FINISHED.labels(run.job.queue, run.job.envelope.kind, "lost").inc()
        if run.task is not None and not run.batched:  # a batch's other jobs run on
            run.task.cancel()
