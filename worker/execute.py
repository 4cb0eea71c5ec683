"""Running one claimed job's handler and turning what happened into an :class:`Outcome`.

While a job runs, its ``job_id``, ``queue``, ``kind``, ``attempt`` and ``trace_id`` (when it has a trace)
are bound into structlog's context variables: every line logged meanwhile by the pool, the middleware
(:mod:`worker.middleware`) and the handler — through structlog or the standard library's ``logging``, both
routed by :mod:`jqcore.log`, and in a thread handler's thread too — carries them. A failed attempt (an
exception, a timeout, a ``Retry``) is logged with its traceback: at ``error`` when it is the job's last
(a permanent failure, or its attempts are known to be used up), at ``warning`` while it may be retried.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import structlog
from pydantic import BaseModel

from jqcore import metrics
from jqcore.envelope import Envelope
from jqcore.errors import Cancel, Retry, Snooze
from jqcore.log import get_logger
from jqengine import MAX_RESULT_BYTES, ClaimedJob, NodeInputs
from jqruntime import tracing
from worker.builtin import builtin
from worker.hooks import WorkerContext
from worker.middleware import run_through
from worker.registry import JobContext, JobSpec, PayloadInvalid, Registry, set_current_job
from worker.tail import Deferred, Policy

__all__ = ["Outcome", "log_failure", "outcome_of", "result_bytes", "run_handler"]

log = get_logger("worker")


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


_SUCCEEDED = Outcome("success", "succeeded")
"""A success without a result kept (outcomes are frozen: one shared)."""


def _context(
    job: ClaimedJob,
    spec: JobSpec[Any, Any] | None,
    inputs: NodeInputs | None = None,
    worker: WorkerContext | None = None,
) -> JobContext:
    env = job.envelope
    return JobContext(  # by position: a third cheaper than by keyword, per job
        env.id,
        env.queue,
        env.kind,
        job.attempt,
        env.max_attempts or (spec.max_attempts if spec else None),
        env.meta,
        env.enqueued_at,
        spec.timeout_s if spec else None,
        inputs,
        worker if worker is not None else WorkerContext(),
    )


async def _call(
    spec: JobSpec[Any, Any],
    job: ClaimedJob,
    executor_for: Callable[[str], Executor],
    inputs: NodeInputs | None,
    ctx: JobContext,
) -> Any:
    args, kwargs = spec.bind(job.envelope.args)
    if inputs is not None:  # a graph node: its parents' results as its feed says (jqcore.graphs)
        args = (*args, *inputs.fed())
    if spec.mode == "async":
        return await spec.fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    if spec.mode == "thread":
        copied = contextvars.copy_context()  # the thread runs in the job's context: current_job(), log fields
        return await loop.run_in_executor(
            executor_for("thread"), functools.partial(copied.run, spec.fn, *args, **kwargs)
        )
    return await loop.run_in_executor(executor_for("process"), functools.partial(spec.fn, *args, **kwargs))


async def _bounded(call: Awaitable[Any], timeout_s: float) -> Any:
    """``call`` cancelled after ``timeout_s`` (TimeoutError). asyncio.timeout, not wait_for: on 3.11 wait_for
    runs the call in a task of its own (a task, two futures and callbacks per job)."""
    async with asyncio.timeout(timeout_s):
        return await call


def result_bytes(value: Any) -> bytes | None:
    """A handler's return value as the JSON kept with its job (pydantic models and dataclasses included);
    None when it is not JSON or larger than ``MAX_RESULT_BYTES``."""
    if value is None:
        return None
    try:
        data = orjson.dumps(value, default=_model)
    except TypeError:
        return None
    return data if len(data) <= MAX_RESULT_BYTES else None


def _model(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON")


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
    own = registry.get(job.envelope.kind)
    spec = own or builtin.get(job.envelope.kind)
    if spec is None:  # a rolling deploy: another pool (or the next version) knows this kind
        return Outcome("unhandled", "handed_back", error=f"no handler for kind {job.envelope.kind!r}")
    metrics.child(metrics.JOBS_STARTED, job.queue, spec.kind).inc()
    ctx = _context(job, spec, inputs, worker)
    # the jobq's own kinds (the canary's) run without the application's middleware
    layers = registry.job_middleware if own is not None else []

    def handler() -> Awaitable[Any]:  # innermost: the kind's timeout bounds the handler, not the layers
        call = _call(spec, job, executor_for, inputs, ctx)
        return call if spec.timeout_s is None else _bounded(call, spec.timeout_s)

    current = set_current_job(ctx)  # the handler's and the middleware's current_job()
    try:
        with tracing.run_span(job.envelope, job.attempt) as span:  # off: a shared no-op
            bound = _bind(log_fields(job, span))
            started = time.perf_counter()
            try:
                value = await (run_through(layers, ctx, handler) if layers else handler())
                outcome = _classified(spec, value, graph=inputs is not None)
            except Exception as exc:
                outcome = outcome_of(exc, spec, job)
                if outcome.kind == "failure":
                    tracing.run_failed(span, exc, outcome.label)
                    log_failure(exc, outcome, ctx.max_attempts, job.attempt)
            finally:
                elapsed = time.perf_counter() - started
                metrics.child(metrics.JOB_RUN_TIME, job.queue, spec.kind).observe(elapsed)
                for token in reversed(bound):
                    token.var.reset(token)
            tracing.run_outcome(span, outcome.label)
    finally:
        current.var.reset(current)
    return outcome


def _classified(spec: JobSpec[Any, Any], value: Any, *, graph: bool) -> Outcome:
    """The outcome of a handler that returned ``value``."""
    kept = None if spec.ignore_result else result_bytes(value)
    if graph and value is not None and kept is None and not spec.ignore_result:
        # a graph node's result is its children's input: never dropped silently
        error = f"ResultInvalid: the result is not JSON or exceeds {MAX_RESULT_BYTES} bytes"
        log.error("job attempt failed: its result is invalid", final=True, outcome="failed", error=error)
        return Outcome("failure", "failed", error=error, permanent=True)
    return Outcome("success", "succeeded", result=kept) if kept is not None else _SUCCEEDED


_LOG_VARS: dict[str, contextvars.ContextVar[Any]] = {}
"""structlog's context variable of each job field, once it was bound (:func:`_bind`)."""


def _bind(fields: dict[str, Any]) -> list[contextvars.Token[Any]]:
    """Bind ``fields`` into structlog's context variables (``structlog.contextvars``: a handler, its
    middleware and an application's own structlog configuration see them), set directly once known: its
    ``bind_contextvars`` and ``reset_contextvars`` name each variable again per call (~2 µs a job). Reset
    the tokens in reverse order (``bound_contextvars`` would read every context variable to restore)."""
    tokens = []
    for key, value in fields.items():
        var = _LOG_VARS.get(key)
        if var is None:  # the first job: structlog makes (or finds) the key's variable
            token = structlog.contextvars.bind_contextvars(**{key: value})[key]
            _LOG_VARS[key] = token.var
            tokens.append(token)
        else:
            tokens.append(var.set(value))
    return tokens


def log_fields(job: ClaimedJob, span: Any = None) -> dict[str, Any]:
    """The fields bound into the log context while ``job`` runs (``span``: its run span, when traced)."""
    env = job.envelope
    fields: dict[str, Any] = {"job_id": env.id, "queue": env.queue, "kind": env.kind, "attempt": job.attempt}
    trace_id = tracing.trace_id(span, env.trace)
    if trace_id is not None:
        fields["trace_id"] = trace_id
    return fields


def log_failure(exc: BaseException, outcome: Outcome, max_attempts: int | None, attempt: int) -> None:
    """Log a failed attempt with its traceback (the job's fields come from the bound context): ``error``
    when no attempt follows (a permanent failure, or ``attempt`` reached ``max_attempts``), else
    ``warning``. ``max_attempts`` None: the queue's default decides, unknown here (``warning``)."""
    last = outcome.permanent or (max_attempts is not None and attempt >= max_attempts)
    fields: dict[str, Any] = {"outcome": outcome.label, "error": f"{type(exc).__name__}: {exc}"[:500]}
    if max_attempts is not None:
        fields["max_attempts"] = max_attempts
    if not last and outcome.delay_ms is not None:
        fields["retry_in_ms"] = outcome.delay_ms
    what = {"timeout": "job attempt timed out", "retried": "job attempt failed (Retry)"}
    event = what.get(outcome.label, "job attempt failed")
    if last:
        log.error(event, final=True, exc_info=exc, **fields)
    else:
        log.warning(event, final=False, exc_info=exc, **fields)


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
    permanent = spec.permanent(exc)  # the kind's retry_on / permanent_on
    if isinstance(exc, TimeoutError):
        error = f"timeout after {spec.timeout_s}s"
        return Outcome("failure", "timeout", error=error, delay_ms=_backoff(spec, job), permanent=permanent)
    error = "".join(traceback.format_exception(exc, limit=20))
    return Outcome("failure", "failed", error=error, delay_ms=_backoff(spec, job), permanent=permanent)


def _backoff(spec: JobSpec[Any, Any], job: ClaimedJob) -> int:
    """The kind's retry delay after this attempt (the one policy, :class:`jqcore.backoff.Backoff`)."""
    return spec.backoff.delay_ms(job.attempt)
