"""Running one claimed job's handler and turning what happened into an :class:`Outcome`."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from jqcore import metrics
from jqcore.envelope import Envelope
from jqcore.errors import Cancel, Retry, Snooze
from jqengine import MAX_RESULT_BYTES, ClaimedJob, NodeInputs
from jqruntime import tracing
from worker.builtin import builtin
from worker.hooks import WorkerContext
from worker.registry import JobContext, JobSpec, PayloadInvalid, Registry, set_current_job
from worker.tail import Deferred, Policy

__all__ = ["Outcome", "outcome_of", "result_bytes", "run_handler"]


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: Literal["success", "failure", "cancel", "snooze", "unhandled", "defer"]
    label: str
    """Metric outcome: succeeded, failed, retried, timeout, canceled, snoozed, handed_back, deferred."""
    result: bytes | None = None
    error: str | None = None
    delay_ms: int | None = None
    permanent: bool = False
    child: Envelope | None = None
    """A tail call's job (``defer``: :func:`worker.defer_to`); ``delay_ms`` is the retry delay then."""
    on_failure: Policy = "fail"


def _context(
    job: ClaimedJob,
    spec: JobSpec[Any, Any] | None,
    inputs: NodeInputs | None = None,
    worker: WorkerContext | None = None,
) -> JobContext:
    env = job.envelope
    return JobContext(
        id=env.id,
        queue=env.queue,
        kind=env.kind,
        attempt=job.attempt,
        max_attempts=env.max_attempts or (spec.max_attempts if spec else None),
        meta=env.meta,
        enqueued_at=env.enqueued_at,
        deadline_s=spec.timeout_s if spec else None,
        graph=inputs,
        worker=worker if worker is not None else WorkerContext(),
    )


async def _call(
    spec: JobSpec[Any, Any],
    job: ClaimedJob,
    executor_for: Callable[[str], Executor],
    inputs: NodeInputs | None = None,
    worker: WorkerContext | None = None,
) -> Any:
    args, kwargs = spec.bind(job.envelope.args)
    if inputs is not None:  # a graph node: its parents' results as its feed says (jqcore.graphs)
        args = (*args, *inputs.fed())
    ctx = _context(job, spec, inputs, worker)
    if spec.mode == "async":
        set_current_job(ctx)
        return await spec.fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    if spec.mode == "thread":
        copied = contextvars.copy_context()
        copied.run(set_current_job, ctx)
        return await loop.run_in_executor(
            executor_for("thread"), functools.partial(copied.run, spec.fn, *args, **kwargs)
        )
    return await loop.run_in_executor(executor_for("process"), functools.partial(spec.fn, *args, **kwargs))


def result_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        data = orjson.dumps(value)
    except TypeError:
        return None
    return data if len(data) <= MAX_RESULT_BYTES else None


async def run_handler(
    registry: Registry,
    job: ClaimedJob,
    executor_for: Callable[[str], Executor],
    inputs: NodeInputs | None = None,
    worker: WorkerContext | None = None,
) -> Outcome:
    """Run the job's handler (with its timeout) and classify the result. Never raises for handler errors.
    ``inputs``: a graph node's view of its graph (fed to the handler, ``current_job().graph``); ``worker``:
    the pool's context (``current_job().worker``)."""
    spec = registry.get(job.envelope.kind) or builtin.get(job.envelope.kind)
    if spec is None:  # a rolling deploy: another pool (or the next version) knows this kind
        return Outcome("unhandled", "handed_back", error=f"no handler for kind {job.envelope.kind!r}")
    metrics.child(metrics.JOBS_STARTED, job.queue, spec.kind).inc()
    started = time.perf_counter()
    with tracing.run_span(job.envelope, job.attempt) as span:  # off: a shared no-op
        try:
            value = await asyncio.wait_for(_call(spec, job, executor_for, inputs, worker), spec.timeout_s)
            kept = None if spec.ignore_result else result_bytes(value)
            outcome = Outcome("success", "succeeded", result=kept)
            if inputs is not None and value is not None and kept is None and not spec.ignore_result:
                outcome = Outcome(  # a graph node's result is its children's input: never dropped silently
                    "failure",
                    "failed",
                    error=f"ResultInvalid: the result is not JSON or exceeds {MAX_RESULT_BYTES} bytes",
                    permanent=True,
                )
        except Exception as exc:
            outcome = outcome_of(exc, spec, job)
            if outcome.kind == "failure":
                tracing.run_failed(span, exc, outcome.label)
        finally:
            metrics.child(metrics.JOB_RUN_TIME, job.queue, spec.kind).observe(time.perf_counter() - started)
        tracing.run_outcome(span, outcome.label)
    return outcome


def outcome_of(exc: Exception, spec: JobSpec[Any, Any], job: ClaimedJob) -> Outcome:
    """What a handler's exception means for its job."""
    if isinstance(exc, Retry):  # Retry(0) retries at once; Retry() takes the kind's backoff
        delay = _backoff(spec, job) if exc.delay_s is None else max(0, int(exc.delay_s * 1000))
        return Outcome("failure", "retried", error=f"Retry: {exc.reason}", delay_ms=delay)
    if isinstance(exc, Cancel):
        return Outcome("cancel", "canceled", error=f"Cancel: {exc.reason}")
    if isinstance(exc, Deferred):
        return Outcome(
            "defer", "deferred", child=exc.child, on_failure=exc.on_failure, delay_ms=_backoff(spec, job)
        )
    if isinstance(exc, Snooze):
        return Outcome("snooze", "snoozed", delay_ms=int(exc.delay_s * 1000))
    if isinstance(exc, PayloadInvalid):
        return Outcome("failure", "failed", error=exc.message, permanent=True)
    if isinstance(exc, TimeoutError):
        return Outcome(
            "failure", "timeout", error=f"timeout after {spec.timeout_s}s", delay_ms=_backoff(spec, job)
        )
    error = "".join(traceback.format_exception(exc, limit=20))
    return Outcome("failure", "failed", error=error, delay_ms=_backoff(spec, job))


def _backoff(spec: JobSpec[Any, Any], job: ClaimedJob) -> int:
    """The kind's retry delay after this attempt (the one policy, :class:`jqcore.backoff.Backoff`)."""
    return spec.backoff.delay_ms(job.attempt)
