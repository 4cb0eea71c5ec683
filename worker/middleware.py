"""Per-job middleware: code a pool runs around every handler call of a registry (Sentry, a database
session, custom metrics).

::

    registry = jobq.Registry(middleware=[Timing()])  # or one by one:

    @registry.middleware
    async def db_session(job: JobContext, call_next: CallNext) -> Any:   # a function is an ``around``
        async with Session() as session:
            SESSION.set(session)                      # the application's ContextVar: this job's alone
            return await call_next()

    class Timing:                                     # an object: any of the four methods, sync or async
        def before(self, job: JobContext) -> None: ...
        def after(self, job: JobContext, result: Any) -> None: ...
        def on_failure(self, job: JobContext, exc: BaseException) -> None: ...

**Order** (an onion): the first registered is the outermost. For ``[A, B]``: ``A.before``, ``B.before``,
then ``A.around`` calls ``B.around`` which calls the handler; then ``B.after``, ``A.after`` (or
``B.on_failure``, ``A.on_failure``). Within one middleware: ``before``, ``around``, then ``after`` or
``on_failure``.

**Failures**: ``before`` and ``around`` are part of the attempt: an exception raised by either fails the
attempt exactly as the handler's would (retried with the kind's backoff; ``Retry``/``Cancel``/``Snooze``
work there too, e.g. a rate limiter snoozing a job), and the handler does not run when a ``before`` raised.
``after`` and ``on_failure`` only observe: one that raises is logged (``job middleware failed``, naming the
middleware and the method) and the job's outcome stands. ``on_failure`` sees a failed attempt: any exception
but ``Snooze``, ``Cancel`` and a ``defer_to`` (none of those is a failure; neither ``after`` nor
``on_failure`` runs for them — cleanup that must always happen belongs in ``around``, ``try/finally``). A
timeout reaches them as ``TimeoutError``: the kind's ``timeout`` bounds the handler's call, not the
middleware around it.

``before``, ``after`` and ``on_failure`` may be plain functions: they are called on the pool's event loop
(keep them quick), in the job's context (``current_job()``, the log fields, the run span). ``around`` awaits
the handler, so it is ``async``. Middleware runs in the pool around every single-job handler (``async``,
``thread`` and ``process``: around a process handler it wraps the wait for its process); a batch handler's
call (:mod:`worker.batch`) runs without it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from jqcore.errors import HandlerControl, Retry
from jqcore.log import get_logger

__all__ = ["CallNext", "Layer", "Middleware", "is_failure", "layer_of", "run_through"]

log = get_logger("worker.middleware")

CallNext = Callable[[], Awaitable[Any]]
"""What an ``around`` awaits: the next middleware inward, and at the end the handler; its result."""


def is_failure(exc: BaseException) -> bool:
    """Whether ``exc`` fails an attempt: any exception but a handler's control flow (``Snooze``, ``Cancel``,
    a ``defer_to``); a ``Retry`` does (what ``on_failure`` is called for; an ``around`` asks the same)."""
    return isinstance(exc, Retry) or not isinstance(exc, HandlerControl)


class Middleware(Protocol):
    """What a middleware object may have (any subset of the four; ``job`` is the running
    :class:`~worker.registry.JobContext`). A plain ``async def f(job, call_next)`` is an ``around``."""

    def before(self, job: Any) -> Awaitable[None] | None: ...
    def after(self, job: Any, result: Any) -> Awaitable[None] | None: ...
    def on_failure(self, job: Any, exc: BaseException) -> Awaitable[None] | None: ...
    async def around(self, job: Any, call_next: CallNext) -> Any: ...


@dataclass(frozen=True, slots=True)
class Layer:
    """One registered middleware, its methods looked up once."""

    name: str
    before: Callable[[Any], Any] | None = None
    after: Callable[[Any, Any], Any] | None = None
    on_failure: Callable[[Any, BaseException], Any] | None = None
    around: Callable[[Any, CallNext], Awaitable[Any]] | None = None


_METHODS = ("before", "after", "on_failure", "around")


def _name(m: object) -> str:
    named = m if inspect.isfunction(m) or inspect.isclass(m) else type(m)
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', repr(m))}"


def _is_async(fn: object) -> bool:
    call = type(fn).__call__ if callable(fn) and not inspect.isroutine(fn) else None  # an async __call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def layer_of(m: object) -> Layer:
    """``m`` checked: an object with any of ``before``/``after``/``on_failure``/``around``, or an async
    function ``(job, call_next)`` (an ``around``); TypeError otherwise (at registration, not at the first
    job)."""
    name = _name(m)
    found = {method: getattr(m, method, None) for method in _METHODS}
    if inspect.isclass(m):
        raise TypeError(f"middleware {name}: register an instance of the class, not the class")
    if not any(callable(fn) for fn in found.values()):
        if not callable(m):
            raise TypeError(
                f"middleware {name}: neither a function nor an object with before, after, on_failure or "
                "around"
            )
        found = {"around": m}
    for method, fn in found.items():
        if fn is not None and not callable(fn):
            raise TypeError(f"middleware {name}: its {method} is not callable")
    around = found.get("around")
    if around is not None and not _is_async(around):
        raise TypeError(f"middleware {name}: around must be an async function (it awaits call_next)")
    return Layer(name, found.get("before"), found.get("after"), found.get("on_failure"), around)


async def run_through(layers: Sequence[Layer], job: Any, handler: CallNext) -> Any:
    """Await ``handler`` through ``layers`` (the first outermost); the handler's result, or the exception
    that failed the attempt."""
    call = handler
    for layer in reversed(layers):
        call = functools.partial(_through, layer, job, call)
    return await call()


async def _through(layer: Layer, job: Any, call_next: CallNext) -> Any:
    if layer.before is not None:
        await _maybe(layer.before(job))
    try:
        result = await (layer.around(job, call_next) if layer.around is not None else call_next())
    except Exception as exc:
        if layer.on_failure is not None and is_failure(exc):
            await _observe(layer, "on_failure", layer.on_failure, job, exc)
        raise
    if layer.after is not None:
        await _observe(layer, "after", layer.after, job, result)
    return result


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _observe(layer: Layer, method: str, fn: Callable[..., Any], *args: Any) -> None:
    """An observing method: what it raises is logged (with the job's bound fields), never the job's."""
    try:
        await _maybe(fn(*args))
    except Exception as exc:
        log.error("job middleware failed", middleware=layer.name, method=method, exc_info=exc)
