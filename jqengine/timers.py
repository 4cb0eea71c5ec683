"""``engine.timers``: the steps the scheduler takes when time passes — delayed jobs promoted when due,
expired leases reaped, finished jobs collected, far-future index entries dropped — and the waits and
checks it times them by."""

from __future__ import annotations

from collections.abc import Sequence

from jqengine import reads, replies, waiting
from jqengine.core import Part
from jqengine.models import Promoted

__all__ = ["STEP_HORIZON_MS", "Timers"]

STEP_HORIZON_MS = 30_000
"""A scheduler steps every queue it keeps at least this often (``jqsched.timers``), so a script wakes it
(the queue's ``sched`` token) only for a due time sooner than this: a claim's lease deadline further out is
read at the next step, which is still before it (``STEP_HORIZON`` in ``lua/_base.lua`` mirrors it). At a
trickle of short jobs the running set empties between claims, and a claim into an empty set woke the
scheduler for a full step every job (issue 58). As long as the default lease (30 s), so that a claim with
it never wakes the scheduler; an idle queue costs a step (two script calls) per horizon."""


class Timers(Part):
    """Time-driven transitions (``engine.timers``)."""

    async def promote_due(self, queue: str, limit: int = 1000, *, now_ms: int | None = None) -> Promoted:
        """Delayed → pending for due jobs, never early."""
        return replies.promoted(await self._core.run("promote_due", queue, [limit], now_ms))

    async def reap_expired(
        self, queue: str, limit: int = 1000, *, now_ms: int | None = None
    ) -> tuple[int, int]:
        """Expired leases; returns (reaped, next lease deadline or -1)."""
        return replies.timer(await self._core.run("reap_expired", queue, [limit], now_ms))

    async def gc(self, queue: str, limit: int = 1000, *, now_ms: int | None = None) -> int:
        """Finished jobs past their retention, deleted."""
        return int(await self._core.run("gc", queue, [limit], now_ms))

    async def drop_far(self, queue: str, ids: Sequence[str], *, now_ms: int | None = None) -> int:
        """Forget index entries of far-future jobs whose records the schedule topic tombstoned."""
        if not ids:
            return 0
        return int((await self._core.run("drop_far", queue, list(ids), now_ms))[1])

    async def past_due(self, queue: str, late_ms: int = 1000, *, now: int | None = None) -> int:
        """Delayed jobs past ``run_at`` and leases past their deadline by more than ``late_ms``."""
        return await reads.past_due(self._client, queue, late_ms, now or await self._core.now())

    async def wake(self, queue: str) -> None:
        """Signal an earlier due time in ``queue`` as a script does: a token a scheduler took for a queue
        it no longer keeps, given back to the one that does."""
        await waiting.wake_due(self._client, queue)

    async def wait_for_due(self, queues: Sequence[str], timeout_s: float) -> str | None:
        """Block until a script signals an earlier due time in one of ``queues`` (that queue), or
        ``timeout_s`` passed (None)."""
        return await waiting.wait_for_due(self._client, queues, timeout_s)
