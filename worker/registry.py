"""The job registry: a decorator binds a stable ``kind`` name to a handler, with per-kind options.

::

    jobs = Registry()

    @jobs.job("email.send", queue="emails", timeout=30, max_attempts=5)
    async def send_email(to: str, subject: str) -> None: ...

    @jobs.job("report.render", mode="process")       # CPU-bound: runs in a process pool
    def render(report_id: int) -> dict[str, int]: ...

    class Resize(BaseModel):
        url: str
        width: int

    @jobs.job("image.resize", payload=Resize)          # args validated; a failure is permanent
    def resize(p: Resize) -> None: ...

``args`` maps onto the call: a JSON object becomes keyword arguments, an array positional arguments,
anything else one positional argument; with ``payload=`` the handler receives the validated model. The
running job's details are available to a handler through :func:`current_job`. ``kind`` names are
stable identifiers, never Python qualnames, so renaming a function never strands queued jobs.
"""

from __future__ import annotations

import contextvars
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from pydantic import BaseModel, ValidationError

from jqcore.backoff import Backoff
from jqcore.envelope import validate_name
from jqcore.errors import JobqError
from jqengine import NodeInputs
from worker.hooks import Hook, WorkerContext
from worker.middleware import Layer, layer_of

if TYPE_CHECKING:  # the HTTP client (aiohttp) is only needed by code that enqueues
    from jqruntime.client import AsyncJobHandle, JobHandle, JobOptions

__all__ = [
    "Backoff",
    "JobContext",
    "JobSpec",
    "PayloadInvalid",
    "Registry",
    "current_job",
    "set_current_job",
]

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M")
Exceptions = type[BaseException] | tuple[type[BaseException], ...]
"""Exception classes a kind's ``retry_on``/``permanent_on`` names (what ``except`` takes)."""
Mode = Literal["async", "thread", "process"]
Delivery = Literal["at_least_once", "at_most_once"]


class PayloadInvalid(JobqError):
    """The job's ``args`` do not match the handler's payload model (a permanent failure)."""

    code = "payload_invalid"


_SCHEDULE_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def _check_cron(kind: str, queue: str, cron: str, tz: str) -> None:
    """A ``cron=`` that no schedule could take fails at the decorator (where the server extra, with its
    cron parser, is installed; ``jobq apply`` checks it in any case)."""
    try:
        from jqcore.cron import CronSchedule  # croniter: the server extra
    except ImportError:
        return
    name = _SCHEDULE_CHARS.sub("-", kind)[:64]
    try:
        CronSchedule.model_validate({"name": name, "queue": queue, "kind": kind, "cron": cron, "tz": tz})
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ValueError(f"{kind}: cron={cron!r} (tz {tz!r}): {problems}") from None


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a running handler may want to know about its job."""

    id: str
    queue: str
    kind: str
    attempt: int
    max_attempts: int | None
    meta: Mapping[str, str]
    enqueued_at: int
    deadline_s: float | None = None
    graph: NodeInputs | None = None
    """A task graph's node: its graph id and name, its parents' outcomes (``graph.parents``), the
    failures an ``on_failure`` node handles (``graph.failures``). None for a plain job."""
    worker: WorkerContext = field(default_factory=WorkerContext)
    """The pool's context: ``worker.state`` holds what its start-up hooks made (:mod:`worker.hooks`)."""


_CURRENT: contextvars.ContextVar[JobContext] = contextvars.ContextVar("jobq_current_job")


def current_job() -> JobContext:
    """The job the calling handler runs for (raises LookupError outside a handler)."""
    return _CURRENT.get()


def set_current_job(ctx: JobContext) -> contextvars.Token[JobContext]:
    """Used by the pool around a handler call."""
    return _CURRENT.set(ctx)


@dataclass(slots=True, kw_only=True)
class JobSpec(Generic[P, R]):
    """A registered handler and its options. ``R`` is what its jobs' results are (the function's return
    annotation, awaited for a coroutine function). Calling it runs the function directly (a script; for a
    test of the handler as a job, see ``jobq.testing``)."""

    kind: str
    fn: Callable[P, Any]
    queue: str = "default"
    timeout_s: float | None = None
    max_attempts: int | None = None
    backoff: Backoff = field(default_factory=Backoff)
    delivery: Delivery = "at_least_once"
    concurrency: int | None = None
    mode: Mode = "async"
    payload: type[BaseModel] | None = None
    priority: int | None = None
    """The priority of this kind's jobs enqueued without one (``configure_kind``; lower runs first)."""
    ignore_result: bool = False
    """Drop this kind's results (kept neither in Redis nor in the history)."""
    batch: int = 0
    """A batch handler (:mod:`worker.batch`): it gets a list of up to this many jobs (0: one job a call)."""
    batch_wait_ms: int = 50
    """How long a batch gathers after its first job before it runs short."""
    retry_on: Exceptions | None = None
    """Only these exceptions are retried (any other fails the job for good); None: every one is."""
    permanent_on: Exceptions | None = None
    """These exceptions fail the job for good, never retried (checked before ``retry_on``)."""
    cron: str | None = None
    """A cron schedule declared beside the handler (``*/5 * * * *``, ``@daily``) in ``cron_tz``: a job of
    this kind with no args at every slot, once ``jobq apply --app`` has put it in force (the schedule is
    named :attr:`schedule_name`)."""
    cron_tz: str = "UTC"

    @property
    def schedule_name(self) -> str:
        """The name of the cron schedule ``cron`` declares: the kind, each character a schedule name does
        not take (``:`` ``@``) made ``-``, at most 64 characters."""
        return _SCHEDULE_CHARS.sub("-", self.kind)[:64]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        return self.fn(*args, **kwargs)

    def result_type(self) -> Any:
        """The type a job's result is decoded as: the function's return annotation (``Any`` without one)."""
        try:
            hints = typing.get_type_hints(self.fn)
        except (NameError, TypeError):  # an annotation naming what the module cannot resolve
            return Any
        return hints.get("return", Any)

    def permanent(self, exc: BaseException) -> bool:
        """Whether a failure with ``exc`` is never retried (``permanent_on``, ``retry_on``)."""
        if self.permanent_on is not None and isinstance(exc, self.permanent_on):
            return True
        return self.retry_on is not None and not isinstance(exc, self.retry_on)

    def message(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The API job for a call with these arguments; add ``delay_ms``, ``priority``, ``meta``, ``excl``,
        ``id``... before sending: ``client.enqueue(spec.queue, [{**spec.message(x), "delay_ms": 500}])``."""
        if args and kwargs:
            raise TypeError(
                f"{self.kind}: pass positional or keyword arguments, not both (args is one JSON value)"
            )
        value: Any = kwargs if kwargs or not args else list(args)
        if self.payload is not None and len(args) == 1 and isinstance(args[0], BaseModel):
            value = args[0].model_dump(mode="json")
        return {"kind": self.kind, "args": value}

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Enqueue one job with these arguments through the process's client (``jobq.Client.from_env()``:
        ``JOBQ_URL``, ``JOBQ_TOKEN``; ``jobq.testing``'s in a test); its handle once Kafka has it. Options
        (delay, priority, ...): ``spec.options(delay=60).enqueue(...)``."""
        return self.options().enqueue(*args, **kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> AsyncJobHandle[R]:
        """:meth:`enqueue` from asyncio code (the running loop's client)."""
        return await self.options().aenqueue(*args, **kwargs)

    def options(
        self,
        *,
        queue: str | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | int | None = None,
        priority: int | None = None,
        id: str | None = None,
        meta: Mapping[str, str] | None = None,
        excl: str | None = None,
        dedup_key: str | None = None,
        expires_at: datetime | int | None = None,
        max_attempts: int | None = None,
    ) -> Enqueuer[P, R]:
        """This kind with job options (``jqruntime.client.JobOptions``): ``.enqueue(*args)`` /
        ``.aenqueue(*args)``, or ``client.enqueue(spec.options(...), *args)``. (The options are not
        keyword arguments of ``enqueue`` itself so that its arguments stay exactly the handler's.)"""
        from jqruntime.client import JobOptions

        given = JobOptions(
            queue, delay, run_at, priority, id, meta, excl, dedup_key, expires_at, max_attempts
        )
        return Enqueuer(self, given)

    def bind(self, args: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments for one job's ``args`` (validated against ``payload``)."""
        if self.payload is not None:
            try:
                return (self.payload.model_validate(args),), {}
            except ValidationError as exc:
                raise PayloadInvalid(
                    f"{self.kind}: args do not match {self.payload.__name__}: {exc}"
                ) from None
        if isinstance(args, dict):
            return (), dict(args)
        if isinstance(args, list):
            return tuple(args), {}
        return ((args,) if args is not None else ()), {}


@dataclass(frozen=True, slots=True)
class Enqueuer(Generic[P, R]):
    """A kind with job options: what :meth:`JobSpec.options` gives (an enqueueable for a client too)."""

    spec: JobSpec[P, R]
    job_options: JobOptions

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def queue(self) -> str:
        return self.spec.queue

    def message(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        return self.spec.message(*args, **kwargs)

    def result_type(self) -> Any:
        return self.spec.result_type()

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        from jqruntime.client import default_client

        return default_client().enqueue(self, *args, **kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> AsyncJobHandle[R]:
        from jqruntime.client import default_async_client

        return await default_async_client().enqueue(self, *args, **kwargs)


class Handler(Protocol):
    """What ``Registry.job(...)`` returns: a decorator typing the spec by the function's (awaited)
    return."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]]) -> JobSpec[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> JobSpec[P, R]: ...


class Registry:
    """Kinds → handlers. One registry per application; workers serve the kinds registered in it."""

    def __init__(self, *, middleware: Iterable[object] = ()) -> None:
        self._specs: dict[str, JobSpec[Any, Any]] = {}
        self.startup_hooks: list[Hook] = []
        self.shutdown_hooks: list[Hook] = []
        self.job_middleware: list[Layer] = []
        for m in middleware:
            self.middleware(m)

    def on_startup(self, hook: Hook) -> Hook:
        """Decorator: run ``hook(ctx)`` when a pool starts, before its first claim (:mod:`worker.hooks`)."""
        self.startup_hooks.append(hook)
        return hook

    def on_shutdown(self, hook: Hook) -> Hook:
        """Decorator: run ``hook(ctx)`` when a pool stops, after its last job (:mod:`worker.hooks`)."""
        self.shutdown_hooks.append(hook)
        return hook

    def middleware(self, m: M) -> M:
        """Decorator (or call): run ``m`` around every handler call of this registry, after those registered
        before it (the first is the outermost): an object with ``before``/``after``/``on_failure``/``around``,
        or an ``async def (job, call_next)`` (:mod:`worker.middleware`)."""
        self.job_middleware.append(layer_of(m))
        return m

    def job(
        self,
        kind: str,
        *,
        queue: str = "default",
        timeout: float | None = None,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        delivery: Delivery = "at_least_once",
        concurrency: int | None = None,
        mode: Mode | None = None,
        payload: type[BaseModel] | None = None,
        priority: int | None = None,
        ignore_result: bool = False,
        batch: int = 0,
        batch_wait_ms: int = 50,
        retry_on: Exceptions | None = None,
        permanent_on: Exceptions | None = None,
        cron: str | None = None,
        cron_tz: str = "UTC",
    ) -> Handler:
        """Register the decorated function as the handler of ``kind``.

        ``mode`` defaults to ``async`` for coroutine functions and ``thread`` for plain functions;
        ``process`` runs a plain, picklable, module-level function in the pool's process pool.
        ``priority`` and ``ignore_result`` are the kind's defaults in Redis (set when a pool serving its
        queue starts, like ``concurrency``): its jobs enqueued without a priority get this one, and its
        results are dropped. ``batch=N``: the handler takes a list of up to N
        :class:`~worker.batch.BatchItem` (gathered for at most ``batch_wait_ms`` after the first) and sets
        each item's outcome (docs/workers.md, Batch handlers). ``retry_on``: only these exceptions are
        retried (any other fails the job for good); ``permanent_on``: these fail it for good (both as an
        ``except`` clause takes them). ``cron``: a cron schedule of this kind (in ``cron_tz``), put in
        force by ``jobq apply --app`` (docs/operations.md, Configuration as code).
        """
        validate_name("kind", kind)
        if batch < 0 or batch_wait_ms < 0:
            raise ValueError(f"{kind}: batch and batch_wait_ms must be >= 0")
        if batch and mode == "process":
            raise ValueError(f"{kind}: a batch handler runs as a coroutine or in a thread, not a process")
        validate_name("queue", queue)
        if kind in self._specs:
            raise ValueError(f"kind {kind!r} is already registered to {self._specs[kind].fn!r}")
        if cron is not None:
            _check_cron(kind, queue, cron, cron_tz)

        def register(fn: Callable[P, Any]) -> JobSpec[P, Any]:
            if kind in self._specs:  # again when applied: a decorator made earlier must not overwrite
                raise ValueError(f"kind {kind!r} is already registered to {self._specs[kind].fn!r}")
            is_async = inspect.iscoroutinefunction(fn)
            chosen: Mode = mode or ("async" if is_async else "thread")
            if (chosen == "async") != is_async:
                raise ValueError(
                    f"{kind}: mode {chosen!r} does not fit {'an async' if is_async else 'a sync'} function"
                )
            spec: JobSpec[P, Any] = JobSpec(
                kind=kind,
                fn=fn,
                queue=queue,
                timeout_s=timeout,
                max_attempts=max_attempts,
                backoff=backoff or Backoff(),
                delivery=delivery,
                concurrency=concurrency,
                mode=chosen,
                payload=payload,
                priority=priority,
                ignore_result=ignore_result,
                batch=batch,
                batch_wait_ms=batch_wait_ms,
                retry_on=retry_on,
                permanent_on=permanent_on,
                cron=cron,
                cron_tz=cron_tz,
            )
            self._specs[kind] = spec
            return spec

        return register

    def get(self, kind: str) -> JobSpec[Any, Any] | None:
        return self._specs.get(kind)

    def kinds(self, queues: set[str] | None = None) -> list[JobSpec[Any, Any]]:
        """Registered specs, optionally only those of some queues."""
        return [s for s in self._specs.values() if queues is None or s.queue in queues]

    def queues(self) -> set[str]:
        return {s.queue for s in self._specs.values()}

    def scheduled(self) -> list[JobSpec[Any, Any]]:
        """The kinds that declare a cron schedule (``cron=``), in registration order."""
        return [s for s in self._specs.values() if s.cron is not None]
