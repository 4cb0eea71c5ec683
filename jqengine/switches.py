"""Kill switches, the engine's part: set, lift and list them (see :mod:`jqengine.switchrules`).

The switches are kept in one hash (:data:`~jqengine.keys.SWITCHES_KEY`: name → JSON), and each
queue's configuration carries the list that applies to it (field ``switches``), which its claim script
reads: setting or lifting a switch rewrites that list in every known queue before it returns, so no claim
that starts after the call answered hands out a matching job — hand-offs to waiting pools included. A
queue born later (or again, after Redis lost it) gets the list from the call that creates it — the engine
reads the switches before each ``enqueue_batch`` — and again when it registers (:meth:`EngineCore._register`).
"""

from __future__ import annotations

from jqengine import codes
from jqengine.core import EngineCore
from jqengine.keys import QUEUES_KEY, SWITCHES_KEY
from jqengine.redisconn import text
from jqengine.switchrules import Switch, queue_list, switch_from_json

__all__ = ["LIFT_BATCH", "SwitchBoard"]

LIFT_BATCH = 1000
"""Parked jobs moved back per script call when a switch lifts (a long lift never blocks Redis)."""
MAX_SWITCHES = 1000
"""Switches in force at once: each claim's queue carries the list that applies to it, and each change
rewrites every queue's list — an incident brake, not a store."""
MAX_SWITCHES_PER_QUEUE = 50
"""Switches on one queue or glob (a tenant's admin cannot crowd out everyone's switch changes)."""


class SwitchBoard(EngineCore):
    async def switches(self) -> list[Switch]:
        """Every switch in force, by name."""
        async with codes.redis_errors("switches"):
            raw = await self._client.hgetall(SWITCHES_KEY)
        return sorted((switch_from_json(v) for v in raw.values()), key=lambda s: s.name)

    async def set_switch(self, switch: Switch) -> list[str]:
        """Put ``switch`` in force (a switch of the same name is replaced); the known queues it applies to.
        Jobs already running are not touched; jobs it matches are no longer started."""
        async with codes.redis_errors("switch"):
            before = await self._client.hget(SWITCHES_KEY, switch.name)
            if before is None:
                self._room_for(switch, await self.switches())
            await self._client.hset(SWITCHES_KEY, switch.name, switch.to_json())
        replaced = switch_from_json(before) if before else None
        every = await self.switches()
        hit = []
        for queue in await self._queue_names():
            if switch.applies_to(queue):
                hit.append(queue)
                await self._rewrite(queue, every)
            elif replaced and replaced.applies_to(queue):  # the switch's new glob left this queue
                await self._rewrite(queue, every, lift=switch.name)
        return hit

    @staticmethod
    def _room_for(switch: Switch, every: list[Switch]) -> None:
        """:class:`codes.SwitchesFull` when a new switch would pass :data:`MAX_SWITCHES` in all or
        :data:`MAX_SWITCHES_PER_QUEUE` on its queue (or glob)."""
        same = sum(s.queue == switch.queue for s in every)
        if len(every) >= MAX_SWITCHES or same >= MAX_SWITCHES_PER_QUEUE:
            raise codes.SwitchesFull(
                f"{len(every)} kill switches are in force, {same} on {switch.queue!r} (at most"
                f" {MAX_SWITCHES} in all, {MAX_SWITCHES_PER_QUEUE} on one queue or glob): lift one first"
            )

    async def lift_switch(self, name: str) -> int:
        """Lift switch ``name``: jobs it parked become pending again (no attempt spent on them); how many.
        Raises :class:`codes.SwitchNotFound` when no such switch is in force."""
        async with codes.redis_errors("switch"):
            raw = await self._client.hget(SWITCHES_KEY, name)
            if raw is None or not await self._client.hdel(SWITCHES_KEY, name):
                raise codes.SwitchNotFound(f"no kill switch named {name!r} is in force")
        lifted = switch_from_json(raw)
        every = await self.switches()
        moved = 0
        for queue in await self._queue_names():
            if lifted.applies_to(queue):
                moved += await self._rewrite(queue, every, lift=name)
        return moved

    async def _rewrite(self, queue: str, every: list[Switch], lift: str = "") -> int:
        """Give ``queue`` its switch list; with ``lift``, move the jobs that switch parked back (all of
        them, :data:`LIFT_BATCH` per call). How many moved."""
        listed, moved = queue_list(queue, every), 0
        while True:
            n, left = await self._run("switch_lift", queue, [listed, lift, LIFT_BATCH], None)
            moved += int(n)
            if int(left) == 0:
                return moved

    async def _queue_names(self) -> list[str]:
        async with codes.redis_errors("queues"):
            return sorted(text(q) for q in await self._client.smembers(QUEUES_KEY))
