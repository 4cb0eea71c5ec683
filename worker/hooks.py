"""A pool's start-up and shut-down hooks and the context they share with the handlers.

::

    registry = Registry()

    @registry.on_startup
    async def open_session(ctx: WorkerContext) -> None:
        ctx.state["http"] = aiohttp.ClientSession()

    @registry.on_shutdown
    async def close_session(ctx: WorkerContext) -> None:
        if "http" in ctx.state:          # a start-up that failed half-way may not have made it
            await ctx.state["http"].close()

    @registry.job("page.fetch")
    async def fetch(url: str) -> int:
        async with current_job().worker.state["http"].get(url) as resp:
            return resp.status

Start-up hooks run in the order registered, before the pool's first claim; one that raises stops the pool
(:class:`StartupFailed`) before it claims anything. Shut-down hooks run in the order registered once the
last job finished or was released on a graceful stop, also after a start-up that failed half-way (not
after a hard stop, nor when the pool failed before its start-up hooks ran); one that raises is logged
and the others still run. A hook is an ``async`` function or a plain one (called on the event loop: it
should be quick).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jqcore.errors import JobqError
from jqcore.log import get_logger

__all__ = ["Hook", "StartupFailed", "WorkerContext", "run_shutdown", "run_startup"]

log = get_logger("worker.hooks")


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """What a pool's hooks and handlers share: ``state``, filled by the application's start-up hooks
    (an HTTP session, a database pool), and what the pool is (read-only)."""

    pool: str = ""
    """The pool's name (``host:pid:queues``, as ``jobq status`` lists it)."""
    queues: tuple[str, ...] = ()
    state: dict[str, Any] = field(default_factory=dict)


Hook = Callable[[WorkerContext], Awaitable[None] | None]
"""A start-up or shut-down hook: ``async def hook(ctx)`` or ``def hook(ctx)``."""


class StartupFailed(JobqError):
    """A worker start-up hook raised: the pool stopped without claiming anything."""

    code = "startup_failed"


def _name(hook: Hook) -> str:
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"


async def _call(hook: Hook, ctx: WorkerContext) -> None:
    result = hook(ctx)
    if inspect.isawaitable(result):
        await result


async def run_startup(hooks: Sequence[Hook], ctx: WorkerContext) -> None:
    """Run every start-up hook in order; the first that raises stops it (:class:`StartupFailed`)."""
    for hook in hooks:
        try:
            await _call(hook, ctx)
        except Exception as exc:
            raise StartupFailed(f"worker start-up hook {_name(hook)} failed: {exc!r}") from exc


async def run_shutdown(hooks: Sequence[Hook], ctx: WorkerContext) -> None:
    """Run every shut-down hook in order; one that raises is logged and the next still runs."""
    for hook in hooks:
        try:
            await _call(hook, ctx)
        except Exception as exc:
            log.error("worker shut-down hook failed", hook=_name(hook), error=repr(exc))
