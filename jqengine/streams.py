"""``engine.events``: the queues' lifecycle event streams (:mod:`jqcore.events`), as the scheduler's
shipper drains them into Kafka: read the oldest, trim what Kafka has, how many wait, wait for more."""

from __future__ import annotations

from collections.abc import Sequence

from jqengine import reads, waiting
from jqengine.core import Part
from jqengine.models import StreamEvent

__all__ = ["Events"]


class Events(Part):
    """Each queue's stream of lifecycle events (``engine.events``)."""

    async def read(self, queue: str, count: int = 1000) -> list[StreamEvent]:
        """The oldest unshipped events of ``queue``: whole stream entries (one script call's events
        each) until at least ``count`` events (``events_read.lua``)."""
        out: list[StreamEvent] = []
        for entry, fields in await self._core.run("events_read", queue, [count], None):
            out.extend(reads.decode_entry(entry, fields, queue))
        return out

    async def trim(self, queue: str, shipped: Sequence[StreamEvent]) -> int:
        """Forget ``shipped`` (the oldest events :meth:`read` read; Kafka has them): the stream's
        entries up to the last one's, counted off its ``events_waiting``. Returns the entries removed."""
        if not shipped:
            return 0
        entries, upto = len({e.entry for e in shipped}), reads.next_entry(shipped[-1].entry)
        reply = await self._core.run("events_trim", queue, [upto, entries, len(shipped)], None)
        return int(reply[1])

    async def backlog(self, queues: Sequence[str]) -> dict[str, int]:
        return await reads.events_backlog(self._client, queues)

    async def wait(self, queues: Sequence[str], timeout_s: float) -> bool:
        return await waiting.wait_for_events(self._client, queues, timeout_s)
