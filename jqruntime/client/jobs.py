"""The client an application uses (``import jobq``): typed enqueues, handles on jobs, results by id.

``AsyncClient`` awaits; ``Client`` is the same for synchronous code (a Flask view, a script, a Django view
without the tasks backend): it runs an ``AsyncClient`` on an event loop of its own in a daemon thread
(:mod:`jqruntime.client.portal`). Both read ``JOBQ_URL`` (one gateway, or several comma-separated) and
``JOBQ_TOKEN`` with :meth:`~AsyncClient.from_env`, and keep the HTTP client's retries and failover
(:class:`~jqruntime.client.http.JobqClient`)::

    handle = jobq.Client.from_env().enqueue(send_email, "ada@example.com", subject="hi")
    handle.result(timeout=30)   # the handler's return value, decoded as its annotation says

An enqueue returns a :class:`JobHandle` (``AsyncJobHandle``): its ``id`` and ``queue``, ``state()``,
``result(timeout=)`` (waits; raises :class:`JobFailed` / :class:`JobCanceled`), ``wait()``, ``cancel()``,
``replay()``. A job is named by its ``ref`` — ``"<queue>/<id>"`` — so a result is found by that one string
(``client.job(ref)``). A job's options (``delay``, ``run_at``, ``priority``, ...) are :class:`JobOptions`:
``client.enqueue(spec.options(delay=60), ...)``, or ``spec.options(delay=60).enqueue(...)``.

What an enqueue does is a :class:`Transport`'s: HTTP to the gateways by default; ``jobq.testing`` puts an
in-process one in its place (:func:`use_transport`).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar, cast

import orjson
from pydantic import TypeAdapter

from jqcore.errors import JobqError
from jqcore.graphs import Graph
from jqruntime.client.http import Gateway, JobqClient
from jqruntime.client.portal import Portal

__all__ = [
    "FINISHED",
    "AsyncClient",
    "AsyncJobHandle",
    "Client",
    "JobCanceled",
    "JobFailed",
    "JobHandle",
    "JobOptions",
    "Transport",
    "default_async_client",
    "default_client",
    "use_transport",
]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")
FINISHED = frozenset({"completed", "errored", "canceled", "expired", "deleted"})
"""The states a job ends in (``jqcore.events.TERMINAL``)."""
POLL_FIRST_S, POLL_MAX_S = 0.05, 1.0
"""How a wait polls a job: first after 50 ms, then twice as long each time, at most every second."""


class JobFailed(JobqError):
    """The job ended without a result: ``state`` is ``errored`` or ``expired``; ``error`` its last one."""

    code = "job_failed"

    def __init__(self, ref: str, state: str, error: str | None) -> None:
        super().__init__(f"job {ref} ended {state}: {error or 'no error kept'}")
        self.ref, self.state, self.error = ref, state, error


class JobCanceled(JobFailed):
    """The job was canceled (by an operator, its handler or a kill switch)."""

    code = "job_canceled"


@dataclass(frozen=True, slots=True)
class JobOptions:
    """A job's options beside its arguments (every one optional). ``delay`` (seconds or a timedelta) or
    ``run_at`` (a datetime, or ms since the epoch); ``id``: the job's own (retried enqueues with it are one
    job); ``dedup_key``: identical work is one job; ``expires_at``: a job not started by then is dropped."""

    queue: str | None = None
    delay: float | timedelta | None = None
    run_at: datetime | int | None = None
    priority: int | None = None
    id: str | None = None
    meta: Mapping[str, str] | None = None
    excl: str | None = None
    dedup_key: str | None = None
    expires_at: datetime | int | None = None
    max_attempts: int | None = None

    def fields(self) -> dict[str, Any]:
        """The API's job fields these options set."""
        out: dict[str, Any] = {}
        if self.delay is not None:
            seconds = self.delay.total_seconds() if isinstance(self.delay, timedelta) else self.delay
            out["delay_ms"] = int(seconds * 1000)
        for name in ("run_at", "expires_at"):
            value = getattr(self, name)
            if value is not None:
                out[name] = int(value.timestamp() * 1000) if isinstance(value, datetime) else value
        for name in ("priority", "id", "excl", "dedup_key", "max_attempts"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.meta:
            out["meta"] = dict(self.meta)
        return out


class Enqueueable(Protocol[R_co]):
    """What can be enqueued with typed arguments: a registered handler (``worker.JobSpec``)."""

    @property
    def kind(self) -> str: ...

    @property
    def queue(self) -> str: ...

    def message(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    def result_type(self) -> Any: ...


class Transport(Protocol):
    """Where jobs go: the gateways over HTTP (:class:`~jqruntime.client.http.JobqClient`), or
    ``jobq.testing``'s in-process runner."""

    async def enqueue(self, queue: str, jobs: Sequence[Mapping[str, Any]]) -> list[str]: ...

    async def get_job(self, queue: str, job_id: str) -> dict[str, Any] | None: ...

    async def cancel(self, queue: str, job_id: str) -> str: ...

    async def replay(self, queue: str, job_id: str) -> str: ...

    async def submit_graph(self, graph: Mapping[str, Any]) -> dict[str, Any]: ...


def _decoder(result_type: Any) -> Callable[[Any], Any]:
    if result_type in (None, Any, type(None)):
        return lambda value: value
    adapter: TypeAdapter[Any] = TypeAdapter(result_type)
    return adapter.validate_python


def _result_of(job: Mapping[str, Any]) -> Any:
    raw = job.get("result")
    if isinstance(raw, str | bytes):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def _finished(ref: str, job: Mapping[str, Any], decode: Callable[[Any], Any]) -> Any:
    state = str(job.get("state"))
    if state == "completed":
        return decode(_result_of(job))
    error = job.get("last_error") or job.get("reason")
    raise (JobCanceled if state == "canceled" else JobFailed)(ref, state, error)


@dataclass
class AsyncJobHandle(Generic[R]):
    """A job an :class:`AsyncClient` enqueued (or named): its state and, once it ends, its result."""

    client: AsyncClient
    queue: str
    id: str
    decode: Callable[[Any], Any] = field(default=lambda value: value, repr=False)

    @property
    def ref(self) -> str:
        """``"<queue>/<id>"``: all a client needs to find this job again (:meth:`AsyncClient.job`)."""
        return f"{self.queue}/{self.id}"

    async def info(self) -> dict[str, Any]:
        """Everything the gateway says of the job (state, attempts, errors, timestamps, result)."""
        found = await self.client.transport.get_job(self.queue, self.id)
        return found if found is not None else {"id": self.id, "queue": self.queue, "state": "unknown"}

    async def state(self) -> str:
        """``pending``, ``running``, ``completed``, ... (``unknown``: not relayed yet, or forgotten)."""
        return str((await self.info()).get("state"))

    async def wait(self) -> str:
        """Wait until the job ends; its final state (bound the wait with ``asyncio.timeout``)."""
        return str((await self._ended())["state"])

    async def result(self) -> R:
        """Wait until the job ends and return its result, decoded as the handler's return annotation says;
        :class:`JobFailed` / :class:`JobCanceled` when it ended without one (bound the wait with
        ``asyncio.timeout``)."""
        return cast(R, _finished(self.ref, await self._ended(), self.decode))

    async def cancel(self) -> str:
        """Cancel the job (unscheduled if not started; its worker told if running); the outcome."""
        return await self.client.transport.cancel(self.queue, self.id)

    async def replay(self) -> AsyncJobHandle[R]:
        """A new job with the same kind, arguments and options as this finished one."""
        new_id = await self.client.transport.replay(self.queue, self.id)
        return replace(self, id=new_id)

    async def _ended(self) -> dict[str, Any]:
        pause = POLL_FIRST_S
        while True:
            job = await self.info()
            if job.get("state") in FINISHED:
                return job
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)


class AsyncClient:
    """Enqueue jobs and follow them from asyncio code (see the module's docstring)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    @classmethod
    def connect(
        cls, urls: str | Sequence[str | Gateway], token: str, *, az: str = "", **options: Any
    ) -> AsyncClient:
        """A client of the gateways at ``urls`` (one, a comma-separated string, or a list); ``options``:
        :class:`~jqruntime.client.http.JobqClient`'s retries and timeouts."""
        gateways = [u.strip() for u in urls.split(",") if u.strip()] if isinstance(urls, str) else urls
        return cls(JobqClient(gateways, token, az=az, **options))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AsyncClient:
        """From ``JOBQ_URL`` (one gateway or several, comma-separated), ``JOBQ_TOKEN`` and ``JOBQ_AZ``
        (the zone to prefer); under ``jobq.testing``, the test's in-process client."""
        transport = _overridden()
        if transport is not None:
            return cls(transport)
        env = os.environ if environ is None else environ
        url, token = env.get("JOBQ_URL", ""), env.get("JOBQ_TOKEN", "")
        if not url or not token:
            raise JobqError(
                "set JOBQ_URL (the gateway: http://127.0.0.1:28080) and JOBQ_TOKEN — `jobq dev` prints both",
                code="client_unconfigured",
            )
        return cls.connect(url, token, az=env.get("JOBQ_AZ", ""))

    async def __aenter__(self) -> Self:
        """Open the client's connections. The first client opened so on an event loop is that loop's
        default until it closes: ``await spec.aenqueue(...)`` on the loop uses it (an application's
        lifespan opens one, its views enqueue with ``aenqueue``)."""
        opened = getattr(self.transport, "__aenter__", None)
        if opened is not None and inspect.iscoroutinefunction(opened):
            await opened()
        _DEFAULT_ASYNC.setdefault(asyncio.get_running_loop(), self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        if _DEFAULT_ASYNC.get(loop) is self:
            del _DEFAULT_ASYNC[loop]
        closing = getattr(self.transport, "close", None)
        if closing is not None and inspect.iscoroutinefunction(closing):
            await closing()

    async def enqueue(self, spec: Enqueueable[R], /, *args: Any, **kwargs: Any) -> AsyncJobHandle[R]:
        """Enqueue one job of ``spec`` (a registered handler, or ``spec.options(...)``) with these
        arguments; once Kafka has it, its handle."""
        options: JobOptions = getattr(spec, "job_options", JobOptions())
        queue = options.queue or spec.queue
        job = {**spec.message(*args, **kwargs), **options.fields()}
        (job_id,) = await self.transport.enqueue(queue, [job])
        return AsyncJobHandle(self, queue, job_id, _decoder(spec.result_type()))

    async def enqueue_kind(
        self, queue: str, kind: str, args: Any = None, options: JobOptions | None = None
    ) -> AsyncJobHandle[Any]:
        """Enqueue a job by kind name (a handler of another application, or another language's)."""
        job = {"kind": kind, "args": args, **(options or JobOptions()).fields()}
        (job_id,) = await self.transport.enqueue(queue, [job])
        return AsyncJobHandle(self, queue, job_id)

    async def submit_graph(self, graph: Graph | Mapping[str, Any]) -> dict[str, Any]:
        """Submit a whole task graph (a :class:`~jqcore.graphs.Graph`, or a document such as
        :func:`~jqcore.graphs.pipeline` builds); once Kafka has it, its id and its nodes' job ids."""
        return await self.transport.submit_graph(graph.to_doc() if isinstance(graph, Graph) else graph)

    def job(self, ref: str, result_type: Any = None) -> AsyncJobHandle[Any]:
        """The handle of the job ``ref`` names (``"<queue>/<id>"``, a handle's ``ref``)."""
        queue, slash, job_id = ref.partition("/")
        if not slash or not queue or not job_id:
            raise ValueError(f"a job is named <queue>/<id>, not {ref!r}")
        return AsyncJobHandle(self, queue, job_id, _decoder(result_type))


@dataclass
class JobHandle(Generic[R]):
    """:class:`AsyncJobHandle` for synchronous code (each call blocks until the gateway answered)."""

    of: AsyncJobHandle[R]
    portal: Portal[AsyncClient] = field(repr=False)

    @property
    def id(self) -> str:
        return self.of.id

    @property
    def queue(self) -> str:
        return self.of.queue

    @property
    def ref(self) -> str:
        return self.of.ref

    def info(self) -> dict[str, Any]:
        return self._call(self.of.info)

    def state(self) -> str:
        return self._call(self.of.state)

    def wait(self, timeout: float | None = None) -> str:
        """Wait until the job ends; its final state (``TimeoutError`` after ``timeout`` seconds)."""
        return self._call(lambda: _within(self.of.wait(), timeout, self.ref))

    def result(self, timeout: float | None = None) -> R:
        """Wait until the job ends and return its result, decoded as the handler's return annotation says
        (``TimeoutError`` after ``timeout`` seconds; :class:`JobFailed` / :class:`JobCanceled`)."""
        return self._call(lambda: _within(self.of.result(), timeout, self.ref))

    def cancel(self) -> str:
        return self._call(self.of.cancel)

    def replay(self) -> JobHandle[R]:
        return JobHandle(self._call(self.of.replay), self.portal)

    def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        return self.portal.call(lambda _: fn())


class Client:
    """:class:`AsyncClient` for synchronous code: the same calls, each blocking until it is answered."""

    def __init__(self, make: Callable[[], AsyncClient]) -> None:
        self.portal: Portal[AsyncClient] = Portal(make)

    @classmethod
    def connect(
        cls, urls: str | Sequence[str | Gateway], token: str, *, az: str = "", **options: Any
    ) -> Client:
        return cls(lambda: AsyncClient.connect(urls, token, az=az, **options))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Client:
        """See :meth:`AsyncClient.from_env` (read when the first call is made)."""
        transport = _overridden()
        if transport is not None:
            return cls(lambda: AsyncClient(transport))
        AsyncClient.from_env(environ)  # configured, or a clear error now rather than at the first call
        return cls(lambda: AsyncClient.from_env(environ))

    def enqueue(self, spec: Enqueueable[R], /, *args: Any, **kwargs: Any) -> JobHandle[R]:
        handle = self.portal.call(lambda c: c.enqueue(spec, *args, **kwargs))
        return JobHandle(handle, self.portal)

    def enqueue_kind(
        self, queue: str, kind: str, args: Any = None, options: JobOptions | None = None
    ) -> JobHandle[Any]:
        handle = self.portal.call(lambda c: c.enqueue_kind(queue, kind, args, options))
        return JobHandle(handle, self.portal)

    def submit_graph(self, graph: Graph | Mapping[str, Any]) -> dict[str, Any]:
        return self.portal.call(lambda c: c.submit_graph(graph))

    def job(self, ref: str, result_type: Any = None) -> JobHandle[Any]:
        handle = self.portal.call(lambda c: _ready(c.job(ref, result_type)))
        return JobHandle(handle, self.portal)

    def close(self) -> None:
        self.portal.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


async def _ready(value: T) -> T:
    return value


async def _within(waiting: Awaitable[T], limit_s: float | None, ref: str) -> T:
    try:
        async with asyncio.timeout(limit_s):
            return await waiting
    except TimeoutError:
        raise TimeoutError(f"job {ref} had not ended after {limit_s} s") from None


# ---- the default clients (what ``JobSpec.enqueue`` uses) and the tests' transport ---------------------
_OVERRIDE: list[tuple[Transport, Client]] = []
_DEFAULT: dict[str, Client] = {}
_DEFAULT_ASYNC: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def _overridden() -> Transport | None:
    return _OVERRIDE[-1][0] if _OVERRIDE else None


def default_client() -> Client:
    """The process's client for ``spec.enqueue(...)``: from the environment, made on first use — or, under
    ``jobq.testing``, the test's."""
    if _OVERRIDE:
        return _OVERRIDE[-1][1]
    if "env" not in _DEFAULT:
        _DEFAULT["env"] = Client.from_env()
    return _DEFAULT["env"]


def default_async_client() -> AsyncClient:
    """The running loop's client for ``await spec.aenqueue(...)`` (one per event loop: connections belong
    to a loop): the first :class:`AsyncClient` opened with ``async with`` on the loop while it is open, else
    one from the environment made on first use — or, under ``jobq.testing``, the test's."""
    transport = _overridden()
    if transport is not None:
        return AsyncClient(transport)
    loop = asyncio.get_running_loop()
    if loop not in _DEFAULT_ASYNC:
        _DEFAULT_ASYNC[loop] = AsyncClient.from_env()
    return _DEFAULT_ASYNC[loop]


def use_transport(transport: Transport | None) -> None:
    """Put ``transport`` in place of the gateways for the default clients and ``from_env`` (None: take the
    last one away). ``jobq.testing`` does this; an application never needs to."""
    if transport is None:
        _, client = _OVERRIDE.pop()
        client.close()
    else:
        _OVERRIDE.append((transport, Client(lambda: AsyncClient(transport))))
