"""Small asyncio helpers every layer may use (the engine's waits, the runtime's services): nothing here
knows of a service, a connection or a setting."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["RECANCEL_S", "cancel_and_wait", "wait_event"]

RECANCEL_S = 0.5
"""How often :func:`cancel_and_wait` repeats a cancel a task did not act on."""


async def cancel_and_wait(task: asyncio.Future[Any] | None, every_s: float = RECANCEL_S) -> None:
    """Cancel a helper task of a service and wait until it has finished (its cancellation swallowed).

    The cancel is repeated every ``every_s`` while the task runs on: a library that turns a
    cancellation into an ordinary exception (redis-py can, mid-command) lets a ``while True`` loop that
    suppresses errors carry on — seen as a gateway whose presence heartbeat kept it from ever stopping;
    and on Python 3.11 a cancel that meets ``asyncio.wait_for`` as its future completes is lost, so the
    task goes on to its next step (jobq's own code no longer calls ``wait_for``, nor do its Redis
    connections: :func:`wait_event`, :class:`jqengine.redisconn.FastConnection`)."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=every_s)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Until ``event`` is set (True) or ``timeout_s`` passed (False). Not ``asyncio.wait_for``, which the
    project's lint refuses: on Python 3.11 it loses a cancellation that arrives as its future completes
    (gh-86296), and the cancelled task carries on."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()
