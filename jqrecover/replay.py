"""Replay: re-drive a range of a topic's records into Redis (``jobq replay``), and a finished job replayed
as a new one (the gateway's ``POST .../replay``, the dashboard's replay button).

* **Range**, per partition: a start (inclusive) to an end (exclusive), each an offset, an ISO-8601 time
  (naive = UTC) or a relative time (``-15m``, ``-2h``, ``-30s``, ``-1d``). Times resolve per partition to
  the first record at or after them (Kafka ``offsets_for_times``). Without an end: up to the end offsets
  seen when the replay starts, so a replay always ends.
* **Reading** uses a consumer of its own (a throw-away group, nothing committed): the relay's offsets are
  never touched. Malformed records are counted, not written.
* **Writing** goes through the engine like the relay's, without a fence (a tool write: it cannot be
  confused with a relay term, and it never raises a queue's fence). The record bytes are stored as Kafka
  holds them. **Dedup decides**: an id Redis still knows (pending, running, or finished within the
  queue's retention) is a duplicate and does not run again. With ``force`` finished ids are forgotten
  first (``forget.lua``) and run again; a job that is pending or running is never doubled, force or not.
* Works for ``<topic>.retry`` (jobs parked after their queue failed a write; replay them once the queue
  is repaired) and ``<topic>.dead``, whose values are the original envelopes.
* Replays do not enter the relay's stage counters (``jobq reconcile`` balances what relays read); the
  queues' own counters do count what a replay enqueues.

Problems are :class:`~jqrecover.errors.ReplayError` (with the command-line option they concern).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from jqcore.admission import Admission, reserved_problem
from jqcore.durations import parse_ms
from jqcore.envelope import Envelope, decode, new_envelope
from jqcore.errors import EnvelopeError
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.servers import RedisSettings
from jqengine import Engine, Forgotten, JobInfo, connect
from jqrecover.errors import ReplayError
from jqruntime.kafka import CONSUME_WAIT_S
from jqruntime.stores.history import JobSnapshot

__all__ = [
    "REPLAYABLE",
    "PartitionRange",
    "Point",
    "ReplayError",
    "count_malformed",
    "enqueue_counted",
    "iter_records",
    "origin_of",
    "parse_point",
    "plan",
    "read_range",
    "replayed",
    "replayed_from_archive",
    "tool_consumer",
    "write_records",
]

BATCH = 500
STALL_S = 30.0
"""A replay that reads nothing new for this long while records are still due fails (Kafka away)."""
REPLAYABLE: Final = frozenset({"completed", "errored", "canceled", "expired"})
"""The states a job is replayed from as a new job (:func:`replayed`)."""


@dataclass(frozen=True)
class Point:
    """A position in a topic: an offset, or a time in ms since the epoch."""

    offset: int | None = None
    time_ms: int | None = None


def parse_point(text: str, option: str) -> Point:
    """``123`` → offset; ``-15m`` → now minus 15 minutes; ``2026-11-23T10:00`` → that time (UTC if naive).
    ``option``: the command-line option it came from (named by the error)."""
    text = text.strip()
    if text.isdigit():
        return Point(offset=int(text))
    if text.startswith("-"):
        try:
            back = parse_ms(text[1:])
        except ValueError as exc:
            raise ReplayError(str(exc), code="point_invalid", option=option) from None
        return Point(time_ms=int(datetime.now(UTC).timestamp() * 1000) - back)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ReplayError(
            f"expected an offset, an ISO-8601 time or a relative time like -15m; got {text!r}",
            code="point_invalid",
            option=option,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return Point(time_ms=int(when.timestamp() * 1000))


@dataclass
class PartitionRange:
    partition: int
    start: int
    end: int
    read: int = 0
    written: int = 0
    duplicate: int = 0
    forced: int = 0
    active: int = 0
    unscheduled: int = 0
    refused: int = 0
    malformed: int = 0


def tool_consumer(kafka: KafkaSettings, group: str | None = None) -> Consumer:
    """A consumer that commits nothing (the relay's offsets are never touched): of a throw-away group, or
    of ``group`` to read that group's committed offsets (it assigns partitions, never joins the group)."""
    return Consumer(
        {
            **kafka.client_config(),
            "group.id": group or f"jobq-replay-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )


def _partitions(consumer: Consumer, topic: str, only: int | None) -> list[int]:
    md = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise ReplayError(f"topic {topic!r} does not exist", code="topic_missing", option="--topic")
    parts = sorted(md.partitions)
    if only is None:
        return parts
    if only not in parts:
        raise ReplayError(
            f"topic {topic!r} has partitions 0..{len(parts) - 1}; {only} does not exist",
            code="partition_missing",
            option="--partition",
        )
    return [only]


def _resolve(consumer: Consumer, topic: str, p: int, point: Point | None, low: int, high: int) -> int:
    if point is None:
        return high
    if point.offset is not None:
        return min(max(point.offset, low), high)
    found = consumer.offsets_for_times([TopicPartition(topic, p, point.time_ms or 0)], timeout=10)[0]
    return high if found.offset < 0 else min(max(found.offset, low), high)


def plan(
    consumer: Consumer, topic: str, start: Point, end: Point | None, only: int | None
) -> list[PartitionRange]:
    """Each partition's ``[start, end)`` offsets."""
    out = []
    for p in _partitions(consumer, topic, only):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        first = _resolve(consumer, topic, p, start, low, high)
        last = _resolve(consumer, topic, p, end, low, high)
        out.append(PartitionRange(p, first, max(first, last)))
    return out


def iter_records(
    consumer: Consumer, topic: str, ranges: list[PartitionRange]
) -> Iterator[tuple[PartitionRange, Message]]:
    """Every record of the ranges, each partition in order (consumed in short waits; see CONSUME_WAIT_S)."""
    by_p = {r.partition: r for r in ranges if r.end > r.start}
    if not by_p:
        return
    consumer.assign([TopicPartition(topic, p, r.start) for p, r in by_p.items()])
    done: set[int] = set()
    last_progress = time.monotonic()
    while len(done) < len(by_p):
        msgs = consumer.consume(BATCH, CONSUME_WAIT_S)
        if msgs:
            last_progress = time.monotonic()
        for msg in msgs:
            if msg.error() is not None:
                raise KafkaException(msg.error())
            r = by_p[msg.partition() or 0]
            if (msg.offset() or 0) < r.end:
                yield r, msg
        for p, r in by_p.items():
            if p not in done and consumer.position([TopicPartition(topic, p)])[0].offset >= r.end:
                done.add(p)
        if time.monotonic() - last_progress > STALL_S:
            raise ReplayError(
                f"no record arrived from {topic!r} for {STALL_S:g}s; is Kafka up?", code="kafka_stalled"
            )


def read_range(
    kafka: KafkaSettings, topic: str, start: Point, end: Point | None, only: int | None
) -> tuple[list[PartitionRange], list[tuple[PartitionRange, Message]]]:
    """The ranges of ``topic`` (every partition, or ``only``) and their records, each counted ``read``
    (blocking)."""
    consumer = tool_consumer(kafka)
    try:
        ranges = plan(consumer, topic, start, end, only)
        records = list(iter_records(consumer, topic, ranges))
    finally:
        consumer.close()
    for r, _ in records:
        r.read += 1
    return ranges, records


def origin_of(msg: Message) -> str:
    """A record's coordinates, ``topic/partition/offset``: the job's origin (dedup tells a re-read by it)."""
    return f"{msg.topic()}/{msg.partition()}/{msg.offset()}"


async def enqueue_counted(
    engine: Engine, chunk: Sequence[tuple[PartitionRange, Envelope]], origins: Mapping[str, str]
) -> None:
    """One engine call for ``chunk`` (unfenced: a tool write; admitted records: graphs among them are
    created); each outcome counted on its record's range."""
    result = await engine.enqueue_batch([env for _, env in chunk], origins=origins, graphs=True)
    where = {env.id: r for r, env in chunk}
    for o in result.outcomes:
        r = where[o.id]
        if o.outcome in ("stored", "delayed"):
            r.written += 1
        elif o.outcome == "duplicate":
            r.duplicate += 1
        elif o.outcome in ("canceled", "expired"):
            r.unscheduled += 1
        else:
            r.refused += 1


async def write_records(
    records: list[tuple[PartitionRange, Message]], redis: RedisSettings, force: bool, admission: Admission
) -> None:
    """Write the records through the engine in chunks of :data:`BATCH` (``force``: forget finished ids
    first); a record ``admission`` refuses (``jqcore.admission``: as the relay would) is counted refused.
    Redis errors propagate (``redis.exceptions.ResponseError`` for a refused write); what was written stays
    written and a rerun is safe (dedup)."""
    client = connect(redis)
    engine = Engine(client)
    try:
        for i in range(0, len(records), BATCH):
            chunk: list[tuple[PartitionRange, Envelope]] = []
            origins: dict[str, str] = {}  # the same record the relay read: dedup absorbs it unless forced
            for r, msg in records[i : i + BATCH]:
                try:
                    env = decode(msg.value() or b"")
                except EnvelopeError:
                    r.malformed += 1
                    continue
                if admission.problem(env, msg.value() or b"", msg.headers()) is not None:
                    r.refused += 1
                    continue
                chunk.append((r, env))
                origins.setdefault(env.id, origin_of(msg))  # the first: the record stored
            if force:
                await _forget(engine, chunk)
            await enqueue_counted(engine, chunk, origins)
    finally:
        await client.aclose()


async def _forget(engine: Engine, chunk: list[tuple[PartitionRange, Envelope]]) -> None:
    by_queue: dict[str, list[tuple[PartitionRange, Envelope]]] = {}
    for r, env in chunk:
        by_queue.setdefault(env.queue, []).append((r, env))
    for queue, items in by_queue.items():
        outcomes = await engine.admin.forget(queue, [env.id for _, env in items])
        for (r, _), outcome in zip(items, outcomes, strict=True):
            if outcome is Forgotten.FORGOTTEN:
                r.forced += 1
            elif outcome is Forgotten.ACTIVE:
                r.active += 1


def count_malformed(records: list[tuple[PartitionRange, Message]]) -> None:
    """A dry run: decode every record, count the malformed ones; write nothing."""
    for r, msg in records:
        try:
            decode(msg.value() or b"")
        except EnvelopeError:
            r.malformed += 1


def _not_finished(job_id: str, state: str) -> ReplayError:
    return ReplayError(
        f"job {job_id!r} is {state}; only finished jobs replay", code="job_not_finished", http_status=409
    )


def _not_reserved(kind: str, queue: str) -> None:
    """:class:`ReplayError` (``kind_reserved``, HTTP 409) for a job of one of jobq's own kinds."""
    problem = reserved_problem(kind, queue)
    if problem is not None:
        raise ReplayError(f"kind {kind!r}: {problem}", code="kind_reserved", http_status=409)


def replayed(queue: str, info: JobInfo, new_id: str | None = None) -> Envelope:
    """A new job (``new_id``, else a fresh id) with the same kind, args, meta, exclusivity, attempts,
    priority, lease and expiry as the finished job ``info`` of ``queue`` (an ``expires_at`` already past:
    the engine archives the new job as ``expired`` at once, and it never runs). Raises
    :class:`ReplayError` (``job_not_finished``, HTTP 409) when the job is not in :data:`REPLAYABLE` or its
    envelope is gone."""
    if info.state not in REPLAYABLE or info.envelope is None:
        raise _not_finished(info.id, info.state)
    old = decode(info.envelope)
    _not_reserved(old.kind, queue)
    return new_envelope(
        queue,
        old.kind,
        old.args,
        id=new_id,
        meta=old.meta or None,
        excl=old.excl,
        max_attempts=old.max_attempts,
        priority=old.priority,
        lease_ms=old.lease_ms,
        expires_at=old.expires_at,
    )


def replayed_from_archive(queue: str, job: JobSnapshot, new_id: str | None = None) -> Envelope:
    """:func:`replayed` of a job Redis forgot, from the payload the history kept with its end
    (``jqruntime.stores.archive``). Raises :class:`ReplayError`, HTTP 409: ``job_not_finished``,
    ``payload_missing`` (the history has no payload of it: shipped before payloads were kept, with
    ``JOBQ_EVENTS_PAYLOAD_MAX_BYTES=0``, or after its record was gone) or ``payload_truncated`` (its args or
    meta were longer than the cap: a replay would run it with other arguments)."""
    if job.to_state not in REPLAYABLE:
        raise _not_finished(job.id, job.to_state)
    kept = job.payload()
    if not kept.kept:
        raise ReplayError(
            f"the history kept no payload of job {job.id!r}: it cannot be replayed",
            code="payload_missing",
            http_status=409,
        )
    if cut := sorted(kept.truncated & {"args", "meta"}):
        raise ReplayError(
            f"the history kept only the start of job {job.id!r}'s {' and '.join(cut)} "
            "(longer than JOBQ_EVENTS_PAYLOAD_MAX_BYTES): it cannot be replayed",
            code="payload_truncated",
            http_status=409,
        )
    env = kept.envelope
    _not_reserved(job.kind, queue)
    return new_envelope(
        queue,
        job.kind,
        kept.args,
        id=new_id,
        meta=kept.meta or None,
        excl=env.get("excl"),
        max_attempts=env.get("max_attempts"),
        priority=env.get("priority"),
        lease_ms=env.get("lease_ms"),
        expires_at=env.get("expires_at"),
    )
