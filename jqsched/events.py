"""The event shipper: moves the owned queues' lifecycle events from their Redis streams to Kafka.

Every transition script appends its event to the queue's stream (``jqcore.events``); this instance reads
the oldest entries of each queue it owns, produces them to the events topic and trims the stream up to the
last entry Kafka acknowledged. A round's events of one queue travel as one record per partition
(``jqcore.events.pack``: a JSON array; the partition is the one of the job's id, so one job's events stay
in order on one partition), not one record per event: a script call's entry holds events of many jobs
(a claim of 50), which belong on many partitions, so the partition is the unit that keeps the order. At
least once: a crash between the acknowledgement and the trim, or two instances briefly owning one queue
during a re-deal, ships an event twice; readers keep one per (queue, id, v). While Kafka
is away nothing is trimmed: the stream grows to the queue's ``events_cap`` and each event past it is
counted in the queue's ``events_dropped`` stat (``jobq status``, ``jobq_events_dropped``).

An event that ends a job (``jqcore.events.ENDS``) leaves with the job's payload (args, meta, result, the
envelope fields a replay keeps), read from the job's record when the batch is shipped (one call of
``job_fields.lua`` per batch) and cut to ``JOBQ_EVENTS_PAYLOAD_MAX_BYTES`` per field
(``jqruntime.stores.archive``): the history keeps what a ``GET`` or a replay needs once Redis forgot the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from jqcore import metrics
from jqcore.events import ENDS, pack
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import EventSettings
from jqcore.testsignal import TestSignal
from jqengine import Engine, StreamEvent
from jqruntime.kafka import AsyncProducer, Record
from jqruntime.stores.archive import payload_of_record

__all__ = ["EventShipper", "EventSignals"]

_RECORD_FIELDS = ("env", "result", "version")
"""What the shipper reads of a job's record for the payload of its ending."""
PARTITIONS_TTL_S = 60.0
"""How long the shipper trusts the events topic's partition count (a topic given more partitions moves
new events of a job, as Kafka's own key partitioning would)."""


@dataclass
class EventSignals:
    """What an event shipper reports to a test that listens (:mod:`jqcore.testsignal`)."""

    shipped: TestSignal[int] = field(default_factory=lambda: TestSignal("events shipped"))
    """A shipping round over the owned queues finished (its events acknowledged by Kafka and trimmed): how
    many it shipped (0: the queues' streams held nothing when it read them)."""
    graph_shipped: TestSignal[tuple[str, int]] = field(
        default_factory=lambda: TestSignal("graph events shipped")
    )
    """A graph's own events were shipped (acknowledged and trimmed): (graph id, how many)."""
    failed: TestSignal[str] = field(default_factory=lambda: TestSignal("events not shipped"))
    """A shipping round failed (Kafka or Redis away; the events wait in Redis): the error."""


class EventShipper:
    def __init__(self, engine: Engine, kafka: KafkaSettings, events: EventSettings) -> None:
        self.engine, self.settings = engine, events
        self.producer = AsyncProducer(kafka, extra=events.produce_options())
        self.shipped = 0
        """Events this instance had acknowledged by Kafka (tests and benches wait on it)."""
        self.signals = EventSignals()
        self._observed: set[str] = set()
        self._partitions = (0, 0.0)
        """The events topic's partition count, and when it was read (monotonic)."""

    async def close(self) -> None:
        await asyncio.to_thread(self.producer.close, 5.0)

    async def ship(self, queues: Sequence[str]) -> int:
        """One round over ``queues``: up to one batch each; returns the events shipped. Raises when
        Kafka did not acknowledge a batch (nothing of it is trimmed; the next round sends it again)."""
        total = 0
        for queue in queues:
            batch = await self.engine.events.read(queue, self.settings.batch)
            if not batch:
                continue
            values = await self.with_payloads(queue, batch)
            await self.produce(zip((e.job_id for e in batch), values, strict=True))
            await self.engine.events.trim(queue, batch)
            metrics.EVENTS_SHIPPED.labels(queue).inc(len(batch))
            total += len(batch)
            self.shipped += len(batch)  # as each batch leaves its stream, not at the round's end
        self.signals.shipped.signal(total)
        return total

    async def produce(self, events: Iterable[tuple[str, bytes]]) -> None:
        """Produce ``events`` (job id, JSON; in the order they happened) as the events topic's records
        (``jqcore.events.pack``: one per partition). Raises when Kafka did not acknowledge them."""
        topic = self.settings.topic
        records = [Record(topic, v, partition=p) for p, v in pack(events, await self.partition_count())]
        await self.producer.produce_many(records)

    async def partition_count(self) -> int:
        """The events topic's partitions, read from Kafka at most every :data:`PARTITIONS_TTL_S`."""
        count, read_at = self._partitions
        if not count or time.monotonic() - read_at > PARTITIONS_TTL_S:
            count = len(await asyncio.to_thread(self.producer.partitions, self.settings.topic))
            self._partitions = (count, time.monotonic())
        return count

    async def with_payloads(self, queue: str, batch: Sequence[StreamEvent]) -> list[bytes]:
        """The Kafka values of ``batch``: the events as stored, those ending a job with its payload (a
        record gone already gives an empty one; a record that moved on since gives no result)."""
        cap = self.settings.payload_max_bytes
        if cap <= 0:
            return [e.value for e in batch]
        ends: list[tuple[int, Mapping[str, object]]] = []
        for i, e in enumerate(batch):
            event = e.fields if e.fields is not None else orjson.loads(e.value)
            if event.get("to") in ENDS:
                ends.append((i, event))
        with_payload: dict[int, bytes] = {}
        if ends:
            rows = await self.engine.reads.job_fields(
                queue, [batch[i].job_id for i, _ in ends], _RECORD_FIELDS
            )
            for (i, event), (env, result, version) in zip(ends, rows, strict=True):
                if version is None or int(version) != event.get("v"):
                    result = None  # not this transition's: the job moved on (its later ending has its own)
                with_payload[i] = orjson.dumps({**event, **payload_of_record(env, result, cap)})
        return [with_payload.get(i) or e.value for i, e in enumerate(batch)]

    async def ship_graph(self, graph_id: str) -> int:
        """Ship a task graph's own events (its transitions, nodes it skipped or canceled while waiting)."""
        batch = await self.engine.graphs.events(graph_id, self.settings.batch)
        if not batch:
            self.signals.graph_shipped.signal((graph_id, 0))
            return 0
        await self.produce((e.job_id, e.value) for e in batch)
        await self.engine.graphs.trim_events(graph_id, batch[-1].entry)
        self.shipped += len(batch)
        self.signals.graph_shipped.signal((graph_id, len(batch)))
        return len(batch)

    async def observe(self, queues: Sequence[str]) -> None:
        """Set the backlog and drop gauges of ``queues`` (called on each beat); a queue this instance no
        longer owns leaves its gauges (its new owner reports it), so no stale backlog stays exported."""
        for gone in self._observed - set(queues):
            for gauge in (metrics.EVENTS_BACKLOG, metrics.EVENTS_DROPPED):
                with contextlib.suppress(KeyError):
                    gauge.remove(gone)
        self._observed = set(queues)
        for queue, waiting in (await self.engine.events.backlog(queues)).items():
            metrics.EVENTS_BACKLOG.labels(queue).set(waiting)
            stats = await self.engine.reads.queue_stats(queue)
            metrics.EVENTS_DROPPED.labels(queue).set(stats.get("events_dropped", 0))
