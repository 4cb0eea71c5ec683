"""The holding lane: a paused, rate-limited or over-budget queue steps aside, in order, so the other queues of
its topic keep flowing (``docs/relay.md``, "Holding lane").

A topic relay's term plans every batch (:meth:`Lane.plan`): a queue that is held, paused, over its memory
budget, or short of rate tokens has its records **set aside** — produced unchanged to ``<topic>.held``, in
the queue's own lane partition, with ``jobq-source`` (where it was read) — and the source offsets are
committed past them like any other. Once a queue has a record in the lane, all its records go there until
the lane holds none of it (so a queue's jobs, and an exclusivity key's, reach Redis in the order they were
read). A drain task of the same term (:meth:`Lane.drain`) writes lane records back into Redis, queue by
queue in lane order, at each queue's rate and only while it is not paused or over budget, with the origin
of its source record (a re-read is the same record again: the engine's dedup absorbs it). When a queue's
lane is empty and nothing holds it, it is **released**: its next records are written direct.

Order of a batch: direct writes and their ``WAIT`` first, then the lane produce (Kafka confirms), then the
topic fence (:func:`topic_fence`), then the source commit, then the lane state learns the records' offsets.
What the lane holds and what is drained lives in Kafka: the lane group's committed offsets and their
metadata (:mod:`jqcore.lane`), committed by the drain; a new term reads them back (:meth:`Lane.start`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from tenacity import AsyncRetrying, retry_if_exception, wait_exponential

from jqcore import metrics
from jqcore.aio import cancel_and_wait, wait_event
from jqcore.clock import now_ms
from jqcore.errors import BackendUnavailable
from jqcore.keys import RELAY_FENCES_KEY, RELAY_HELD_KEY
from jqcore.lane import LanePartition, LaneState, Run
from jqcore.log import get_logger, kafka_logging
from jqcore.testsignal import crash_point
from jqcore.topics import held_topic
from jqengine import FenceRejected, RedisClient, recording_writes
from jqrelay.backpressure import held
from jqrelay.batch import (
    ASIDE_AT_HEADER,
    Batch,
    TermEnded,
    header,
    held_retries,
    holds_batch,
    lane_record,
    retriable,
)
from jqruntime.kafka import Delivered, committed_offsets

if TYPE_CHECKING:
    from jqrelay.elector import Term
    from jqrelay.topic import TopicRelay

__all__ = ["Lane", "topic_fence"]

log = get_logger("jqrelay.lane")

COMMIT_EVERY_S = 1.0
"""The drain commits the lane's state at most this often (and at once when it releases a queue)."""
SNAPSHOT_EVERY_S = 1.0
"""How often the lock holder rewrites the held queues' snapshot (``jobq status``) and gauges."""
TRIM_AT = 10_000
TRIM_EVERY_S = 300.0
"""Drained records are deleted from the lane (``DeleteRecords`` below the committed offset) once this many
wait to be, or this long after the last time."""
IDLE_S = 0.25
"""The drain looks again this often while no held queue may be drained (tokens refill meanwhile)."""
POLL_MIN_S, POLL_MAX_S = 0.001, 0.01
SCAN_BATCH = 2000
RATE_WINDOW_S = 10.0


async def topic_fence(client: RedisClient, topic: str, fence: int) -> None:
    """Record ``fence`` as the newest term of ``topic`` (``ZADD GT``: only ever higher) and raise
    :class:`FenceRejected` when a newer term's is there: a batch that wrote nothing fenced (every record
    set aside) checks this before its commit, and the drain before each lane commit."""
    pipe = client.pipeline(transaction=False)
    pipe.zadd(RELAY_FENCES_KEY, {topic: fence}, gt=True)
    pipe.zscore(RELAY_FENCES_KEY, topic)
    _, newest = await pipe.execute()
    if newest is not None and int(newest) > fence:
        raise FenceRejected(topic, fence, int(newest))


class Lane:
    """One term's holding lane of one topic (:class:`jqrelay.topic.TopicRelay`'s, outside shadow mode)."""

    def __init__(self, relay: TopicRelay, term: Term) -> None:
        self.relay, self.term, self.topic = relay, term, relay.topic
        self.name = held_topic(relay.topic)
        self.group = relay.settings.lane_group(relay.topic)
        self.state = LaneState(1)
        self.reasons: dict[str, str] = {}
        self._reader: Consumer | None = None
        self._position: tuple[int, int] | None = None
        self._wake = asyncio.Event()
        self._dirty = False
        self._commit_at = 0.0
        self._last: dict[int, tuple[int, str]] = {}
        """Each lane partition's (offset, metadata) as last committed (asynchronously) this term."""
        self._read_back: dict[int, tuple[int, str]] = {}
        """... as this term read it back at its start."""
        self._trimmed: dict[int, tuple[int, float]] = {}
        self._pending: list[tuple[str, Delivered, int]] = []
        self._next = 0
        self._drained: dict[str, deque[tuple[float, int]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._gauges: set[tuple[str, str]] = set()
        self._admin: Any = None

    # ---- the term's start and end -------------------------------------------------------------------
    def _consumer(self) -> Consumer:
        return Consumer(
            {
                **self.relay.kafka.client_config(),
                **kafka_logging(),
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                "isolation.level": "read_committed",
            }
        )

    def _read_committed(self) -> list[tuple[TopicPartition, int, int]]:
        """Each lane partition's committed offset (with metadata) and watermarks (blocking)."""
        reader = self._reader = self._consumer()
        md = reader.list_topics(self.name, timeout=10)
        parts = sorted(md.topics[self.name].partitions) if self.name in md.topics else []
        if not parts or md.topics[self.name].error is not None:
            raise BackendUnavailable(f"holding lane {self.name!r} is missing: run `jobq topics create`")
        committed = committed_offsets(reader, [TopicPartition(self.name, p) for p in parts])
        return [(tp, *reader.get_watermark_offsets(tp, timeout=10)) for tp in committed]

    async def start(self) -> None:
        """Read the lane's state back from Kafka before the first batch is planned: every queue a previous
        term listed is held at once, the records produced after its last lane commit are scanned now (the
        barrier: no queue with records in the lane is ever written direct), the rest of each listed queue's
        records in the background; then the drain and the snapshot run until :meth:`stop`."""
        found = await asyncio.to_thread(self._read_committed)
        self.state = LaneState(len(found))
        at = now_ms()
        listed: list[tuple[int, int, int]] = []
        tails: list[tuple[int, int, int]] = []
        for tp, low, high in found:
            tail, scan, reset = self.state.read_back(tp.partition, tp.offset, tp.metadata, low, high, at)
            if reset:  # an unclean leader election lost lane records: scan it all again (duplicates only)
                log.error(
                    "holding lane offsets beyond its end; scanning the partition again",
                    lane=self.name,
                    partition=tp.partition,
                    end=high,
                )
            self._last[tp.partition] = self._read_back[tp.partition] = self.state.part(
                tp.partition
            ).metadata()
            if tail is not None:
                tails.append((tp.partition, *tail))
            if scan is not None:
                listed.append((tp.partition, *scan))
        for p, start, end in tails:
            await self._scan(p, start, end)
        if self.state.held:
            log.info(  # records: those found in the tails; the listed ranges are scanned in the background
                "holding lane read back",
                lane=self.name,
                held=sorted(self.state.held),
                records=self._total(),
                scanning=[f"{p}:[{start},{end})" for p, start, end in listed],
            )
        self._tasks = [
            asyncio.create_task(self._scan_listed(*x), name=f"lane-scan:{self.name}") for x in listed
        ]
        self._tasks += [
            asyncio.create_task(self.drain(), name=f"lane-drain:{self.topic}"),
            asyncio.create_task(self._snapshots(), name=f"lane-snapshot:{self.topic}"),
        ]
        self.relay.queue_limits.listeners.append(self._wake.set)

    async def stop(self) -> None:
        """End the term's lane tasks; commit what the drain did since its last commit while the lock is
        still this term's (a new term would otherwise drain it again: duplicates, never a loss)."""
        with contextlib.suppress(ValueError):
            self.relay.queue_limits.listeners.remove(self._wake.set)
        for task in self._tasks:
            try:
                await cancel_and_wait(task)
            except Exception as exc:  # what ended it ended the term too (the main loop raised it)
                log.info("holding lane task ended", lane=self.name, task=task.get_name(), error=repr(exc))
        if (
            self._reader is not None
            and self._last != self._read_back
            and self.relay.elector.trusted_term() == self.term
        ):
            try:
                async with asyncio.timeout(10):
                    await self._commit(final=True)
            except Exception as exc:
                log.warning(
                    "holding lane state not committed at the term's end", lane=self.name, error=repr(exc)
                )
        for topic, queue in self._gauges:
            _remove_gauges(topic, queue)
        if self._reader is not None:
            await asyncio.to_thread(self._reader.close)
            self._reader = None

    def check(self) -> None:
        """Raise what ended the drain (a stale fence, the term, Kafka failing): it ends the term too."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
                raise exc

    def _total(self) -> int:
        return sum(self.state.records(q) for q in self.state.held)

    # ---- scans ---------------------------------------------------------------------------------------
    async def _scan(self, p: int, start: int, end: int, *, listed: bool = False) -> dict[str, list[Run]]:
        """Read lane partition ``p`` over ``[start, end)``: the tail (every record is undrained, added to
        the state) or with ``listed`` the listed queues' range (their undrained records, returned as
        runs)."""
        part = self.state.part(p)
        found = LanePartition()
        scanner = await asyncio.to_thread(self._consumer)
        try:
            scanner.assign([TopicPartition(self.name, p, start)])
            last, idle = start - 1, POLL_MIN_S
            while last < end - 1:
                msgs, idle = await _poll(scanner, SCAN_BATCH, idle)
                for msg in msgs:
                    _check(msg, self.name)
                    offset = msg.offset() or 0
                    if offset <= last or offset >= end:
                        continue
                    last = offset
                    queue = (msg.key() or b"").decode()
                    at = _aside_at(msg)
                    if not listed:
                        if self.state.tail_record(p, queue, offset, at):
                            log.info("queue held (found in the lane)", topic=self.topic, queue=queue)
                    elif part.undrained(queue, offset):
                        found.add(queue, offset, at)
        finally:
            await asyncio.to_thread(scanner.close)
        return found.runs

    async def _scan_listed(self, p: int, start: int, end: int) -> None:
        self.state.listed_scanned(p, await self._scan(p, start, end, listed=True))
        self._dirty = True
        self._wake.set()

    # ---- planning a batch (the main loop) ------------------------------------------------------------
    def _reason(self, queue: str) -> str | None:
        """What keeps ``queue`` from Redis now (``paused``, ``memory``), None when nothing does."""
        if self.relay.queue_limits.paused(queue):
            return "paused"
        budgets = self.relay.budgets
        if budgets is not None and budgets.over_now(queue):
            return "memory"
        return None

    def _shown_reason(self, queue: str) -> str:
        return self._reason(queue) or ("rate" if self.relay.queue_limits.limiter(queue) else "draining")

    async def plan(self, batch: Batch) -> None:
        """Move the records of the queues that step aside now from ``batch.envelopes`` to ``batch.aside``.
        Per queue, in batch order: held, paused or over budget → all aside; limited → as many as its
        tokens allow go direct (a prefix of its records in each partition), the rest aside."""
        if not batch.envelopes:
            return
        counts = Counter(e.queue for e in batch.envelopes)
        if self.relay.budgets is not None:
            await self.relay.budgets.refresh(counts)
        # from here on nothing awaits: a release (the drain's, on the same loop) is before or after it all
        direct, reasons = self._decide(counts)
        if reasons:
            _split(batch, direct)
            self._hold(batch, reasons)
        self._account(batch)

    def _decide(self, counts: Counter[str]) -> tuple[dict[str, int], dict[str, str]]:
        """Per queue of a batch: how many of its records go direct, and why the rest step aside."""
        direct: dict[str, int] = {}
        reasons: dict[str, str] = {}
        for queue, n in counts.items():
            if queue in self.state.held:
                reasons[queue] = self._shown_reason(queue)
            elif (why := self._reason(queue)) is not None:
                reasons[queue] = why
            elif (limiter := self.relay.queue_limits.limiter(queue)) is not None:
                direct[queue] = limiter.try_take(n)
                if direct[queue] < n:
                    reasons[queue] = "rate"
            else:
                direct[queue] = n
        return direct, reasons

    def _hold(self, batch: Batch, reasons: dict[str, str]) -> None:
        at = now_ms()
        for queue, n in Counter(q for _, q in batch.aside).items():
            self.state.planned(queue, n)
            first = next(m for m, q in batch.aside if q == queue)
            if self.state.hold(
                queue, reasons[queue], at, f"{self.topic}/{first.partition()}/{first.offset()}"
            ):
                log.info(
                    "queue held: its jobs step aside into the holding lane",
                    topic=self.topic,
                    queue=queue,
                    reason=reasons[queue],
                    first=self.state.held[queue].first_source,
                )
                self.relay.signals.held.signal((queue, reasons[queue]))
        self.reasons.update(reasons)

    def _account(self, batch: Batch) -> None:
        if self.relay.budgets is not None:
            for queue, (jobs, size) in batch.sizes().items():
                self.relay.budgets.account(queue, jobs, size)

    async def set_aside(self, batch: Batch) -> None:
        """Produce the batch's aside records to the lane (Kafka confirms; retried forever, counted as the
        batch held for ``lane``), then check the topic fence: the batch may have written nothing fenced."""
        if not batch.aside:
            return
        at = now_ms()
        queues = {q: self.state.partition_for(q) for _, q in batch.aside}
        rank = {q: i for i, q in enumerate(queues)}  # each queue's records together, in batch order
        order = sorted(range(len(batch.aside)), key=lambda i: rank[batch.aside[i][1]])
        records = [
            lane_record(self.name, queues[q], self.topic, msg, q, self.reasons.get(q, "draining"), at)
            for msg, q in (batch.aside[i] for i in order)
        ]

        async def held_sleep(seconds: float) -> None:
            with held(self.topic, "lane"):
                await asyncio.sleep(seconds)

        async for attempt in AsyncRetrying(
            retry=retry_if_exception(retriable),
            wait=wait_exponential(multiplier=0.1, max=5),
            sleep=held_sleep,
        ):
            with attempt:
                delivered = await self.relay.dead_producer.produce_many(records)
        self._pending = [(batch.aside[i][1], d, at) for i, d in zip(order, delivered, strict=True)]
        crash_point("relay_after_aside")
        await self._fence()
        self.relay.count("aside", len(records))

    @property
    def pending(self) -> bool:
        """Records set aside whose source offsets are not committed yet."""
        return bool(self._pending)

    def produced(self) -> None:
        """The batch's source offsets are committed: its lane records count as waiting now (the drain may
        take them)."""
        if not self._pending:
            return
        by_queue: dict[tuple[str, int], list[int]] = {}
        ats: dict[str, int] = {}
        for queue, d, at in self._pending:
            by_queue.setdefault((queue, d.partition), []).append(d.offset)
            ats[queue] = at
        for (queue, p), offsets in by_queue.items():
            self.state.produced(queue, p, sorted(offsets), ats[queue])
        self._pending = []
        self._dirty = True
        self._wake.set()

    async def _fence(self) -> None:
        async for attempt in held_retries(
            self.topic, self.relay.signals, retry_if_exception(holds_batch), "write"
        ):
            with attempt:
                await topic_fence(self.relay.redis, self.topic, self.term.fence)

    # ---- the drain -----------------------------------------------------------------------------------
    def _trusted(self) -> bool:
        return self.relay.trusted(self.term)

    async def drain(self) -> None:
        """Write held queues' lane records back into Redis while this term lasts (see the module)."""
        relay = self.relay
        while self._trusted():
            if not await relay.guard.wait_for_room(self._trusted, self.topic):
                break
            await self._commit()
            if relay.budgets is not None and self.state.held:
                await relay.budgets.refresh(self.state.held)
            picked = self._pick()
            if picked is None:
                self._wake.clear()
                await wait_event(self._wake, IDLE_S)
                continue
            queue, p, run, k = picked
            msgs = await self._read(queue, p, run, k)
            if msgs:
                await self._write(queue, p, msgs)
            if self._maybe_release(queue):
                await self._commit()

    def _pick(self) -> tuple[str, int, Run, int] | None:
        """The next held queue that may be drained now (round robin), its run and how many records."""
        queues = list(self.state.held)
        for i in range(len(queues)):
            queue = queues[(self._next + i) % len(queues)]
            found = self.state.next_run(queue)
            if found is None:
                self._maybe_release(queue)
                continue
            if self._reason(queue) is not None:
                continue
            p, run = found
            want = min(self.relay.settings.batch, len(run))
            limiter = self.relay.queue_limits.limiter(queue)
            k = limiter.try_take(want) if limiter is not None else want
            if k > 0:
                self._next = (self._next + i + 1) % max(1, len(queues))
                return queue, p, run, k
        return None

    async def _read(self, queue: str, p: int, run: Run, k: int) -> list[Message]:
        """The next ``k`` records of ``queue``'s run from lane partition ``p``."""
        reader = self._reader
        assert reader is not None
        if self._position != (p, run.start):
            reader.assign([TopicPartition(self.name, p, run.start)])
            self._position = (p, run.start)
        got: list[Message] = []
        idle = POLL_MIN_S
        while len(got) < k and self._trusted():
            msgs, idle = await _poll(reader, k - len(got), idle)
            for msg in msgs:
                _check(msg, self.name)
                offset = msg.offset() or 0
                if msg.partition() != p or offset < self._position[1]:
                    continue  # fetched before the last assignment
                self._position = (p, offset + 1)
                if (msg.key() or b"").decode() != queue:
                    log.error(
                        "a lane record of another queue inside a run; skipped",
                        lane=self.name,
                        partition=p,
                        offset=offset,
                        queue=queue,
                    )
                    self.state.drained(queue, p, offset + 1)
                    return got
                got.append(msg)
        if not self._trusted():
            raise TermEnded
        return got

    async def _write(self, queue: str, p: int, msgs: Sequence[Message]) -> None:
        relay, term = self.relay, self.term
        batch = await relay.parse(msgs, lane=True)
        if not await relay.limit.acquire(len(batch.envelopes), self._trusted) or not self._trusted():
            raise TermEnded
        with recording_writes() as written:
            await relay.write(batch, term)
            await relay.replicated(batch, term, written)
        await relay.dead_letter(batch.dead, lane=True)
        await relay.dead_letter(batch.retry, retry=True, lane=True)
        crash_point("relay_after_drain_write")
        if relay.budgets is not None:
            for q, (jobs, size) in batch.sizes().items():
                relay.budgets.account(q, jobs, size)
        self.state.drained(queue, p, (msgs[-1].offset() or 0) + 1)
        self._drained.setdefault(queue, deque()).append((time.monotonic(), len(msgs)))
        self._dirty = True
        await relay.save_counts()
        if relay.signals.lane.enabled:
            relay.signals.lane.signal(dict(relay.lane_counts))

    def _maybe_release(self, queue: str) -> bool:
        """Release ``queue`` when nothing of it waits in the lane or is on its way and nothing holds it."""
        if queue not in self.state.held or not self.state.releasable(queue) or self._reason(queue):
            return False
        hold = self.state.release(queue)
        self.reasons.pop(queue, None)
        drained = sum(n for _, n in self._drained.pop(queue, ()))
        held_s = round((now_ms() - hold.since) / 1000, 1) if hold else None
        log.info("queue released from the holding lane", topic=self.topic, queue=queue, held_s=held_s)
        self.relay.signals.released.signal((queue, drained))
        self._dirty = True
        self._commit_at = 0.0  # commit now: a new term must not hold the queue again
        return True

    async def _commit(self, *, final: bool = False) -> None:
        """Commit each lane partition whose state changed (offset below which all is drained, and the
        metadata naming the held queues), at most every :data:`COMMIT_EVERY_S` — after the topic fence.
        ``final``: the term's last, of every partition it changed, confirmed by Kafka before the consumer
        closes (an asynchronous commit still in flight would be lost)."""
        if not final and (not self._dirty or time.monotonic() - self._commit_at < COMMIT_EVERY_S):
            return
        changed = []
        for p, part in sorted(self.state.parts.items()):
            now = part.metadata()
            if now != (self._read_back if final else self._last).get(p):
                changed.append((p, now))
        self._dirty = False
        self._commit_at = time.monotonic()
        if not changed:
            return
        await self._fence()
        if not final and not self._trusted():
            raise TermEnded
        reader = self._reader
        assert reader is not None
        offsets = [TopicPartition(self.name, p, c, metadata=meta) for p, (c, meta) in changed]
        if final:
            await asyncio.to_thread(reader.commit, offsets=offsets, asynchronous=False)
        else:
            reader.commit(offsets=offsets, asynchronous=True)
        for p, now in changed:
            self._last[p] = now
            self.state.part(p).committed = now[0]
        await self._trim()

    async def _trim(self) -> None:
        """Delete drained records (below the committed offset) from the lane now and then."""
        due = []
        for p, part in self.state.parts.items():
            done, when = self._trimmed.get(p, (0, 0.0))
            if part.committed > done and (
                part.committed - done >= TRIM_AT or time.monotonic() - when >= TRIM_EVERY_S
            ):
                due.append(TopicPartition(self.name, p, part.committed))
        if not due:
            return
        try:
            await asyncio.to_thread(self._delete, due)
        except Exception as exc:  # space only: the next trim tries again
            log.warning("drained lane records not deleted yet", lane=self.name, error=repr(exc))
            return
        for tp in due:
            self._trimmed[tp.partition] = (tp.offset, time.monotonic())

    def _delete(self, upto: list[TopicPartition]) -> None:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({**self.relay.kafka.client_config(), **kafka_logging()})
        for future in self._admin.delete_records(upto, request_timeout=10).values():
            future.result(timeout=15)

    # ---- what the lane holds, for people -------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        queues: dict[str, Any] = {}
        for queue, hold in self.state.held.items():
            recent = self._drained.get(queue, deque())
            while recent and now - recent[0][0] > RATE_WINDOW_S:
                recent.popleft()
            oldest = self.state.oldest(queue)
            queues[queue] = {
                "reason": self._shown_reason(queue),
                "since": hold.since,
                "records": self.state.records(queue),
                "oldest": oldest,
                "drained_per_s": round(sum(n for _, n in recent) / RATE_WINDOW_S, 1),
                "partition": self.state.partition_for(queue),
            }
        return {"at": now_ms(), "holder": self.relay.settings.holder, "lane": self.name, "queues": queues}

    async def _snapshots(self) -> None:
        while True:
            snap = self.snapshot()
            self._gauge(snap)
            try:
                await self.relay.redis.hset(RELAY_HELD_KEY, self.topic, orjson.dumps(snap))
            except Exception as exc:
                log.warning("held queues' snapshot not written", topic=self.topic, error=repr(exc))
            await asyncio.sleep(SNAPSHOT_EVERY_S)

    def _gauge(self, snap: dict[str, Any]) -> None:
        shown: set[tuple[str, str]] = set()
        at = snap["at"]
        for queue, q in snap["queues"].items():
            for reason in ("paused", "rate", "memory", "draining"):
                metrics.child(metrics.RELAY_QUEUE_HELD, self.topic, queue, reason).set(
                    int(q["reason"] == reason)
                )
            metrics.child(metrics.RELAY_LANE_RECORDS, self.topic, queue).set(q["records"])
            oldest = q["oldest"]
            metrics.child(metrics.RELAY_LANE_OLDEST, self.topic, queue).set(
                max(0.0, (at - oldest) / 1000) if oldest else 0.0
            )
            shown.add((self.topic, queue))
        for topic, queue in self._gauges - shown:
            _remove_gauges(topic, queue)
        self._gauges = shown


def _split(batch: Batch, direct: dict[str, int]) -> None:
    """Keep the first ``direct[queue]`` records of each queue in the batch; the rest go to ``batch.aside``."""
    left = dict(direct)
    kept: list[tuple[Any, Message]] = []
    for env, msg in zip(batch.envelopes, batch.records, strict=True):
        if left.get(env.queue, 0) > 0:
            left[env.queue] -= 1
            kept.append((env, msg))
        else:
            batch.aside.append((msg, env.queue))
    batch.envelopes, batch.records = [e for e, _ in kept], [m for _, m in kept]
    batch.source = {}
    for env, msg in kept:
        batch.source.setdefault(env.id, msg)


def _remove_gauges(topic: str, queue: str) -> None:
    for gauge, labels in (
        *((metrics.RELAY_QUEUE_HELD, (topic, queue, r)) for r in ("paused", "rate", "memory", "draining")),
        (metrics.RELAY_LANE_RECORDS, (topic, queue)),
        (metrics.RELAY_LANE_OLDEST, (topic, queue)),
    ):
        metrics.forget(gauge, *labels)


async def _poll(consumer: Consumer, n: int, idle: float) -> tuple[list[Message], float]:
    """Up to ``n`` records there now, and the next idle pause; none after an idle pause of ``idle`` s,
    each empty answer waiting longer (up to :data:`POLL_MAX_S`)."""
    msgs = consumer.consume(n, 0)
    if msgs:
        return msgs, POLL_MIN_S
    await asyncio.sleep(idle)
    return [], min(idle * 1.5, POLL_MAX_S)


def _check(msg: Message, lane: str) -> None:
    err = msg.error()
    if err is not None and err.code() != KafkaError._PARTITION_EOF:
        raise BackendUnavailable(f"consume error on {lane}: {err.str()}")


def _aside_at(msg: Message) -> int:
    raw = header(msg, ASIDE_AT_HEADER)
    try:
        return int(raw) if raw else now_ms()
    except ValueError:
        return now_ms()
