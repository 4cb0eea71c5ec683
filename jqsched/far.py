"""The far-future tier's mover: each scheduler instance owns some partitions of the compacted schedule
topic (dealt evenly by rendezvous over ``<topic>/<partition>`` among the group's live members). The
topic is the index:

* **built once**: a partition gained is read from its beginning up to the end offset it had then, into
  an in-memory time index (:mod:`jqsched.farindex`: key → run_at and offset, offsets bucketed by second;
  no envelope is kept). The record's ``jobq-run-at`` header gives its time (older records are decoded);
* **kept by the tail**: the same consumer goes on reading what is written after (new far jobs,
  unschedules' tombstones, the tombstones of moves); it never reads a partition whole again;
* **moved a horizon ahead**: the offsets of the buckets now due within the horizon are fetched by offset
  (:mod:`jqsched.farfetch`, one partition ahead of the writes) and moved into the engine, a queue's
  jobs beside the others' (``schedule_far`` first: a job Redis already holds — moved earlier, or canceled
  — is not moved again; then ``enqueue_batch``), then their records are tombstoned in their partition
  (compaction forgets them). Moves of a partition wait until its build is done, so a
  tombstone later in the log cancels the move of an earlier record.

Redis keeps only an index entry per far job (``GET``/``DELETE``). Redis lost (a partition's
``jobq:far:scanned:<topic>/<p>`` marker gone) rewrites the entries of the owned partitions from memory.
A partition lost in a re-deal leaves memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from jqcore import metrics
from jqcore.clock import now_ms
from jqcore.envelope import Envelope, decode
from jqcore.errors import BackendUnavailable, EnvelopeError
from jqcore.log import get_logger
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import FarSettings
from jqcore.testsignal import TestSignal
from jqengine import Engine, RedisClient
from jqruntime.kafka import AsyncProducer, Record
from jqruntime.stores import farscan
from jqruntime.stores.membership import deal_evenly
from jqsched.farfetch import Fetcher, schedule_consumer
from jqsched.farindex import Keys, PartitionIndex, record_run_at

__all__ = ["FarMover", "FarSignals"]

log = get_logger("jqsched.far")

READ = 1_000
"""Records read from the build/tail consumer per step (the event loop is not yielded while they are
indexed)."""
MOVE = 2_000
"""Offsets fetched and moved per partition and step (whole seconds: a bucket is never split)."""
WRITE = 1_000
"""Index entries per ``schedule_far`` call when they are written from memory."""
BUILD_READS = 10
"""Reads of ``READ`` records per step while a partition is built (the loop is yielded between)."""
MOVE_EVERY_S = 0.2
"""Moves are looked for at most this often (a bucket is a second; the horizon is the slack)."""
BUILD_WAIT_S = 0.01
"""While a partition is built, the pause when no record is at hand (else the loop's idle pause)."""
PARK_S = 60.0
"""A partition lost in a re-deal stays indexed (and read) this long, moving nothing: regained meanwhile —
a member that missed heartbeats on a loaded machine is soon back — it needs no build."""
CHECK_REDIS_S = 1.0
"""How often the partitions' markers in Redis are checked (a loss rewrites the index entries)."""


@dataclass
class FarSignals:
    """What the mover reports to a test that listens (:mod:`jqcore.testsignal`)."""

    built: TestSignal[tuple[int, int]] = field(default_factory=lambda: TestSignal("far index built"))
    """A gained partition's index was built from the topic: (partition, live records)."""
    rewritten: TestSignal[tuple[list[int], int]] = field(
        default_factory=lambda: TestSignal("far entries rewritten")
    )
    """Redis's index entries of partitions were written from memory: (partitions, entries)."""
    moved: TestSignal[int] = field(default_factory=lambda: TestSignal("far jobs moved"))
    """Jobs moved into the engine by one move (those Redis held already not counted)."""


@dataclass
class _Building:
    end: int
    """The partition's end offset when it was gained: the build is done once read up to it."""
    started: float
    """``time.monotonic()`` at the start."""


class FarMover:
    def __init__(
        self,
        engine: Engine,
        redis: RedisClient,
        kafka: KafkaSettings,
        far: FarSettings,
        name: str,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.engine, self.kafka, self.far, self.name, self.clock = engine, kafka, far, name, clock
        self.redis = redis
        """The engine's Redis, for the partitions' scan markers (:mod:`jqruntime.stores.farscan`)."""
        self.producer = AsyncProducer(kafka)
        self.owned: list[int] = []
        self.moved = 0
        self.builds = 0
        """Partition index builds done (a partition is read whole only when gained)."""
        self.build_rate = 0.0
        """Records per second of the last round of builds (the partitions gained together) of at least
        1,000 records."""
        self._round: tuple[float, int] | None = None
        """While partitions are being built: when the first of them started, and the records read by
        those already built."""
        self.indexes: dict[int, PartitionIndex] = {}
        self.keys = Keys()
        """How the indexes hold the records' keys (packed small)."""
        self._building: dict[int, _Building] = {}
        self._consumer: Consumer | None = None
        self._fetcher: Fetcher | None = None
        self._partitions: list[int] = []
        self._checked_at = 0.0
        self._moved_at = 0.0
        self._moving: asyncio.Task[bool] | None = None
        """The move under way (it runs beside the reads)."""
        self._parked: dict[int, float] = {}
        """Partitions lost in a re-deal, still indexed: when they were lost (``time.monotonic()``)."""
        self.park_s = PARK_S
        self.signals = FarSignals()

    async def close(self) -> None:
        if self._moving is not None:
            self._moving.cancel()
            with contextlib.suppress(BaseException):
                await self._moving
            self._moving = None
        if self._consumer is not None:
            await asyncio.to_thread(self._consumer.close)
            self._consumer = None
        if self._fetcher is not None:
            await asyncio.to_thread(self._fetcher.close)
            self._fetcher = None
        await asyncio.to_thread(self.producer.close, 5.0)

    async def step(self, members: Sequence[str]) -> bool:
        """Read what has arrived, keep Redis's entries, move what is due; True: call again at once."""
        owned = await self._owned(members)
        if owned != self.owned:
            await self._redeal(owned)
        await self._drop_parked()
        if not self.indexes or self._consumer is None:
            return False
        read = 0
        for _ in range(BUILD_READS if self._building else 1):
            msgs = self._consumer.consume(READ, 0)
            if not msgs:
                break
            await self._apply(msgs)
            read += len(msgs)
        await self._finish_builds(read > 0)
        await self._check_redis()
        moving = self._moving
        if moving is not None and moving.done():
            self._moving = None
            moving.result()  # a failed move: raised here (the loop logs it and steps again)
        if self._moving is None and time.monotonic() - self._moved_at >= MOVE_EVERY_S:
            # moves run beside the reads (a build or the tail goes on while records are fetched)
            self._moved_at = time.monotonic()
            self._moving = asyncio.create_task(self._move_due(), name="far:move")
        if self._building and not read:  # the prefetch ran dry mid-build: a short wait, not the idle one
            await asyncio.sleep(BUILD_WAIT_S)
            return True
        return read > 0

    # -- ownership ----------------------------------------------------------------------------------

    async def _owned(self, members: Sequence[str]) -> list[int]:
        if not self._partitions:
            self._partitions = await asyncio.to_thread(self._topic_partitions)
        dealt = deal_evenly([f"{self.far.topic}/{p}" for p in self._partitions], members)
        return [p for p in self._partitions if dealt.get(f"{self.far.topic}/{p}") == self.name]

    def _topic_partitions(self) -> list[int]:
        consumer = self._consumer or self._new_consumer()
        self._consumer = consumer
        md = consumer.list_topics(self.far.topic, timeout=10)
        found = md.topics.get(self.far.topic)
        return sorted(found.partitions) if found is not None and found.error is None else []

    def _new_consumer(self) -> Consumer:
        return schedule_consumer(self.kafka, f"jobq-scheduler.{self.name}", 4_096)

    async def _redeal(self, owned: list[int]) -> None:
        """Park the partitions lost (see :data:`PARK_S`) — drop those still being built: regained, they
        would be built again anyway —; build the ones gained from the start (unless parked: they are
        indexed already)."""
        gone = [p for p in self.owned if p not in owned]
        gained = [p for p in owned if p not in self.owned]
        new = [p for p in gained if p not in self._parked]
        for p in gained:
            self._parked.pop(p, None)
        await self._drop([p for p in gone if p in self._building])
        self._parked.update({p: time.monotonic() for p in gone if p in self.indexes})
        if self._consumer is None:
            self._consumer = await asyncio.to_thread(self._new_consumer)
        consumer, topic = self._consumer, self.far.topic

        def assign() -> dict[int, int]:
            ends = {}
            for p in new:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                ends[p] = high if high > low else 0
            if new:
                consumer.incremental_assign([TopicPartition(topic, p, -2) for p in new])  # -2: beginning
            return ends

        ends = await asyncio.to_thread(assign)
        for p, end in ends.items():
            self.indexes[p] = PartitionIndex()
            self._building[p] = _Building(end, time.monotonic())
        if new and self._round is None:
            self._round = (time.monotonic(), 0)
        self.owned = owned
        log.info("schedule partitions dealt", owned=owned, gained=gained, built=new, lost=gone)
        if gained:
            self._checked_at = 0.0  # a parked one's markers: checked now

    async def _drop_parked(self) -> None:
        """Partitions parked longer than ``park_s`` leave memory (and the consumer)."""
        now = time.monotonic()
        await self._drop([p for p, at in self._parked.items() if now - at >= self.park_s])

    async def _drop(self, partitions: list[int]) -> None:
        if not partitions or self._consumer is None:
            return
        tps = [TopicPartition(self.far.topic, p) for p in partitions]
        await asyncio.to_thread(self._consumer.incremental_unassign, tps)
        for p in partitions:
            self._parked.pop(p, None)
            self.indexes.pop(p, None)
            self._building.pop(p, None)

    # -- the build and the tail ---------------------------------------------------------------------

    async def _apply(self, msgs: Sequence[Message]) -> None:
        """Records in log order into the partitions' indexes; a tombstone of a live key on a built
        partition also drops its Redis entry (an unschedule whose own drop may not have happened)."""
        dropped: dict[str, list[str]] = {}
        for msg in msgs:
            found = self._record(msg)
            if found is None:
                continue
            partition, offset, key, run_at = found
            index = self.indexes[partition]
            if run_at is not None:
                index.put(key, offset, run_at)
                continue
            if index.remove(key) and partition in self.owned and partition not in self._building:
                queue, job_id = self.keys.unpack(key)
                dropped.setdefault(queue, []).append(job_id)
        for queue, ids in dropped.items():
            await self.engine.timers.drop_far(queue, ids)
        await asyncio.sleep(0)  # a long build must not hold the timers' loop

    def _record(self, msg: Message) -> tuple[int, int, bytes, int | None] | None:
        """``(partition, offset, packed key, run_at or None for a tombstone)``; None for what is skipped."""
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                raise BackendUnavailable(f"consume error on {self.far.topic}: {err.str()}")
            return None
        partition, offset = msg.partition() or 0, msg.offset() or 0
        if partition not in self.indexes:
            return None  # a partition unassigned since it was read
        building = self._building.get(partition)
        if building is not None and offset + 1 >= building.end:
            building.end = 0  # read up to the end it had when gained
        key = self.keys.pack_record_key(msg.key())
        if key is None:
            log.error("record without a <queue>/<id> key in the schedule topic; left there")
            return None
        try:
            return partition, offset, key, record_run_at(msg.headers(), msg.value())
        except EnvelopeError as exc:
            log.error("malformed record in the schedule topic; left there", error=exc.message)
            return None

    async def _finish_builds(self, read: bool) -> None:
        """Partitions read up to the end they had when gained are built: their Redis entries are
        written from memory unless their marker shows Redis kept them."""
        if not self._building:
            return
        if not read and self._consumer is not None:  # nothing arrived: compare positions with the ends
            tps = [TopicPartition(self.far.topic, p) for p in self._building]
            for tp in self._consumer.position(tps):
                if tp.offset >= self._building[tp.partition].end:
                    self._building[tp.partition].end = 0
        done = [p for p, b in self._building.items() if b.end == 0]
        for p in done:
            b = self._building.pop(p)
            records, took = self.indexes[p].read, time.monotonic() - b.started
            self.builds += 1
            log.info(
                "schedule partition indexed",
                partition=p,
                records=records,
                live=len(self.indexes[p]),
                seconds=round(took, 3),
            )
            self.signals.built.signal((p, len(self.indexes[p])))
            if self._round is not None:
                self._round = (self._round[0], self._round[1] + records)
        if done:
            self._checked_at = 0.0  # check the markers of the built ones now
        if not self._building and self._round is not None:
            (started, records), self._round = self._round, None
            took = time.monotonic() - started
            rate = records / max(took, 1e-6)
            if records >= 1000:
                self.build_rate = rate
            log.info(
                "schedule partitions indexed", records=records, seconds=round(took, 3), per_s=round(rate)
            )

    async def _check_redis(self) -> None:
        """Rewrite the index entries of the built partitions whose marker Redis lost."""
        if time.monotonic() - self._checked_at < CHECK_REDIS_S:
            return
        built = [p for p in self.owned if p not in self._building]
        if not built:
            return
        lost = await farscan.unscanned(self.redis, self.far.topic, built)
        if lost:
            await self._rewrite(lost)
        self._checked_at = time.monotonic()

    async def _rewrite(self, partitions: list[int]) -> None:
        topic = self.far.topic
        await farscan.begin(self.redis, topic, partitions)
        by_queue: dict[str, list[tuple[str, int]]] = {}
        written = 0
        for p in partitions:
            for key, run_at in self.indexes[p].entries():
                queue, job_id = self.keys.unpack(key)
                by_queue.setdefault(queue, []).append((job_id, run_at))
        for queue, items in by_queue.items():
            for i in range(0, len(items), WRITE):
                await self.engine.schedule_far(queue, items[i : i + WRITE])
            written += len(items)
        if await farscan.mark(self.redis, topic, partitions, self.clock()):
            log.info("far-future index entries written from memory", partitions=partitions, entries=written)
            self.signals.rewritten.signal((partitions, written))
        else:  # Redis lost meanwhile (or an owner of a moment ago finished first): checked again
            log.warning(
                "a far-future index marker went while its entries were written", partitions=partitions
            )

    # -- moves --------------------------------------------------------------------------------------

    async def _move_due(self) -> bool:
        """Move what is due within the horizon from the built partitions; True when some was. The
        partitions' records are fetched one partition ahead of the writes into Redis (one consumer
        fetches, in a thread, while the event loop writes the partition before)."""
        cut = self.clock() + int(self.far.horizon_s * 1000)
        due: list[tuple[int, PartitionIndex, list[int]]] = []
        for p in list(self.owned):
            index = self.indexes.get(p)
            if index is None or p in self._building or (index.next_due() or cut + 1) > cut:
                continue
            due.append((p, index, index.take_due(cut, MOVE)))
        if not due:
            return False
        left = list(due)  # taken and not moved yet: given back when a fetch or a write fails
        fetching: asyncio.Future[list[Message]] | None = None
        try:
            if self._fetcher is None:
                self._fetcher = await asyncio.to_thread(Fetcher, self.kafka, self.far.topic, self.name)
            fetcher = self._fetcher
            fetching = asyncio.ensure_future(asyncio.to_thread(fetcher.fetch, due[0][0], due[0][2]))
            for i, (p, index, _) in enumerate(due):
                msgs = await fetching
                if i + 1 < len(due):
                    nxt = due[i + 1]
                    fetching = asyncio.ensure_future(asyncio.to_thread(fetcher.fetch, nxt[0], nxt[2]))
                await self._move(p, index, msgs)
                left.pop(0)
        except BaseException:
            if fetching is not None and not fetching.done():  # its thread uses the consumer: let it end
                with contextlib.suppress(BaseException):
                    await asyncio.shield(fetching)
            for _, index, offsets in left:
                index.give_back(offsets)  # due again at once
            raise
        return True

    async def _move(self, partition: int, index: PartitionIndex, msgs: Sequence[Message]) -> None:
        """Move the fetched records still latest for their key (``schedule_far`` first: a job Redis
        already holds is not moved again), then tombstone them."""
        by_queue: dict[str, list[Envelope]] = {}
        origins: dict[str, str] = {}
        done: list[tuple[bytes, bytes, int]] = []  # (the record's key, packed, offset)
        for msg in msgs:
            raw, value, offset = msg.key() or b"", msg.value(), msg.offset() or 0
            key = self.keys.pack_record_key(raw) or b""
            if value is None or not index.is_latest(key, offset):
                continue  # superseded by a later record or a tombstone
            try:
                env = decode(value)
            except EnvelopeError as exc:
                log.error("malformed record in the schedule topic; left there", error=exc.message)
                index.forget(key, offset)
                continue
            done.append((raw, key, offset))
            by_queue.setdefault(env.queue, []).append(env)
            origins[env.id] = f"{self.far.topic}/{partition}/{offset}"
        moved = sum(await asyncio.gather(*(self._into_engine(envs, origins) for envs in by_queue.values())))
        # the engine holds them now (or held them already): the topic forgets them (in the record's own
        # partition, whatever the key's partition would be)
        topic = self.far.topic
        tombstones = [Record(topic, None, raw, partition=partition) for raw, _, _ in done]
        await self.producer.produce_many(tombstones)
        for _, key, offset in done:
            index.forget(key, offset)
        self.moved += moved
        metrics.SCHEDULER_FAR_MOVED.inc(moved)
        self.signals.moved.signal(moved)

    async def _into_engine(self, envs: list[Envelope], origins: dict[str, str]) -> int:
        """One queue's part of a move (the queues of a move are written concurrently): how many moved."""
        outcomes = await self.engine.schedule_far(envs[0].queue, [(e.id, e.run_at or 0) for e in envs])
        movable = [e for e, o in zip(envs, outcomes, strict=True) if o == "scheduled"]
        if movable:
            await self.engine.enqueue_batch(movable, origins=origins)
        return len(movable)

    def status(self) -> dict[str, Any]:
        return {
            "partitions": self.owned,
            "moved": self.moved,
            "indexed": sum(len(self.indexes[p]) for p in self.owned),
            "parked": sorted(self._parked),
            "building": sorted(self._building),
            "builds": self.builds,
            "build_records_per_s": round(self.build_rate),
        }
