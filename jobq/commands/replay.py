"""``jobq replay``: re-drive a range of a topic's records into Redis.

* **Range**, per partition: ``--from`` (inclusive) to ``--to`` (exclusive), each an offset, an ISO-8601
  time (naive = UTC) or a relative time (``-15m``, ``-2h``, ``-30s``, ``-1d``). Times resolve per
  partition to the first record at or after them (Kafka ``offsets_for_times``). Without ``--to``: up to
  the end offsets seen when the replay starts, so a replay always ends.
* **Reading** uses a consumer of its own (a throw-away group, nothing committed): the relay's offsets are
  never touched. Malformed records are counted, not written.
* **Writing** goes through the engine like the relay's, without a fence (a tool write: it cannot be
  confused with a relay term, and it never raises a queue's fence). The record bytes are stored as Kafka
  holds them. **Dedup decides**: an id Redis still knows (pending, running, or finished within the
  queue's retention) is a duplicate and does not run again. With ``--force`` finished ids are forgotten
  first (``forget.lua``) and run again; a job that is pending or running is never doubled, force or not.
* Works for ``<topic>.retry`` (jobs parked after their queue failed a write; replay them once the queue
  is repaired) and ``<topic>.dead``, whose values are the original envelopes.
* Replays do not enter the relay's stage counters (``jobq reconcile`` balances what relays read); the
  queues' own counters do count what a replay enqueues.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated

import orjson
import typer
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from redis.exceptions import ResponseError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jqcore.envelope import Envelope, decode
from jqcore.errors import EnvelopeError
from jqcore.kafka import CONSUME_WAIT_S
from jqcore.redisconn import connect
from jqcore.settings import KafkaSettings, RedisSettings, load
from jqcore.state import Engine, Forgotten

__all__ = [
    "PartitionRange",
    "Point",
    "enqueue_counted",
    "iter_records",
    "origin_of",
    "parse_point",
    "plan",
    "replay",
    "tool_consumer",
]

BATCH = 500
STALL_S = 30.0
"""A replay that reads nothing new for this long while records are still due fails (Kafka away)."""
_RELATIVE = re.compile(r"^-(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@dataclass(frozen=True)
class Point:
    """A position in a topic: an offset, or a time in ms since the epoch."""

    offset: int | None = None
    time_ms: int | None = None


def parse_point(text: str, option: str) -> Point:
    """``123`` → offset; ``-15m`` → now minus 15 minutes; ``2026-11-23T10:00`` → that time (UTC if naive)."""
    text = text.strip()
    if text.isdigit():
        return Point(offset=int(text))
    if m := _RELATIVE.match(text):
        delta = timedelta(**{_UNITS[m[2]]: int(m[1])})
        return Point(time_ms=int((datetime.now(UTC) - delta).timestamp() * 1000))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"expected an offset, an ISO-8601 time or a relative time like -15m; got {text!r}",
            param_hint=option,
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


def tool_consumer(kafka: KafkaSettings) -> Consumer:
    """A consumer of a throw-away group that commits nothing (the relay's offsets are never touched)."""
    return Consumer(
        {
            **kafka.client_config(),
            "group.id": f"jobq-replay-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )


def _partitions(consumer: Consumer, topic: str, only: int | None) -> list[int]:
    md = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise typer.BadParameter(f"topic {topic!r} does not exist", param_hint="--topic")
    parts = sorted(md.partitions)
    if only is None:
        return parts
    if only not in parts:
        raise typer.BadParameter(
            f"topic {topic!r} has partitions 0..{len(parts) - 1}; {only} does not exist",
            param_hint="--partition",
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
            raise typer.BadParameter(f"no record arrived from {topic!r} for {STALL_S:g}s; is Kafka up?")


def origin_of(msg: Message) -> str:
    """A record's coordinates, ``topic/partition/offset``: the job's origin (dedup tells a re-read by it)."""
    return f"{msg.topic()}/{msg.partition()}/{msg.offset()}"


async def enqueue_counted(
    engine: Engine, chunk: Sequence[tuple[PartitionRange, Envelope]], origins: Mapping[str, str]
) -> None:
    """One engine call for ``chunk`` (unfenced: a tool write); each outcome counted on its record's range."""
    result = await engine.enqueue_batch([env for _, env in chunk], origins=origins)
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


async def _write(records: list[tuple[PartitionRange, Message]], redis: RedisSettings, force: bool) -> None:
    client = connect(redis)
    engine = Engine(client)
    try:
        for i in range(0, len(records), BATCH):
            chunk: list[tuple[PartitionRange, Envelope]] = []
            origins: dict[str, str] = {}  # the same record the relay read: dedup absorbs it unless --force
            for r, msg in records[i : i + BATCH]:
                try:
                    chunk.append((r, decode(msg.value() or b"")))
                except EnvelopeError:
                    r.malformed += 1
                    continue
                origins[chunk[-1][1].id] = origin_of(msg)
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
        outcomes = await engine.forget(queue, [env.id for _, env in items])
        for (r, _), outcome in zip(items, outcomes, strict=True):
            if outcome is Forgotten.FORGOTTEN:
                r.forced += 1
            elif outcome is Forgotten.ACTIVE:
                r.active += 1


def _dry_run(records: list[tuple[PartitionRange, Message]]) -> None:
    for r, msg in records:
        try:
            decode(msg.value() or b"")
        except EnvelopeError:
            r.malformed += 1


def replay(
    topic: Annotated[str, typer.Option(help="The topic to re-drive (also <topic>.retry or <topic>.dead).")],
    from_: Annotated[
        str,
        typer.Option("--from", help="Start (incl.): an offset, an ISO-8601 time, or relative (--from=-15m)."),
    ],
    to: Annotated[
        str | None, typer.Option(help="End (exclusive), same forms; default: the end offsets at start.")
    ] = None,
    partition: Annotated[int | None, typer.Option(help="Only this partition.")] = None,
    force: Annotated[
        bool, typer.Option(help="Run already-finished ids again (never doubles live ones).")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Read and count; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Re-drive a range of a topic's jobs into Redis; dedup decides whether finished ids run again."""
    start = parse_point(from_, "--from")
    end = parse_point(to, "--to") if to is not None else None
    if end is not None and (
        (start.offset is not None and end.offset is not None and end.offset < start.offset)
        or (start.time_ms is not None and end.time_ms is not None and end.time_ms < start.time_ms)
    ):
        raise typer.BadParameter(f"--to ({to}) is before --from ({from_})", param_hint="--to")
    consumer = tool_consumer(load(KafkaSettings))
    try:
        ranges = plan(consumer, topic, start, end, partition)
        records = list(iter_records(consumer, topic, ranges))
    finally:
        consumer.close()
    for r, _ in records:
        r.read += 1
    if dry_run:
        _dry_run(records)
    else:
        try:
            asyncio.run(_write(records, load(RedisSettings), force))
        except ResponseError as exc:  # e.g. a damaged queue key: every script on that queue fails
            written = sum(r.written for r in ranges)
            Console(stderr=True).print(
                f"[red]error[/] (replay_refused): Redis refused a write: {escape(str(exc))}. {written} "
                "job(s) were written before it and stay written; repair the queue and run the same replay "
                "again (dedup makes a rerun safe)."
            )
            raise typer.Exit(2) from exc
    _report(topic, ranges, dry_run=dry_run, as_json=as_json)


def _report(topic: str, ranges: list[PartitionRange], *, dry_run: bool, as_json: bool) -> None:
    if as_json:
        doc = {"topic": topic, "dry_run": dry_run, "partitions": [asdict(r) for r in ranges]}
        typer.echo(orjson.dumps(doc))
        return
    cols = ["partition", "from", "to (excl.)", "read", "malformed"]
    if not dry_run:
        cols += ["written", "duplicate", "forced", "live (not forced)", "unscheduled", "refused"]
    table = Table(*cols, title=f"jobq replay {topic}" + (" (dry run: nothing written)" if dry_run else ""))
    for r in ranges:
        row = [r.partition, r.start, r.end, r.read, r.malformed]
        if not dry_run:
            row += [r.written, r.duplicate, r.forced, r.active, r.unscheduled, r.refused]
        table.add_row(*(str(v) for v in row))
    Console().print(table)
