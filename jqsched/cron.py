"""Firing cron schedules: each scheduler instance fires the schedules it owns (rendezvous over the
schedule names among the group's live members, like the queues).

For a schedule whose slots came due the instance claims them with a compare-and-set on the schedule's
state in Consul (:class:`jqruntime.stores.cron.CronStore`), then enqueues one job per claimed slot with the
deterministic id ``cron:<name>:<slot>`` straight into the engine, then records them enqueued. Two
instances that both think they own a schedule (for a beat, during a re-deal) race on the same CAS and
only one wins: one job per slot. An instance that dies between its claim and its enqueue leaves the
claim marked not enqueued; after ``RECOVER_AFTER_MS`` the owner enqueues the same ids again (the engine
keeps one while they are queued).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jqcore import metrics
from jqcore.cron import CronSchedule, CronState, due_slots, next_slot
from jqcore.log import get_logger
from jqengine import Engine
from jqruntime.stores.cron import CronStore, fire_now
from jqruntime.stores.membership import owned_by

__all__ = ["CronFirer"]

log = get_logger("jqsched.cron")

RECOVER_AFTER_MS = 10_000
"""A claim not marked enqueued after this long is taken as its claimer's death."""


class CronFirer:
    """One instance's share of the cron schedules; :meth:`step` fires what is due and returns when it
    must be called again."""

    def __init__(
        self, store: CronStore, engine: Engine, name: str, *, clock: Callable[[], int] | None = None
    ) -> None:
        self.store, self.engine, self.name = store, engine, name
        self._fixed_clock = clock is not None
        self.clock = clock or engine.clock.now
        """Redis's clock (the engine's), unless a test gives its own: a host whose clock runs ahead must
        not fire a slot early (the fault suite's clock skew)."""
        self.owned: list[str] = []

    async def step(self, members: Sequence[str], max_wait_ms: int) -> int:
        """Fire every owned schedule's due slots; returns the ms until the next slot (≤ ``max_wait_ms``)."""
        schedules = await self.store.list()
        mine = set(owned_by(self.name, members, [s.name for s in schedules]))
        self.owned = sorted(mine)
        if not self._fixed_clock:
            await self.engine.now()  # keeps the engine's view of Redis's clock fresh
        now = self.clock()
        wake = now + max_wait_ms
        for schedule in schedules:
            if schedule.name not in mine or schedule.paused:
                continue
            try:
                await self._fire_due(schedule, now)
                wake = min(wake, next_slot(schedule, max(now, schedule.created_ms)))
            except Exception as exc:  # one bad schedule (or a Redis hiccup) must not stop the others
                log.warning("cron fire failed", schedule=schedule.name, error=repr(exc))
        return max(0, wake - self.clock())

    async def _fire_due(self, schedule: CronSchedule, now: int) -> None:
        state, index = await self.store.state(schedule.name)
        if state.fired_at_ms is None and state.pending and now - state.claimed_at_ms > RECOVER_AFTER_MS:
            log.warning("re-enqueueing a claim its claimer never finished", schedule=schedule.name)
            await self._enqueue(schedule, state, index)
            return
        due = due_slots(schedule, state, now)
        if not due.newest:
            return
        claim = state.model_copy(
            update={
                "last_slot_ms": due.newest,
                "claimed_at_ms": now,
                "fired_at_ms": None,
                "pending": due.fire,
                "fires": state.fires + len(due.fire),
                "dropped": state.dropped + due.dropped,
            }
        )
        if not await self.store.swap(schedule.name, claim, index):
            return  # another instance claimed these slots
        if due.dropped:
            log.info("cron slots dropped by the misfire policy", schedule=schedule.name, dropped=due.dropped)
            metrics.SCHEDULER_CRON.labels(schedule.name, "dropped").inc(due.dropped)
        if due.fire:
            metrics.SCHEDULER_CRON.labels(schedule.name, "fired").inc(len(due.fire))
        _, claimed_index = await self.store.state(schedule.name)
        await self._enqueue(schedule, claim, claimed_index)

    async def _enqueue(self, schedule: CronSchedule, claim: CronState, index: int) -> None:
        await fire_now(self.engine, schedule, claim.pending)
        done = claim.model_copy(update={"fired_at_ms": self.clock(), "pending": []})
        await self.store.swap(schedule.name, done, index)
