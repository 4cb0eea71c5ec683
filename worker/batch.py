"""Batch handlers: one handler call for many jobs of a kind, their outcomes written in one script call.

::

    @registry.job("metric.ingest", batch=500, batch_wait_ms=50)
    async def ingest(items: list[BatchItem]) -> None:
        rows = [item.args for item in items]
        for item, ok in zip(items, await store(rows)):
            if not ok:
                item.retry(5, "store refused the row")   # the others complete (result None)

**Gathering.** A queue mixes kinds, and a claim takes its jobs in one priority order whatever their kind:
a pool does not claim by kind. A pool holds up to ``concurrency + Σ batch`` claimed jobs, the sum over
the batch kinds registered on its queues (``queue=``): a whole batch per batch kind on top of its slots.
Claimed jobs of a batch kind (wherever registered) gather per kind until ``batch`` of them are there, or
``batch_wait_ms`` after the first one, then the handler runs once with them; single jobs still run at most
``concurrency`` at once, those claimed beyond it wait in the pool (leased) for a slot.

**Outcomes**, per item: ``complete(result)``, ``retry(delay_s)``, ``fail(error, permanent=...)``; an item
left alone completes when the handler returns. A handler that raises gives every item the outcome that
exception gives a single job (``Retry``, ``Cancel``, ``Snooze``, a timeout, any other error: failed with
the traceback, retried with the kind's backoff). An item whose ``args`` do not match ``payload`` fails
permanently before the call, and is not in the list. Completions and failures are written in one
``settle`` script call per queue; leases, tokens, attempts, dead letters and events are per job, exactly
as for single jobs (a job whose lease was lost meanwhile is left out; the other items still write).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import structlog

from jqcore import metrics
from jqcore.errors import Retry
from jqcore.log import get_logger
from jqengine import ClaimedJob, Code, Engine, Settle, StaleLease
from worker.execute import Outcome, outcome_of, result_bytes
from worker.hooks import WorkerContext
from worker.registry import JobSpec, PayloadInvalid, Registry
from worker.running import Running
from worker.writeback import Complete, attempts_used_up, report, reports, write_back

__all__ = ["BatchItem", "Batches"]

log = get_logger("worker.batch")

_SUCCESS = Outcome("success", "succeeded")


class BatchItem:
    """One job of a batch, as its handler sees it; set its outcome with one of the three methods."""

    __slots__ = ("_set", "args", "job", "worker")

    def __init__(self, job: ClaimedJob, args: Any, worker: WorkerContext) -> None:
        self.job = job
        self.args = args
        """The job's ``args`` (the validated model with ``payload=``)."""
        self.worker = worker
        """The pool's context (what its start-up hooks made)."""
        self._set: Callable[[JobSpec[Any, Any]], Outcome] | None = None

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def meta(self) -> Mapping[str, str]:
        return self.job.envelope.meta

    def complete(self, result: Any = None) -> None:
        """Completed; a JSON-serialisable ``result`` up to 64 KiB is kept."""
        self._set = lambda spec: Outcome(
            "success", "succeeded", None if spec.ignore_result else result_bytes(result)
        )

    def retry(self, delay_s: float | None = None, reason: str = "retry requested") -> None:
        """This attempt failed: again after ``delay_s`` (None: the kind's backoff) while attempts remain."""
        self._set = lambda spec: outcome_of(Retry(delay_s, reason), spec, self.job)

    def fail(self, error: str, *, permanent: bool = False) -> None:
        """This attempt failed with ``error``: retried with the kind's backoff, or errored at once when
        ``permanent`` (or its attempts are used up)."""
        self._set = lambda spec: Outcome(
            "failure",
            "failed",
            error=error,
            delay_ms=spec.backoff.delay_ms(self.job.attempt),
            permanent=permanent,
        )

    def outcome(self, spec: JobSpec[Any, Any]) -> Outcome:
        return _SUCCESS if self._set is None else self._set(spec)


class Batches:
    """A pool's batch kinds: gathers their claimed jobs, runs each batch's handler, writes the outcomes."""

    def __init__(
        self,
        registry: Registry,
        engine: Engine,
        queues: Sequence[str],
        context: WorkerContext,
        executor_for: Callable[[str], Executor],
        complete: Complete,
        done: Callable[[Running, str | None], None],
    ) -> None:
        """``complete``: the pool's coalesced completion; ``done(run, label)``: a job left the pool (its
        outcome label, None when none was written)."""
        self.registry, self.engine, self.context = registry, engine, context
        self._queues = set(queues)
        self.specs: dict[str, JobSpec[Any, Any]] = {}
        self.room = 0
        """The claimed jobs a pool holds beyond its concurrency (0: no batch kinds)."""
        self._executor_for, self._complete, self._done = executor_for, complete, done
        self._gathering: dict[str, list[Running]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def load(self) -> None:
        """Read the registry's batch kinds (at the pool's start: kinds registered after it was made too)."""
        self.specs = {s.kind: s for s in self.registry.kinds() if s.batch}
        self.room = sum(s.batch for s in self.specs.values() if s.queue in self._queues)

    # ---- gathering ------------------------------------------------------------------------------
    def add(self, run: Running) -> bool:
        """Take a claimed job of a batch kind (False: not a batch kind)."""
        spec = self.specs.get(run.job.envelope.kind)
        if spec is None:
            return False
        run.batched = True
        gathering = self._gathering.setdefault(spec.kind, [])
        gathering.append(run)
        if len(gathering) >= spec.batch:
            self._flush(spec.kind)
        elif len(gathering) == 1:
            loop = asyncio.get_running_loop()
            self._timers[spec.kind] = loop.call_later(spec.batch_wait_ms / 1000, self._flush, spec.kind)
        return True

    def _flush(self, kind: str) -> None:
        timer = self._timers.pop(kind, None)
        if timer is not None:
            timer.cancel()
        runs = []
        for run in self._gathering.pop(kind, []):
            if run.abandoned:  # its lease was lost while it gathered
                self._done(run, None)
            else:
                runs.append(run)
        if runs:
            task = asyncio.create_task(self._run(self.specs[kind], runs), name=f"batch:{kind}")
            for run in runs:
                run.task = task

    def close(self) -> None:
        """Stop gathering (the pool stops): the jobs gathered but not run are the pool's to release."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._gathering.clear()

    # ---- running --------------------------------------------------------------------------------
    async def _run(self, spec: JobSpec[Any, Any], runs: list[Running]) -> None:
        labels: dict[str, str] = {}
        try:
            outcomes = await self._call(spec, runs)
            labels = await self._write(spec, [r for r in runs if not r.abandoned], outcomes)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # Redis away: the leases expire and the jobs come back
            log.error("writing a batch's outcomes failed", kind=spec.kind, jobs=len(runs), error=repr(exc))
        finally:
            for run in runs:
                self._done(run, labels.get(run.job.id))

    async def _call(self, spec: JobSpec[Any, Any], runs: list[Running]) -> dict[str, Outcome]:
        """Run the handler once for the batch; every job's outcome."""
        outcomes: dict[str, Outcome] = {}
        items: list[BatchItem] = []
        for run in runs:
            run.started = True
            job = run.job
            try:
                args = spec.payload.model_validate(job.envelope.args) if spec.payload else job.envelope.args
            except Exception as exc:
                outcomes[job.id] = outcome_of(
                    PayloadInvalid(f"{spec.kind}: args do not match: {exc}"), spec, job
                )
                continue
            items.append(BatchItem(job, args, self.context))
        queue = runs[0].job.queue
        metrics.child(metrics.JOBS_STARTED, queue, spec.kind).inc(len(runs))
        started = time.perf_counter()
        # the handler's log lines carry the queue and the kind (a batch has no one job id)
        with structlog.contextvars.bound_contextvars(queue=queue, kind=spec.kind, batch=len(items)):
            try:
                if items:
                    async with asyncio.timeout(spec.timeout_s):
                        await self._invoke(spec, items)
                for item in items:
                    outcomes[item.id] = item.outcome(spec)
            except Exception as exc:
                for item in items:
                    outcomes[item.id] = outcome_of(exc, spec, item.job)
                _log_failure(exc, items, outcomes)
            finally:
                metrics.child(metrics.JOB_RUN_TIME, queue, spec.kind).observe(time.perf_counter() - started)
        return outcomes

    async def _invoke(self, spec: JobSpec[Any, Any], items: list[BatchItem]) -> None:
        if spec.mode == "async":
            await spec.fn(items)
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor_for("thread"), functools.partial(spec.fn, items))

    async def _write(
        self, spec: JobSpec[Any, Any], runs: list[Running], outcomes: Mapping[str, Outcome]
    ) -> dict[str, str]:
        """Complete and fail in one ``settle`` call per queue, the rest (cancel, snooze) one by one;
        the label of each outcome written (a job whose lease was lost has none)."""
        by_queue: dict[str, list[tuple[ClaimedJob, Settle]]] = {}
        others: list[ClaimedJob] = []
        for run in runs:
            run.writing = True
            job, o = run.job, outcomes[run.job.id]
            owner = (job.id, job.attempt, job.token)
            if o.kind == "success":
                by_queue.setdefault(job.queue, []).append((job, Settle(owner, o.result)))
            elif o.kind == "failure":
                permanent = o.permanent or attempts_used_up(self.registry, job)
                settle = Settle(owner, None, o.error or "failed", o.delay_ms or 0, permanent)
                by_queue.setdefault(job.queue, []).append((job, settle))
            else:
                others.append(job)
        labels: dict[str, str] = {}
        for queue, pairs in by_queue.items():
            labels |= await self._settle(spec, queue, pairs, outcomes)
        for job in others:
            try:
                await write_back(self.engine, self.registry, job, outcomes[job.id], self._complete, (0, 0))
                labels[job.id] = outcomes[job.id].label
            except StaleLease:
                _lost(job)
        for run in runs:
            if run.job.id in labels and reports(run.job):
                await report(self.engine, run.job)
        return labels

    async def _settle(
        self,
        spec: JobSpec[Any, Any],
        queue: str,
        pairs: list[tuple[ClaimedJob, Settle]],
        outcomes: Mapping[str, Outcome],
    ) -> dict[str, str]:
        answers = await self.engine.jobs.settle(queue, [s for _, s in pairs])
        labels: dict[str, str] = {}
        counted: Counter[str] = Counter()
        for (job, _), (code, _) in zip(pairs, answers, strict=True):
            if code in (Code.STALE, Code.MISSING):
                _lost(job)
                continue
            labels[job.id] = outcomes[job.id].label
            counted[labels[job.id]] += 1
        for label, n in counted.items():
            metrics.child(metrics.JOBS_FINISHED, queue, spec.kind, label).inc(n)
        return labels


def _lost(job: ClaimedJob) -> None:
    log.warning("lease lost before the outcome was written; outcome dropped", job_id=job.id)
    metrics.JOBS_FINISHED.labels(job.queue, job.envelope.kind, "lost").inc()


def _log_failure(exc: BaseException, items: Sequence[BatchItem], outcomes: Mapping[str, Outcome]) -> None:
    """A batch handler raised: one line for the call, with its traceback and the jobs it failed (``error``
    when none of them is retried, else ``warning``)."""
    failed = [i for i in items if outcomes[i.id].kind == "failure"]
    if not failed:  # Cancel, Snooze: not a failure
        return
    final = all(outcomes[i.id].permanent for i in failed)
    fields = {
        "outcome": outcomes[failed[0].id].label,
        "error": f"{type(exc).__name__}: {exc}"[:500],
        "job_ids": [i.id for i in failed[:20]],
        "attempts": sorted({i.attempt for i in failed}),
        "final": final,
    }
    (log.error if final else log.warning)("batch handler failed", exc_info=exc, **fields)
