"""The lease keeper: extends the leases of a pool's running jobs in batches, well before they expire
(the worker pools' and the push dispatcher's: ``worker.pool``, ``jqdispatch``).

A third of the way into each job's lease it sends one ``extend`` per queue (and lease length) for the
pool's running jobs due then, so a 10-minute job with a 30 s lease is never reaped. A job whose extend
comes back ``stale`` or ``missing`` (the lease was lost: the worker stalled past its deadline and the
reaper handed the job out again) or ``canceled`` is abandoned: its task is cancelled and nothing is
written back for it.

The keeper runs on the service's event loop, never in a thread: a loop blocked by a handler's synchronous
work extends nothing, so the blocked process's leases run out and the scheduler hands its jobs to another
worker within one lease. And a job is held only as long as the last extend that Redis acknowledged says:
when its lease ends without one (Redis unreachable, or a half-open connection on which an extend waits for
an answer that never comes — each extend is bounded by the lease it would keep), the job is abandoned as
lapsed (:data:`LAPSED`), exactly as when the extend comes back ``stale``; by then the scheduler may have
handed it to another worker.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jqcore.aio import cancel_and_wait
from jqcore.log import get_logger
from jqcore.testsignal import TestSignal
from jqengine import ClaimedJob, Engine
from jqruntime.lifecycle import Service

__all__ = ["LAPSED", "LeaseKeeper", "LeaseSignals", "Lost", "Owned"]

Owned = Callable[[], Iterable[tuple[ClaimedJob, float]]]
"""The pool's running jobs whose leases it still holds, each with its start (``time.monotonic()``)."""
Lost = Callable[[str, str], None]
"""What the pool does with a job whose lease was lost: (job id, why)."""

log = get_logger("jqruntime.leases")

DEFAULT_LEASE_MS = 30_000
"""Used only for a claim that reported no lease length (extend then asks for the job's own)."""
RETRY_S = 1.0
"""After a failed extend, the next try comes this much later (or when the lease would end, if sooner)."""
LAPSED = "lease lapsed: no extend reached Redis before it ended"
"""The reason :data:`Lost` is given for a job whose lease ran out in this process's own reckoning."""


@dataclass
class LeaseSignals:
    """What a lease keeper reports to a test that listens (:mod:`jqcore.testsignal`)."""

    extended: TestSignal[list[str]] = field(default_factory=lambda: TestSignal("leases extended"))
    """An extend round that sent something finished: the ids whose leases it extended."""


class LeaseKeeper(Service):
    """Extends each running job's lease once a third of it has passed (each job keeps the lease its claim
    got: the pool's, the job's own or the queue's default), in one ``extend`` per queue and lease length;
    gives up a job whose lease ended without an acknowledged extend (see the module doc)."""

    MIN_TICK_S = 0.05
    MAX_TICK_S = 5.0

    def __init__(self, engine: Engine, owned: Owned, lost: Lost) -> None:
        super().__init__()
        self.engine, self._owned, self._lost = engine, owned, lost
        self._task: asyncio.Task[None] | None = None
        self._due: dict[str, float] = {}
        """job id → monotonic time at which its lease is next extended."""
        self._ends: dict[str, float] = {}
        """job id → monotonic time at which its lease ends at the latest: when the claim was seen or the
        last acknowledged extend was sent, plus the lease (Redis's deadline is no later)."""
        self._extended: set[str] = set()
        """The jobs whose leases Redis acknowledged an extend of (their claims' deadlines are past)."""
        self.signals = LeaseSignals()

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="lease-keeper")

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._next_tick())
            try:
                await self.extend_all(only_due=True)
            except Exception as exc:  # a bug, not Redis (extends catch their own): keep keeping leases
                log.error("lease keeper round failed", error=repr(exc))

    def _next_tick(self) -> float:
        if not self._due:
            return self.MIN_TICK_S * 4
        wait = min(self._due.values()) - time.monotonic()
        return min(self.MAX_TICK_S, max(self.MIN_TICK_S, wait))

    def _track(self) -> None:
        live = {job.id: (job, started_at) for job, started_at in self._owned()}
        for job_id in list(self._due):
            if job_id not in live:
                del self._due[job_id]
                self._ends.pop(job_id, None)
                self._extended.discard(job_id)
        for job_id, (job, started_at) in live.items():
            if job_id not in self._due:
                self._due[job_id] = started_at + _lease_s(job.lease_ms) / 3
                self._ends[job_id] = started_at + _lease_s(job.lease_ms)

    def _drop_lapsed(self) -> None:
        """Give up the jobs whose leases ended without an acknowledged extend (once each)."""
        now = time.monotonic()
        for job_id, ends in list(self._ends.items()):
            if ends <= now:
                self._ends[job_id] = math.inf
                self._lost(job_id, LAPSED)

    async def extend_all(self, only_due: bool = False) -> None:
        self._track()
        self._drop_lapsed()
        now = time.monotonic()
        groups: dict[tuple[str, int], list[tuple[str, int, str]]] = {}
        for job, _ in list(self._owned()):
            if self._ends.get(job.id) == math.inf or (only_due and self._due.get(job.id, 0) > now):
                continue
            lease = job.lease_ms if job.lease_ms > 0 else 0
            groups.setdefault((job.queue, lease), []).append((job.id, job.attempt, job.token))
        extended: list[str] = []
        for (queue, lease), owned in groups.items():
            extended += await self._extend(queue, lease, owned)
        self._drop_lapsed()
        if groups:
            self.signals.extended.signal(extended)

    async def _extend(self, queue: str, lease: int, owned: list[tuple[str, int, str]]) -> list[str]:
        """One extend for ``owned``, waited for no longer than the first of their leases lasts; the ids
        extended."""
        sent = time.monotonic()
        ends = min(self._ends.get(job_id, math.inf) for job_id, _, _ in owned)
        try:
            async with asyncio.timeout(None if ends == math.inf else max(0.0, ends - sent)):
                result = await self.engine.jobs.extend(queue, owned, lease)
        except Exception as exc:  # Redis away or not answering: tried again soon, until the lease ends
            log.warning("lease extension failed", queue=queue, jobs=len(owned), error=repr(exc))
            for job_id, _, _ in owned:
                self._due[job_id] = min(self._ends.get(job_id, math.inf), time.monotonic() + RETRY_S)
            return []
        extended: list[str] = []
        for job_id, outcome in result.items():
            if isinstance(outcome, str):
                self._lost(job_id, f"extend: {outcome}")
            elif self._ends.get(job_id) != math.inf:
                self._due[job_id] = sent + _lease_s(lease) / 3
                self._ends[job_id] = sent + _lease_s(lease)
                self._extended.add(job_id)
                extended.append(job_id)
        return extended

    def extended(self, job_id: str) -> bool:
        """Whether Redis acknowledged an extend of the job's lease (its claim's deadline no longer counts)."""
        return job_id in self._extended


def _lease_s(lease_ms: int) -> float:
    return (lease_ms if lease_ms > 0 else DEFAULT_LEASE_MS) / 1000
