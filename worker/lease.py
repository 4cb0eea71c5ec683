"""The lease keeper: extends the leases of a pool's running jobs in batches, well before they expire.

Every ``lease_ms / 3`` it sends one ``extend`` per queue for all the pool's running jobs there, so a
10-minute job with a 30 s lease is never reaped. A job whose extend comes back ``stale`` or ``missing``
(the lease was lost: the worker stalled past its deadline and the reaper handed the job out again) or
``canceled`` is abandoned: its task is cancelled and nothing is written back for it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from jqcore.lifecycle import Service, cancel_and_wait
from jqcore.log import get_logger

if TYPE_CHECKING:
    from worker.pool import Pool

__all__ = ["LeaseKeeper"]

log = get_logger("worker.lease")


class LeaseKeeper(Service):
    def __init__(self, pool: Pool) -> None:
        super().__init__()
        self.pool = pool
        self.interval_s = pool.config.lease_ms / 3000
        self._task: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="worker:lease-keeper")

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.extend_all()
            except Exception as exc:  # Redis away: the next round tries again before the lease runs out
                log.warning("lease extension failed", error=repr(exc))

    async def extend_all(self) -> None:
        by_queue: dict[str, list[tuple[str, int, str]]] = {}
        for run in list(self.pool.in_flight.values()):
            if not run.abandoned:
                by_queue.setdefault(run.job.queue, []).append((run.job.id, run.job.attempt, run.job.token))
        for queue, owned in by_queue.items():
            result = await self.pool.engine.extend(queue, owned, self.pool.config.lease_ms)
            for job_id, outcome in result.items():
                if isinstance(outcome, str):
                    self.pool.abandon(job_id, f"extend: {outcome}")
