"""Double writes while an application moves from Celery or RQ to jobq (``docs/migrating.md``).

Slack moved its job queue the same way: the application keeps enqueueing into its old queue and, for each
call, enqueues the same work into jobq; jobq's relay runs in shadow mode on those jobs (``jobq relay
--shadow``: it reads and counts, writes nothing, so no handler runs twice) until the counts agree; then the
work moves over kind by kind. These wrappers make the old calls do both, with no change at the call sites::

    from jobq.migrate import celery_task, rq_queue

    # Celery: one task, one jobq kind
    send_welcome = celery_task(send_welcome, "email.welcome", queue="emails")
    send_welcome.delay(42)                               # Celery's task, and a jobq job of email.welcome

    # RQ: a queue, its functions mapped to kinds (a function not in the map stays RQ's only)
    q = rq_queue(Queue("default", connection=redis), {resize: "image.resize"})
    q.enqueue(resize, "cat.png", width=200)

    # cut over, kind by kind: these kinds go to jobq only (a collection, or a callable read at each call)
    send_welcome = celery_task(send_welcome, "email.welcome", queue="emails", cut_over={"email.welcome"})

Neither Celery nor RQ is imported: the wrappers are duck-typed against their documented calling APIs —
Celery's ``Task.delay(*args, **kwargs)`` and ``Task.apply_async(args=None, kwargs=None, task_id=None,
producer=None, link=None, link_error=None, shadow=None, **options)``; RQ's ``Queue.enqueue(f, *args,
**kwargs)``, ``enqueue_call(func, args=None, kwargs=None, ...)``, ``enqueue_in(time_delta, func, *args,
**kwargs)`` and ``enqueue_at(datetime, f, *args, **kwargs)`` — and everything else (``task.s(...)``,
``queue.count``, calling the task) reaches the wrapped object unchanged.

What the jobq job gets: the same arguments (positional ones as a list, keyword ones as an object; both at
once are bound to the function's signature and sent as keywords), the old system's id as its id (Celery's
task id, RQ's job id: the two sides' counts compare one to one), and the timing options jobq has —
``countdown``/``eta``/``expires`` (Celery), ``enqueue_in``/``enqueue_at``/``ttl``/``job_id``/``meta``
(RQ). Options with no jobq twin (Celery's ``priority`` and routing, RQ's ``depends_on``, ``retry``,
``job_timeout``) are not carried: give the jobq kind its own ``priority=``, ``max_attempts=``,
``timeout=`` and use a graph for dependencies.

While both are written, the old queue is the source of truth: a failed jobq write is logged and counted
(``failed``), never raised, unless ``strict=True``. Once a kind is cut over, a call goes to jobq only and
returns its :class:`~jqruntime.client.JobHandle` instead of Celery's ``AsyncResult`` or RQ's ``Job``.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from jqcore.envelope_rules import ID_PATTERN
from jqruntime.client import Client, JobHandle, JobOptions, default_client

__all__ = ["CeleryTask", "DoubleWrite", "RQQueue", "celery_task", "rq_queue"]

log = logging.getLogger("jobq.migrate")
_ID = re.compile(ID_PATTERN)

CutOver = Collection[str] | Callable[[], Collection[str]]
"""The kinds that go to jobq only: a collection, or a callable asked at each call (a feature flag)."""

RQ_RESERVED = (
    "job_timeout",
    "description",
    "result_ttl",
    "ttl",
    "failure_ttl",
    "depends_on",
    "job_id",
    "at_front",
    "meta",
    "retry",
    "on_success",
    "on_failure",
    "on_stopped",
    "pipeline",
)
"""The keyword arguments RQ's ``Queue.enqueue`` keeps (``Queue.parse_args``), not the function's."""


@dataclass
class DoubleWrite:
    """What both wrappers share: which kinds are cut over, the jobq write, and its counts."""

    cut_over: CutOver = ()
    client: Client | None = None
    """The jobq client (default: the process's, ``jobq.Client.from_env()``; ``jobq.testing``'s in a test)."""
    strict: bool = False
    """Raise a failed jobq write while both are written (default: log it and count it)."""
    written: int = 0
    """Jobs written to jobq (both phases)."""
    failed: int = 0
    """jobq writes that failed while the old queue was written (logged, not raised)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def is_cut_over(self, kind: str) -> bool:
        kinds = self.cut_over() if callable(self.cut_over) else self.cut_over
        return kind in kinds

    def write(
        self,
        queue: str,
        kind: str,
        call: tuple[Any, Sequence[Any] | None, Mapping[str, Any] | None],
        options: JobOptions,
        *,
        beside_old: bool,
    ) -> JobHandle[Any] | None:
        """Enqueue ``call`` — (the function, its positional and its keyword arguments) — into jobq as a job of
        ``kind``. While the old queue was written too (``beside_old``), a failure is logged, counted and
        answered None, unless ``strict``."""
        fn, args, kwargs = call
        try:
            value = _jobq_args(fn, args, kwargs)
            handle = (self.client or default_client()).enqueue_kind(queue, kind, value, options)
        except Exception:
            if not beside_old or self.strict:
                raise
            with self._lock:
                self.failed += 1
            log.warning("jobq double write failed (the old queue has the job): %s", kind, exc_info=True)
            return None
        with self._lock:
            self.written += 1
        return handle


def _jobq_args(fn: Any, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> Any:
    """One JSON value for the job, as ``JobSpec.message`` makes it: a list of the positional arguments or
    an object of the keyword ones; both at once are bound to ``fn``'s signature and sent as keywords."""
    positional, named = list(args or ()), dict(kwargs or {})
    if not named:
        return positional if positional else {}
    if not positional:
        return named
    if not callable(fn):
        raise TypeError(
            f"{fn!r}: positional and keyword arguments at once need the function's signature "
            "(jobq's args are one JSON value)"
        )
    bound = inspect.signature(fn).bind(*positional, **named)
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"{fn!r}: *{name} beside keyword arguments has no one-JSON-value form")
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def _same_id(value: object) -> str | None:
    """The old system's id as the jobq job's, when it is a valid jobq id (Celery's and RQ's uuids are)."""
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _after(span: float | timedelta | datetime | None) -> int | None:
    """``expires``/``ttl`` (seconds from now, a timedelta, or a datetime) in ms since the epoch."""
    if span is None:
        return None
    if isinstance(span, datetime):
        return _ms(span)
    seconds = span.total_seconds() if isinstance(span, timedelta) else float(span)
    return int((time.time() + seconds) * 1000)


def _with_id(options: JobOptions, old: object) -> JobOptions:
    """``options`` with the old system's id of the job (its ``.id``) as the jobq job's."""
    return replace(options, id=_same_id(getattr(old, "id", None)) or options.id)


class CeleryTask:
    """A Celery task whose calls also enqueue its work into jobq as ``kind`` (see the module)."""

    def __init__(self, task: Any, kind: str, *, queue: str = "default", writes: DoubleWrite) -> None:
        self._task, self.kind, self.queue, self.writes = task, kind, queue, writes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task's body here, as Celery's ``task(...)`` does: no message to either."""
        return self._task(*args, **kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's ``delay``; and the same job in jobq."""
        return self._send(lambda: self._task.delay(*args, **kwargs), args, kwargs, JobOptions())

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        **options: Any,
    ) -> Any:
        """Celery's ``apply_async``; and the same job in jobq, with ``countdown`` (→ ``delay``), ``eta`` (→
        ``run_at``) and ``expires`` (→ ``expires_at``)."""
        eta = options.get("eta")
        jobq = JobOptions(
            delay=options.get("countdown"),
            run_at=_ms(eta) if isinstance(eta, datetime) else None,
            expires_at=_after(options.get("expires")),
            id=_same_id(task_id),
        )
        old = lambda: self._task.apply_async(args, kwargs, task_id=task_id, **options)  # noqa: E731
        return self._send(old, args, kwargs, jobq)

    def _send(
        self,
        old: Callable[[], Any],
        args: Sequence[Any] | None,
        kwargs: Mapping[str, Any] | None,
        options: JobOptions,
    ) -> Any:
        call = (getattr(self._task, "run", None), args, kwargs)
        if self.writes.is_cut_over(self.kind):
            return self.writes.write(self.queue, self.kind, call, options, beside_old=False)
        result = old()
        self.writes.write(self.queue, self.kind, call, _with_id(options, result), beside_old=True)
        return result


class RQQueue:
    """An RQ queue whose enqueues of mapped functions also enqueue the work into jobq (see the module)."""

    def __init__(self, queue: Any, kinds: Mapping[Any, str], *, jobq_queue: str, writes: DoubleWrite) -> None:
        self._queue, self.kinds, self.jobq_queue, self.writes = queue, dict(kinds), jobq_queue, writes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)

    def kind_of(self, f: Any) -> str | None:
        """The jobq kind of an enqueued function (it or its dotted path in ``kinds``); None: RQ's only."""
        try:
            found = self.kinds.get(f)
        except TypeError:  # an unhashable callable: by its path only
            found = None
        if found is None and callable(f) and not isinstance(f, str):
            found = self.kinds.get(f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', '')}")
        return found

    def enqueue(self, f: Any, *args: Any, **kwargs: Any) -> Any:
        """RQ's ``Queue.enqueue``; and, for a mapped function, the same job in jobq."""
        return self._send(lambda: self._queue.enqueue(f, *args, **kwargs), f, args, kwargs, None)

    def enqueue_in(self, time_delta: timedelta, func: Any, *args: Any, **kwargs: Any) -> Any:
        """RQ's ``Queue.enqueue_in``; the jobq job delayed as long."""
        old = lambda: self._queue.enqueue_in(time_delta, func, *args, **kwargs)  # noqa: E731
        return self._send(old, func, args, kwargs, time_delta)

    def enqueue_at(self, datetime: datetime, f: Any, *args: Any, **kwargs: Any) -> Any:
        """RQ's ``Queue.enqueue_at``; the jobq job due at the same time."""
        old = lambda: self._queue.enqueue_at(datetime, f, *args, **kwargs)  # noqa: E731
        return self._send(old, f, args, kwargs, datetime)

    def enqueue_call(
        self,
        func: Any,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        """RQ's ``Queue.enqueue_call`` (its options by name: ``ttl``, ``job_id``, ``meta``...)."""
        old = lambda: self._queue.enqueue_call(func, args, kwargs, **options)  # noqa: E731
        return self._send(old, func, (), {"args": args or (), "kwargs": kwargs or {}, **options}, None)

    def _send(
        self,
        old: Callable[[], Any],
        f: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        when: timedelta | datetime | None,
    ) -> Any:
        kind = self.kind_of(f)
        if kind is None:
            return old()
        fn_args, fn_kwargs, given = _rq_split(args, kwargs)
        meta = given.get("meta")
        options = JobOptions(
            delay=when if isinstance(when, timedelta) else None,
            run_at=_ms(when) if isinstance(when, datetime) else None,
            id=_same_id(given.get("job_id")),
            expires_at=_after(given.get("ttl")),
            meta={k: v for k, v in meta.items() if isinstance(v, str)} if isinstance(meta, Mapping) else None,
        )
        call = (f, fn_args, fn_kwargs)
        if self.writes.is_cut_over(kind):
            return self.writes.write(self.jobq_queue, kind, call, options, beside_old=False)
        job = old()
        self.writes.write(self.jobq_queue, kind, call, _with_id(options, job), beside_old=True)
        return job


def _rq_split(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[Sequence[Any], dict[str, Any], dict[str, Any]]:
    """An RQ enqueue's (function args, function kwargs, RQ's own options), as ``Queue.parse_args`` splits
    them: its reserved names are RQ's; ``args=``/``kwargs=`` given explicitly are the function's."""
    rest = dict(kwargs)
    given = {name: rest.pop(name) for name in RQ_RESERVED if name in rest}
    if "args" in rest or "kwargs" in rest:
        return tuple(rest.pop("args", None) or ()), dict(rest.pop("kwargs", None) or {}), {**given, **rest}
    return args, rest, given


def celery_task(
    task: Any,
    kind: str,
    *,
    queue: str = "default",
    cut_over: CutOver = (),
    client: Client | None = None,
    strict: bool = False,
) -> CeleryTask:
    """``task`` (a Celery task) whose ``delay``/``apply_async`` also enqueue into jobq's ``queue`` as ``kind``
    — or, once ``kind`` is in ``cut_over``, into jobq only."""
    return CeleryTask(task, kind, queue=queue, writes=DoubleWrite(cut_over, client, strict))


def rq_queue(
    queue: Any,
    kinds: Mapping[Any, str],
    *,
    jobq_queue: str | None = None,
    cut_over: CutOver = (),
    client: Client | None = None,
    strict: bool = False,
) -> RQQueue:
    """``queue`` (an RQ queue) whose enqueues of a function in ``kinds`` (the function, or its dotted path →
    its jobq kind) also enqueue into jobq (``jobq_queue``, default the RQ queue's name) — or, once the kind
    is in ``cut_over``, into jobq only."""
    name = jobq_queue or str(getattr(queue, "name", "default"))
    return RQQueue(queue, kinds, jobq_queue=name, writes=DoubleWrite(cut_over, client, strict))
