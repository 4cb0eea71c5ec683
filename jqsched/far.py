"""The far-future tier's mover: each scheduler instance owns some partitions of the compacted schedule
topic (rendezvous over ``<topic>/<partition>`` among the group's live members, like the queues) and
reads them whole every ``rescan_s``:

* a job now due within the horizon is moved into the engine (``schedule_far`` first: a job Redis already
  holds — moved earlier, or canceled, which leaves a tombstone record — is not moved again), then its
  record is tombstoned in the topic (compaction forgets it);
* a job still beyond the horizon gets its Redis index entry written again (``GET``/``DELETE`` read it),
  which is how the index comes back after Redis lost everything;
* a tombstone (an unscheduled or moved job) is skipped.

Redis lost (a partition's ``jobq:far:scanned:<topic>/<p>`` marker gone — also when Redis was lost while
a read ran: a read marks only the partitions whose start mark survived) or a re-deal of the partitions
starts a read from the beginning at once. Nothing is held in memory between records.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from jqcore import metrics
from jqcore.clock import now_ms
from jqcore.envelope import Envelope, decode
from jqcore.errors import BackendUnavailable, EnvelopeError
from jqcore.kafka import AsyncProducer, Record, parse_schedule_key, schedule_key
from jqcore.log import get_logger, kafka_logging
from jqcore.membership import owner
from jqcore.settings import FarSettings, KafkaSettings
from jqcore.state import Engine
from jqcore.testsignal import TestSignal

__all__ = ["FarMover", "FarSignals"]

log = get_logger("jqsched.far")

BATCH = 500


@dataclass
class FarSignals:
    """What the mover reports to a test that listens (:mod:`jqcore.testsignal`)."""

    scanned: TestSignal[bool] = field(default_factory=lambda: TestSignal("far scan finished"))
    """A whole read of the owned partitions ended: True when it rewrote every index entry (a rebuild)."""


class FarMover:
    def __init__(
        self,
        engine: Engine,
        kafka: KafkaSettings,
        far: FarSettings,
        name: str,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.engine, self.kafka, self.far, self.name, self.clock = engine, kafka, far, name, clock
        self.producer = AsyncProducer(kafka)
        self.owned: list[int] = []
        self.moved = 0
        self.scans = 0
        """Completed whole reads of the owned partitions (tests and benches wait on it)."""
        self._consumer: Consumer | None = None
        self._partitions: list[int] = []
        self._scan_end: dict[int, int] = {}
        """While a whole read runs: partition → its end offset when the read started."""
        self._next_scan = 0.0
        self._rebuild = True
        """The running read writes every index entry (first read of these partitions, or Redis lost)."""
        self._due: dict[tuple[str, str], tuple[Envelope, str]] = {}
        """Jobs found due during a whole read, moved when it ends (a later tombstone removes them)."""
        self.signals = FarSignals()

    async def close(self) -> None:
        if self._consumer is not None:
            await asyncio.to_thread(self._consumer.close)
            self._consumer = None
        await asyncio.to_thread(self.producer.close, 5.0)

    async def step(self, members: Sequence[str]) -> bool:
        """Read what has arrived and act on it; True when records were read (call again at once)."""
        owned = await self._owned(members)
        if owned != self.owned or await self._redis_lost(owned):
            self._rebuild = True  # new partitions, or Redis lost the index: write every entry again
            await self._scan_from_start(owned)
        elif time.monotonic() >= self._next_scan:
            await self._scan_from_start(owned)
        if self._consumer is None or not owned:
            return False
        msgs = self._consumer.consume(BATCH, 0)
        if msgs:
            await self._handle(msgs)
            return True
        if self._scan_end and await self._scan_done():
            await self._finish_scan()
        return False

    async def _owned(self, members: Sequence[str]) -> list[int]:
        if not self._partitions:
            self._partitions = await asyncio.to_thread(self._topic_partitions)
        topic = self.far.topic
        return [p for p in self._partitions if owner(f"{topic}/{p}", members) == self.name]

    def _topic_partitions(self) -> list[int]:
        consumer = self._consumer or self._new_consumer()
        self._consumer = consumer
        md = consumer.list_topics(self.far.topic, timeout=10)
        found = md.topics.get(self.far.topic)
        return sorted(found.partitions) if found is not None and found.error is None else []

    def _new_consumer(self) -> Consumer:
        return Consumer(
            {
                **self.kafka.client_config(),
                **kafka_logging(),
                "group.id": f"jobq-scheduler.{self.name}",  # never joined or committed: assign only
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                "queued.max.messages.kbytes": 16_384,
            }
        )

    async def _redis_lost(self, owned: Sequence[int]) -> bool:
        if self._scan_end or not owned:
            return False  # a read is running; it sets the markers when done
        return not await self.engine.far_scanned(self.far.topic, owned)

    async def _scan_from_start(self, owned: list[int]) -> None:
        """Assign ``owned`` from their first offset and remember where each ends now."""
        if self._consumer is None:
            self._consumer = await asyncio.to_thread(self._new_consumer)
        consumer = self._consumer

        def assign() -> dict[int, int]:
            ends = {}
            for p in owned:
                _, high = consumer.get_watermark_offsets(TopicPartition(self.far.topic, p), timeout=10)
                ends[p] = high
            consumer.assign([TopicPartition(self.far.topic, p, -2) for p in owned])  # -2: beginning
            return ends

        self._scan_end = await asyncio.to_thread(assign)
        await self.engine.begin_far_scan(self.far.topic, list(self._scan_end))
        self.owned = owned
        self._next_scan = time.monotonic() + self.far.rescan_s
        log.info("reading the schedule topic", partitions=owned)

    async def _scan_done(self) -> bool:
        """Every owned partition read up to where it ended when the read started."""
        assert self._consumer is not None
        positions = self._consumer.position([TopicPartition(self.far.topic, p) for p in self._scan_end])
        return all(
            self._scan_end[tp.partition] == 0 or tp.offset >= self._scan_end[tp.partition] for tp in positions
        )

    async def _finish_scan(self) -> None:
        await self._move_due()
        if not await self.engine.mark_far_scanned(self.far.topic, list(self._scan_end), self.clock()):
            log.warning(
                "Redis lost the far-future index during a whole read; reading again", topic=self.far.topic
            )
        self._scan_end = {}
        rebuilt, self._rebuild = self._rebuild, False
        self.scans += 1
        self.signals.scanned.signal(rebuilt)

    async def _handle(self, msgs: Sequence[Message]) -> None:
        """The topic is a changelog keyed ``<queue>/<id>`` (compaction keeps only the latest record of a
        key, but lazily: a read sees older versions first). The latest record of each key in the batch
        decides its index entry; moves wait until a whole read is done, so a tombstone later in the log
        cancels a move the read found before it."""
        cut = self.clock() + int(self.far.horizon_s * 1000)
        latest: dict[tuple[str, str], int | None] = {}  # key → run_at to index, None: drop the entry
        for msg in msgs:
            found = self._record(msg)
            if found is None:
                continue
            key, env = found
            self._due.pop(key, None)
            if env is None:
                latest[key] = None  # unscheduled, or moved earlier
            elif env.run_at is None or env.run_at <= cut:
                self._due[key] = (env, f"{self.far.topic}/{msg.partition()}/{msg.offset()}")
                latest.pop(key, None)
            else:
                latest[key] = env.run_at
        await self._apply_index(latest)
        if not self._scan_end:  # reading the tail: nothing older can follow
            await self._move_due()

    async def _apply_index(self, latest: dict[tuple[str, str], int | None]) -> None:
        """Index entries after a batch: drop tombstoned keys; (re)write the rest on a rebuilding read
        and on the tail (a periodic read only moves: the entries exist)."""
        later: dict[str, list[tuple[str, int]]] = {}
        dropped: dict[str, list[str]] = {}
        for (queue, job_id), run_at in latest.items():
            if run_at is None:
                dropped.setdefault(queue, []).append(job_id)
            else:
                later.setdefault(queue, []).append((job_id, run_at))
        for queue, ids in dropped.items():
            await self.engine.drop_far(queue, ids)
        if self._rebuild or not self._scan_end:  # a periodic read only moves: the entries exist
            for queue, items in later.items():
                await self.engine.schedule_far(queue, items)

    def _record(self, msg: Message) -> tuple[tuple[str, str], Envelope | None] | None:
        """``((queue, id), envelope or None for a tombstone)``; None for what is skipped."""
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                raise BackendUnavailable(f"consume error on {self.far.topic}: {err.str()}")
            return None
        key = parse_schedule_key(msg.key())
        if key is None:
            log.error("record without a <queue>/<id> key in the schedule topic; left there")
            return None
        value = msg.value()
        if value is None:
            return key, None
        try:
            return key, decode(value)
        except EnvelopeError as exc:
            log.error("malformed record in the schedule topic; left there", error=exc.message)
            return None

    async def _move_due(self) -> None:
        """Move every due job found into the engine (``schedule_far`` first: a job Redis already holds —
        moved earlier, or a cancel's tombstone record — is not moved again), then tombstone its record."""
        due, self._due = self._due, {}
        if not due:
            return
        by_queue: dict[str, list[Envelope]] = {}
        origins = {env.id: origin for env, origin in due.values()}
        for env, _ in due.values():
            by_queue.setdefault(env.queue, []).append(env)
        moved = 0
        for queue, envs in by_queue.items():
            outcomes = await self.engine.schedule_far(queue, [(e.id, e.run_at or 0) for e in envs])
            movable = [e for e, o in zip(envs, outcomes, strict=True) if o == "scheduled"]
            if movable:
                await self.engine.enqueue_batch(movable, origins=origins)
                moved += len(movable)
        # the engine holds them now (or held them already): the topic forgets them
        tombstones = [Record(self.far.topic, None, schedule_key(q, i)) for q, i in due]
        await self.producer.produce_many(tombstones)
        self.moved += moved
        metrics.SCHEDULER_FAR_MOVED.inc(moved)

    def status(self) -> dict[str, Any]:
        return {"partitions": self.owned, "moved": self.moved, "scans": self.scans}
