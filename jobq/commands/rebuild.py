"""``jobq rebuild``: the pending state rebuilt from Kafka after Redis lost everything.

``jobq replay`` alone re-runs every job that had already finished in the replayed range (its dedup record
died with Redis). The rebuild asks the lifecycle events first (``jqcore.events``, shipped to the events
topic by the schedulers) what became of each job:

1. **Job records**: every record of the job topics (default: every routed topic, like the relay) from
   ``--from`` (a time) to the end offsets seen at start, read with a throw-away consumer
   (:mod:`jobq.commands.replay`'s reading).
2. **Events**: the events topic from ``--from`` minus a margin (clock skew between producers and
   schedulers) to its end. Per ``(queue, id)`` the latest event is kept: Kafka order, where an event
   counts when its version is higher than the latest one's or its time is later than every event seen
   of that job (a re-shipped duplicate is neither; a job written again after an earlier Redis loss
   starts at version 1 again, later). Only the jobs of the records read (and cron fires) are kept.
3. **Decision per record**: it is skipped when the job's latest event is final (``completed``,
   ``errored`` — dead —, ``canceled``, ``expired``, ``deleted``; a graph's ``completed``, ``failed``,
   ``canceled``) **and** that record belongs to the finished run: its own enqueue event says so (the
   event's ``origin`` is the record), or it was produced before the finish (a duplicate that run
   absorbed). A record produced after the finish is a new run of the id (the default dedup policy
   ``active``) and comes back; so does a job whose latest event is not final (a job re-enqueued after it
   finished, a running one: at least once).
4. **Writing** goes through the engine like a replay (unfenced, the record bytes as stored, each record's
   coordinates as its origin): dedup keeps one job per id. Delayed jobs keep their ``run_at``; jobs due
   beyond the far-future horizon go to the tier as the relay sends them, the schedule topic read first
   (its tombstone: an unscheduled job, skipped; its record: only the index entry comes back).
5. **Graphs**: a graph whose graph-level event is final is skipped; one still running is created again
   from its record and runs whole again (its finished nodes' results died with Redis).
6. **Cron fires** never pass through Kafka: a fire whose latest event is not final (pending at the loss)
   is fired again from its schedule in Consul, under the same id (``cron:<name>:<slot>``).

**The window**: a finish whose event had not reached Kafka when Redis was lost is unknown here, and that
job runs again (see :func:`window`); events and records older than their topics' retention are gone.
"""

from __future__ import annotations

import asyncio
import bisect
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Final

import orjson
import typer
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaException, Message, TopicPartition
from redis.exceptions import ResponseError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jobq.commands.replay import (
    PartitionRange,
    Point,
    enqueue_counted,
    iter_records,
    origin_of,
    parse_point,
    plan,
    tool_consumer,
)
from jqcore.clock import now_ms
from jqcore.consulconn import consul_client
from jqcore.cron import CronSchedule
from jqcore.cronstore import CronStore, fire_now
from jqcore.envelope import Envelope, decode
from jqcore.errors import BackendUnavailable, EnvelopeError, JobqError
from jqcore.events import TERMINAL, Event, parse
from jqcore.graphs import GRAPH_KIND
from jqcore.kafka import AsyncProducer, Record, ensure_topics, parse_schedule_key, schedule_key
from jqcore.redisconn import connect
from jqcore.routing import RoutingSettings
from jqcore.settings import (
    ConsulSettings,
    CronSettings,
    EventSettings,
    FarSettings,
    KafkaSettings,
    RedisSettings,
    RelayKeys,
    load,
)
from jqcore.state import Engine
from jqsched.service import EVENTS_IDLE_S
from jqsched.settings import SchedulerSettings

__all__ = [
    "FINISHED",
    "EventIndex",
    "Latest",
    "RebuildError",
    "RebuildReport",
    "TopicReport",
    "final_state",
    "rebuild",
    "rebuild_from_kafka",
    "window",
]

BATCH = 500
DEFAULT_MARGIN_S = 300
"""Events are read from this long before ``--from``: clock skew between producers and schedulers."""
FINISHED: Final = TERMINAL | {"failed"}
"""Final states: a job's (:data:`jqcore.events.TERMINAL`) and a task graph's ``failed`` (its graph-level
event; a graph also ends ``completed`` or ``canceled``)."""
SHIP_LINGER_MS: Final = 5
"""The event shipper's producer ``linger.ms`` (``jqsched.events``)."""
_CRON_ID = re.compile(r"^cron:([A-Za-z0-9][A-Za-z0-9._-]{0,63}):(\d+)(:manual)?$")
_DELAY_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000)

Key = tuple[str, str]
"""``(queue, id)``."""


class RebuildError(JobqError):
    """The rebuild cannot start (a topic missing, a bad argument); nothing was written."""

    code = "rebuild_invalid"


# ---- what the events say -----------------------------------------------------------------------------
@dataclass(slots=True)
class Latest:
    """A job's latest event as far as the events topic knows."""

    state: str
    v: int
    at: int
    newest_at: int
    """The latest ``at`` of every event seen of the job (a re-shipped old event is never later)."""
    origins: set[str] = field(default_factory=set)
    """The records (``topic/partition/offset``) whose enqueue events were seen."""


class EventIndex:
    """The latest event per ``(queue, id)`` of the jobs ``wanted`` keeps, fed in Kafka order."""

    def __init__(self, wanted: Callable[[Key], bool]) -> None:
        self.wanted = wanted
        self.jobs: dict[Key, Latest] = {}
        self.read = 0
        self.malformed = 0
        self.newest_ms = 0
        """The newest event's Kafka timestamp (when its scheduler produced it)."""
        self.delays = [0] * (len(_DELAY_BOUNDS_MS) + 1)
        self.max_delay_ms = 0
        self.retention_cut_ms: int | None = None
        """Set when retention deleted events the read wanted: the events begin then."""

    def add_record(self, msg: Message) -> None:
        self.read += 1
        try:
            event = parse(msg.value() or b"")
        except (ValueError, KeyError, TypeError):
            self.malformed += 1
            return
        produced = _timestamp(msg)
        if produced:
            self.newest_ms = max(self.newest_ms, produced)
            delay = max(0, produced - event.at)
            self.delays[bisect.bisect_left(_DELAY_BOUNDS_MS, delay)] += 1
            self.max_delay_ms = max(self.max_delay_ms, delay)
        self.add(event)

    def add(self, event: Event) -> None:
        key = (event.queue, event.id)
        if not self.wanted(key):
            return
        cur = self.jobs.get(key)
        if cur is None:
            cur = self.jobs[key] = Latest(event.to, event.v, event.at, event.at)
        elif event.v > cur.v or event.at > cur.newest_at:
            cur.state, cur.v, cur.at = event.to, event.v, event.at
        cur.newest_at = max(cur.newest_at, event.at)
        if event.origin:
            cur.origins.add(event.origin)

    def delay_percentile_ms(self, share: float) -> int | None:
        """The upper bound of the bucket holding that share of the shipping delays (None: no event)."""
        total = sum(self.delays)
        if not total:
            return None
        seen = 0
        for i, n in enumerate(self.delays):
            seen += n
            if seen >= share * total:
                return _DELAY_BOUNDS_MS[i] if i < len(_DELAY_BOUNDS_MS) else self.max_delay_ms
        return self.max_delay_ms


def final_state(latest: Latest | None, origin: str, produced_ms: int) -> str | None:
    """The final state that keeps the record at ``origin`` (produced at ``produced_ms``) from running
    again, or None when it must come back."""
    if latest is None or latest.state not in FINISHED:
        return None
    if origin in latest.origins or produced_ms <= latest.at:
        return latest.state
    return None  # produced after the finish: a new run of the id


def _timestamp(msg: Message) -> int:
    kind, ts = msg.timestamp()
    return int(ts) if kind != TIMESTAMP_NOT_AVAILABLE and ts > 0 else 0


# ---- the report ----------------------------------------------------------------------------------------
@dataclass
class TopicReport:
    topic: str
    partitions: list[PartitionRange]
    kept: int = 0
    """Records handed to the engine (not skipped, not malformed; in a dry run: that would be)."""
    far: int = 0
    """Of those, jobs due beyond the horizon sent to the schedule topic."""
    graphs: int = 0
    """Of those, task graphs (a graph not known finished is created again and runs whole)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Records not written because their job had finished, by its final state."""
    retention_cut_ms: int | None = None
    """Set when retention deleted records the read wanted: the topic's records begin then."""

    def totals(self) -> dict[str, Any]:
        sums = {
            name: sum(getattr(r, name) for r in self.partitions)
            for name in ("read", "written", "duplicate", "unscheduled", "refused", "malformed")
        }
        return {
            "topic": self.topic,
            "read": sums["read"],
            "rebuilt": sums["written"] + self.far,
            "far": self.far,
            "kept": self.kept,
            "graphs": self.graphs,
            "skipped": sum(self.skipped.values()),
            "skipped_by_state": dict(sorted(self.skipped.items())),
            "duplicate": sums["duplicate"],
            "unscheduled": sums["unscheduled"],
            "refused": sums["refused"],
            "malformed": sums["malformed"],
            "retention_cut_ms": self.retention_cut_ms,
            "partitions": [asdict(r) for r in self.partitions],
        }


@dataclass
class CronReport:
    refired: list[str] = field(default_factory=list)
    """Fires pending at the loss, enqueued again (dry run: that would be)."""
    missing: list[str] = field(default_factory=list)
    """Fires pending at the loss whose schedule is gone from Consul (not rebuilt)."""
    finished: int = 0
    """Fires seen finished (not rebuilt)."""


@dataclass
class RebuildReport:
    since_ms: int
    dry_run: bool
    events_topic: str
    events_from_ms: int
    events: EventIndex
    topics: list[TopicReport]
    cron: CronReport
    window: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "from_ms": self.since_ms,
            "dry_run": self.dry_run,
            "topics": [t.totals() for t in self.topics],
            "events": {
                "topic": self.events_topic,
                "from_ms": self.events_from_ms,
                "read": self.events.read,
                "malformed": self.events.malformed,
                "jobs": len(self.events.jobs),
                "newest_ms": self.events.newest_ms or None,
                "retention_cut_ms": self.events.retention_cut_ms,
            },
            "cron": asdict(self.cron),
            "window": self.window,
        }


def window(events: EventIndex | None = None, scheduler: SchedulerSettings | None = None) -> dict[str, Any]:
    """When the rebuild's guarantee holds: a job whose final event reached Kafka before the loss is never
    run again; one whose final event was still in Redis runs again. Events wait in their queue's stream
    until a scheduler ships them (``jqsched.events``): on a queue an instance already watches, at once
    (the shipper blocks on the streams; its producer lingers 5 ms, then Kafka acknowledges); a new
    queue's first events wait for the next heartbeat (``JOBQ_SCHEDULER_BEAT_S``) plus the shipper's idle
    wait on the queues it watched before (``EVENTS_IDLE_S``); after the instance owning a queue died, its
    heartbeat must go stale first (``JOBQ_SCHEDULER_STALE_S``); a graph's own events wait for the graph
    round (``JOBQ_SCHEDULER_GRAPH_EVERY_S``); while Kafka is away, everything since the outage began.
    ``events``: the delays measured on the events read (Kafka timestamp − event time: when the shipper
    produced it; clock skew between hosts is in it)."""
    s = scheduler or load(SchedulerSettings)
    out: dict[str, Any] = {
        "holds_for": "jobs whose final event reached Kafka before the loss, within both topics' retention",
        "shipping_s": {
            "watched_queue": SHIP_LINGER_MS / 1000,
            "new_queue": s.beat_s + EVENTS_IDLE_S,
            "after_scheduler_death": s.stale_s + s.beat_s + EVENTS_IDLE_S,
            "graph_events": s.graph_every_s,
        },
    }
    if events is not None:
        n = sum(events.delays)
        out["measured_delay_ms"] = {
            "events": n,
            "p50_at_most": events.delay_percentile_ms(0.5),
            "p99_at_most": events.delay_percentile_ms(0.99),
            "max": events.max_delay_ms if n else None,
        }
        out["newest_event_ms"] = events.newest_ms or None
    return out


# ---- the rebuild ----------------------------------------------------------------------------------------
Kept = tuple[PartitionRange, Message, Envelope]


def _kafka_error(exc: Exception) -> JobqError:
    """Kafka trouble while reading (nothing written yet) as one readable error."""
    if isinstance(exc, typer.BadParameter):  # the replay's reader: no progress for STALL_S
        return BackendUnavailable(exc.format_message(), code="kafka_stalled")
    return BackendUnavailable(f"Kafka: {exc}", code="kafka_unavailable")


def _existing(consumer: Consumer, topics: Iterable[str]) -> set[str]:
    md = consumer.list_topics(timeout=10)
    return {t for t in topics if (m := md.topics.get(t)) is not None and m.error is None and m.partitions}


Read = tuple[PartitionRange, Message, Envelope | None]
"""A job record (None: malformed)."""


class _Cut:
    """Where retention cut a read short: partitions whose range starts at a low watermark above 0 (older
    records were deleted); the newest of their first records' times is where the data begins."""

    def __init__(self, consumer: Consumer, topic: str, ranges: Sequence[PartitionRange]) -> None:
        self.open: set[int] = set()
        for r in ranges:
            low, _ = consumer.get_watermark_offsets(TopicPartition(topic, r.partition), timeout=10)
            if 0 < low == r.start < r.end:
                self.open.add(r.partition)
        self.since_ms: int | None = None

    def see(self, msg: Message) -> None:
        if self.open and (msg.partition() or 0) in self.open:
            self.open.discard(msg.partition() or 0)
            self.since_ms = max(self.since_ms or 0, _timestamp(msg)) or None


def _read_jobs(
    kafka: KafkaSettings, topics: Sequence[str], events_topic: str, since_ms: int
) -> list[tuple[TopicReport, list[Read]]]:
    consumer = tool_consumer(kafka)
    try:
        found = _existing(consumer, [*topics, events_topic])
        missing = [t for t in topics if t not in found]
        if missing:
            raise RebuildError(f"topic(s) {', '.join(map(repr, missing))} do not exist", code="topic_missing")
        if events_topic not in found:
            raise RebuildError(
                f"the events topic {events_topic!r} does not exist (JOBQ_EVENTS_TOPIC): without it the "
                "rebuild cannot tell which jobs finished",
                code="events_topic_missing",
            )
        out = []
        for topic in topics:
            ranges = plan(consumer, topic, Point(time_ms=since_ms), None, None)
            report, cut = TopicReport(topic, ranges), _Cut(consumer, topic, ranges)
            records: list[Read] = []
            for r, msg in iter_records(consumer, topic, ranges):
                cut.see(msg)
                try:
                    records.append((r, msg, decode(msg.value() or b"")))
                except EnvelopeError:
                    records.append((r, msg, None))
            report.retention_cut_ms = cut.since_ms
            out.append((report, records))
        return out
    except (typer.BadParameter, KafkaException) as exc:
        raise _kafka_error(exc) from exc
    finally:
        consumer.close()


def _read_events(kafka: KafkaSettings, topic: str, from_ms: int, index: EventIndex) -> None:
    consumer = tool_consumer(kafka)
    try:
        ranges = plan(consumer, topic, Point(time_ms=from_ms), None, None)
        cut = _Cut(consumer, topic, ranges)
        for _, msg in iter_records(consumer, topic, ranges):
            cut.see(msg)
            index.add_record(msg)
        index.retention_cut_ms = cut.since_ms
    except (typer.BadParameter, KafkaException) as exc:
        raise _kafka_error(exc) from exc
    finally:
        consumer.close()


def _decide(report: TopicReport, records: list[Read], index: EventIndex, far: _Far) -> list[Kept]:
    kept: list[Kept] = []
    for r, msg, env in records:
        r.read += 1
        if env is None:
            r.malformed += 1
            continue
        produced = _timestamp(msg) or env.enqueued_at
        final = final_state(index.jobs.get((env.queue, env.id)), origin_of(msg), produced)
        if final is None and far.unscheduled(env):
            final = "canceled"
        if final is not None:
            report.skipped[final] = report.skipped.get(final, 0) + 1
            continue
        report.kept += 1
        report.graphs += env.kind == GRAPH_KIND
        kept.append((r, msg, env))
    return kept


def _cron_fires(index: EventIndex, records: Collection[Key], report: CronReport) -> dict[str, list[Key]]:
    """Schedule name → the fires (``(queue, id)``) not known finished."""
    out: dict[str, list[Key]] = {}
    for key, latest in index.jobs.items():
        m = _CRON_ID.match(key[1])
        if m is None or key in records:
            continue  # not a fire, or one that came through Kafka (a client's id): its record decides
        if latest.state in FINISHED:
            report.finished += 1
        else:
            out.setdefault(m[1], []).append(key)
    return out


async def _schedules(
    names: Iterable[str], consul: ConsulSettings, cron: CronSettings
) -> dict[str, CronSchedule | None]:
    client = consul_client(consul)
    try:
        store = CronStore(client, cron.kv_prefix)
        return {name: await store.get(name) for name in names}
    finally:
        await client.http._session.close()


async def _refire(
    engine: Engine | None,
    fires: dict[str, list[Key]],
    schedules: dict[str, CronSchedule | None],
    report: CronReport,
) -> None:
    for name, keys in sorted(fires.items()):
        schedule = schedules.get(name)
        for queue, job_id in sorted(keys):
            if schedule is None:
                report.missing.append(job_id)
                continue
            m = _CRON_ID.match(job_id)
            assert m is not None
            report.refired.append(job_id)
            if engine is not None:
                same_queue = schedule.model_copy(update={"queue": queue})  # where the fire was enqueued
                await fire_now(engine, same_queue, [int(m[2])], manual=bool(m[3]))


class _Far:
    """The far-future tier. A job due beyond the horizon goes where the relay sends it (``jqrelay.topic``):
    its record, bytes unchanged, in the compacted schedule topic, and an index entry in Redis. That topic
    survived the loss, so it is read first (:meth:`read_tier`): a job whose record is still there only
    gets its index entry back; one whose latest record is a tombstone was unscheduled (a job moved into
    Redis was due within the horizon, so it is not due beyond it now) and is skipped, whatever the events
    say; one the topic never had (the relay had not read it) is written there first (Kafka confirms)."""

    def __init__(self, kafka: KafkaSettings, far: FarSettings, now: int) -> None:
        self.kafka, self.far = kafka, far
        self.cut = now + int(far.horizon_s * 1000)
        self.tier: dict[Key, bool] = {}
        """``(queue, id)`` → True: the topic holds its record; False: its tombstone."""
        self.producer: AsyncProducer | None = None

    def due_later(self, env: Envelope) -> bool:
        return self.far.enabled and env.run_at is not None and env.run_at > self.cut

    def read_tier(self, keys: Collection[Key]) -> None:
        """The schedule topic's latest record of each of ``keys`` (blocking)."""
        if not keys:
            return
        consumer = tool_consumer(self.kafka)
        try:
            if not _existing(consumer, [self.far.topic]):
                return
            ranges = plan(consumer, self.far.topic, Point(offset=0), None, None)
            for _, msg in iter_records(consumer, self.far.topic, ranges):
                key = parse_schedule_key(msg.key())
                if key is not None and key in keys:
                    self.tier[key] = msg.value() is not None
        except (typer.BadParameter, KafkaException) as exc:
            raise _kafka_error(exc) from exc
        finally:
            consumer.close()

    def unscheduled(self, env: Envelope) -> bool:
        return self.tier.get((env.queue, env.id)) is False

    async def split(self, engine: Engine, items: list[Kept], report: TopicReport) -> list[Kept]:
        """Put the jobs due beyond the horizon in the tier; the others are returned for the engine."""
        due_later = [x for x in items if self.due_later(x[2])]
        if not due_later:
            return items
        missing = [x for x in due_later if (x[2].queue, x[2].id) not in self.tier]
        if missing:
            if self.producer is None:
                far = self.far
                await asyncio.to_thread(
                    lambda: ensure_topics(self.kafka, [far.topic], partitions=far.partitions, compacted=True)
                )
                self.producer = AsyncProducer(self.kafka)
            topic = self.far.topic
            await self.producer.produce_many(
                [Record(topic, msg.value(), schedule_key(e.queue, e.id)) for _, msg, e in missing]
            )
            self.tier.update(((e.queue, e.id), True) for _, _, e in missing)
        by_queue: dict[str, list[Kept]] = {}
        for x in due_later:
            by_queue.setdefault(x[2].queue, []).append(x)
        for queue, xs in by_queue.items():
            outcomes = await engine.schedule_far(queue, [(e.id, e.run_at or 0) for _, _, e in xs])
            for (r, _, _), outcome in zip(xs, outcomes, strict=True):
                if outcome == "scheduled":
                    report.far += 1
                else:  # held: Redis has the job already
                    r.duplicate += 1
        far_ids = {id(x) for x in due_later}
        return [x for x in items if id(x) not in far_ids]

    async def close(self) -> None:
        if self.producer is not None:
            await asyncio.to_thread(self.producer.close, 5.0)


async def _write(engine: Engine, far: _Far, report: TopicReport, kept: list[Kept]) -> None:
    """In chunks of :data:`BATCH`, a chunk never holding one id twice (origins are per id)."""
    chunk: list[Kept] = []
    seen: set[Key] = set()

    async def flush() -> None:
        items = await far.split(engine, chunk, report)
        if items:
            origins = {e.id: origin_of(msg) for _, msg, e in items}
            await enqueue_counted(engine, [(r, e) for r, _, e in items], origins)
        chunk.clear()
        seen.clear()

    for item in kept:
        key = (item[2].queue, item[2].id)
        if key in seen or len(chunk) >= BATCH:
            await flush()
        chunk.append(item)
        seen.add(key)
    if chunk:
        await flush()


def default_topics() -> list[str]:
    """What the relays read: ``JOBQ_RELAY_TOPICS``, else every routed topic (``JOBQ_ROUTES``)."""
    return list(load(RelayKeys).topics or load(RoutingSettings).topics())


async def rebuild_from_kafka(
    since_ms: int,
    topics: Sequence[str] | None = None,
    *,
    dry_run: bool = False,
    cron: bool = True,
    margin_s: float = DEFAULT_MARGIN_S,
    kafka: KafkaSettings | None = None,
    redis: RedisSettings | None = None,
    events: EventSettings | None = None,
    far: FarSettings | None = None,
    consul: ConsulSettings | None = None,
    cron_settings: CronSettings | None = None,
    scheduler: SchedulerSettings | None = None,
) -> RebuildReport:
    """Rebuild the pending state from Kafka after a Redis loss (see the module's text): the job topics'
    records from ``since_ms`` (ms since the epoch) to their end offsets now, without the jobs the events
    topic knows finished. Settings not given are read from the environment. Raises :class:`RebuildError`
    before writing anything when a topic is missing; Redis errors while writing propagate (what was
    written stays written; running it again is safe: dedup)."""
    kafka = kafka or load(KafkaSettings)
    events_settings = events or load(EventSettings)
    topics = list(dict.fromkeys(topics or default_topics()))
    if not topics:
        raise RebuildError("no job topic: pass --topic or set JOBQ_RELAY_TOPICS / JOBQ_ROUTES")
    if margin_s < 0:
        raise RebuildError(f"the margin must not be negative; got {margin_s}")
    read = await asyncio.to_thread(_read_jobs, kafka, topics, events_settings.topic, since_ms)
    keys = {(env.queue, env.id) for _, records in read for _, _, env in records if env is not None}
    index = EventIndex(lambda key: key in keys or key[1].startswith("cron:"))
    events_from = since_ms - int(margin_s * 1000)
    await asyncio.to_thread(_read_events, kafka, events_settings.topic, events_from, index)
    far_tier = _Far(kafka, far or load(FarSettings), now_ms())
    later = {(e.queue, e.id) for _, records in read for _, _, e in records if e and far_tier.due_later(e)}
    await asyncio.to_thread(far_tier.read_tier, later)
    reports, decided = [], []
    for report, records in read:
        reports.append(report)
        decided.append(_decide(report, records, index, far_tier))
    del read
    cron_report = CronReport()
    fires = _cron_fires(index, keys, cron_report) if cron else {}
    schedules: dict[str, CronSchedule | None] = {}
    if fires:
        schedules = await _schedules(
            fires, consul or load(ConsulSettings), cron_settings or load(CronSettings)
        )
    if dry_run:
        await _refire(None, fires, schedules, cron_report)
    else:
        await _write_all(
            redis or load(RedisSettings),
            far_tier,
            reports,
            decided,
            fires,
            schedules,
            cron_report,
        )
    return RebuildReport(
        since_ms=since_ms,
        dry_run=dry_run,
        events_topic=events_settings.topic,
        events_from_ms=events_from,
        events=index,
        topics=reports,
        cron=cron_report,
        window=window(index, scheduler),
    )


async def _write_all(
    redis: RedisSettings,
    far: _Far,
    reports: list[TopicReport],
    decided: list[list[Kept]],
    fires: dict[str, list[Key]],
    schedules: dict[str, CronSchedule | None],
    cron_report: CronReport,
) -> None:
    client = connect(redis)
    engine = Engine(client)
    try:
        for report, kept in zip(reports, decided, strict=True):
            await _write(engine, far, report, kept)
        await _refire(engine, fires, schedules, cron_report)
    finally:
        await far.close()
        await client.aclose()


# ---- the command ----------------------------------------------------------------------------------------
def _since(text: str) -> int:
    """``--from``: a time only (an offset means nothing across topics)."""
    try:
        point = parse_point(text, "--from")
    except typer.BadParameter:
        point = Point()
    if point.time_ms is None:
        raise typer.BadParameter(
            f"expected an ISO-8601 time or a relative time like -2h (a time, not an offset); got {text!r}",
            param_hint="--from",
        )
    return point.time_ms


def rebuild(
    from_: Annotated[
        str,
        typer.Option(
            "--from",
            help="Start: an ISO-8601 time (naive = UTC) or relative (--from=-2h); older than any job that "
            "could still be unfinished.",
        ),
    ],
    topic: Annotated[
        list[str] | None,
        typer.Option(help="A job topic (repeatable; default: JOBQ_RELAY_TOPICS, else every routed topic)."),
    ] = None,
    margin: Annotated[
        int, typer.Option(min=0, help="Seconds of events read before --from (clock skew).")
    ] = DEFAULT_MARGIN_S,
    events_topic: Annotated[
        str | None, typer.Option(help="The lifecycle events topic (default: JOBQ_EVENTS_TOPIC).")
    ] = None,
    cron: Annotated[
        bool, typer.Option(help="Fire again the cron fires that were pending (schedules from Consul).")
    ] = True,
    dry_run: Annotated[bool, typer.Option(help="Read and decide; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Rebuild the pending state from Kafka after Redis lost everything: finished and canceled jobs (the
    events topic says which) are not run again."""
    since = _since(from_)
    events = load(EventSettings) if events_topic is None else load(EventSettings, topic=events_topic)
    err = Console(stderr=True)
    try:
        report = asyncio.run(
            rebuild_from_kafka(since, topic, dry_run=dry_run, cron=cron, margin_s=margin, events=events)
        )
    except JobqError as exc:
        err.print(f"[red]error[/] ({exc.code}): {escape(exc.message)}")
        raise typer.Exit(2) from exc
    except ResponseError as exc:  # e.g. a damaged queue key: every script on that queue fails
        err.print(
            f"[red]error[/] (rebuild_refused): Redis refused a write: {escape(str(exc))}. What was written "
            "stays written; repair the queue and run the same rebuild again (dedup makes a rerun safe)."
        )
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(orjson.dumps(report.as_dict()))
        return
    _print(report)


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else "-"


def _print(report: RebuildReport) -> None:
    console = Console()
    title = f"jobq rebuild from {_when(report.since_ms)}" + (
        " (dry run: nothing written)" if report.dry_run else ""
    )
    cols = ["topic", "read", "rebuilt", "far tier", "graphs", "skipped (finished)", "duplicate"]
    table = Table(*cols, "unscheduled", "refused", "malformed", title=title)
    for t in report.topics:
        d = t.totals()
        skipped = ", ".join(f"{s} {n}" for s, n in d["skipped_by_state"].items()) or "0"
        rebuilt = f"{d['kept']} to write" if report.dry_run else str(d["rebuilt"])
        row = [t.topic, d["read"], rebuilt, d["far"], d["graphs"], skipped, d["duplicate"]]
        table.add_row(*(str(v) for v in [*row, d["unscheduled"], d["refused"], d["malformed"]]))
    console.print(table)
    ev, w = report.events, report.window
    console.print(
        f"events: {escape(report.events_topic)} from {_when(report.events_from_ms)}: {ev.read} read, "
        f"{len(ev.jobs)} jobs known, newest {_when(ev.newest_ms)}; cron fires: "
        f"{len(report.cron.refired)} {'to fire' if report.dry_run else 'fired'} again, "
        f"{len(report.cron.missing)} without their schedule, {report.cron.finished} finished"
    )
    for what, cut in [
        (f"the events topic {report.events_topic}", ev.retention_cut_ms),
        *((f"topic {t.topic}", t.retention_cut_ms) for t in report.topics),
    ]:
        if cut:
            console.print(
                f"[yellow]warning[/]: {escape(what)} begins at {_when(cut)} (retention deleted the records "
                "before): what happened before then is not known here."
            )
    delay, ship = w.get("measured_delay_ms") or {}, w["shipping_s"]
    console.print(
        "window: a job whose final event had not reached Kafka when Redis was lost runs again. Events "
        f"ship {ship['watched_queue']:g} s after a transition on a watched queue, up to "
        f"{ship['new_queue']:g} s for a new queue, {ship['after_scheduler_death']:g} s after a scheduler "
        f"died, {ship['graph_events']:g} s for graphs; measured on the events read: p99 ≤ "
        f"{delay.get('p99_at_most')} ms, max {delay.get('max')} ms."
    )
