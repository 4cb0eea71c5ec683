"""The rebuild's reading (:mod:`jqrecover.rebuild`): the job topics' records and the events topic's
latest event per job (:class:`EventIndex`), with where retention cut either short."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, cast

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaException, Message, TopicPartition

from jqcore.envelope import Envelope, decode
from jqcore.errors import BackendUnavailable, EnvelopeError, JobqError
from jqcore.events import TERMINAL, Event, parse_record
from jqcore.lane import SOURCE_HEADER
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import RelayKeys
from jqcore.topics import held_topic
from jqrecover.errors import RebuildError, ReplayError
from jqrecover.replay import PartitionRange, Point, iter_records, plan, tool_consumer
from jqruntime.kafka import committed_offsets

__all__ = [
    "FINISHED",
    "EventIndex",
    "Kept",
    "Key",
    "Latest",
    "Read",
    "RetentionCut",
    "TopicReport",
    "existing_topics",
    "final_state",
    "kafka_error",
    "read_events",
    "read_jobs",
    "timestamp_ms",
]

FINISHED: Final = TERMINAL | {"failed"}
"""Final states: a job's (:data:`jqcore.events.TERMINAL`) and a task graph's ``failed`` (its graph-level
event; a graph also ends ``completed`` or ``canceled``)."""
_DELAY_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000)

Key = tuple[str, str]
"""``(queue, id)``."""


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
        """A record of the events topic: its events, in order (``read`` counts events; a record that is
        not one counts once, as read and malformed)."""
        try:
            events = parse_record(msg.value() or b"")
        except (ValueError, KeyError, TypeError):
            self.read += 1
            self.malformed += 1
            return
        produced = timestamp_ms(msg)
        if produced:
            self.newest_ms = max(self.newest_ms, produced)
        for event in events:
            self.read += 1
            if produced:
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


def timestamp_ms(msg: Message) -> int:
    kind, ts = msg.timestamp()
    return int(ts) if kind != TIMESTAMP_NOT_AVAILABLE and ts > 0 else 0


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
    held: int = 0
    """Records not written because they wait undrained in the topic's holding lane (``<topic>.held``):
    the relay writes them, in order and at their queue's rate, once the queue is released."""
    held_from: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)
    """Per (queue, source partition) with records waiting undrained in the holding lane, the source offset
    of its first: that queue's records from there on are the lane's (set aside, or to be: a queue with
    records in the lane is held until the lane holds none of it)."""
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
            "held": self.held,
            "duplicate": sums["duplicate"],
            "unscheduled": sums["unscheduled"],
            "refused": sums["refused"],
            "malformed": sums["malformed"],
            "retention_cut_ms": self.retention_cut_ms,
            "partitions": [asdict(r) for r in self.partitions],
        }


Kept = tuple[PartitionRange, Message, Envelope]
"""A job record kept for writing."""


def kafka_error(exc: Exception) -> JobqError:
    """Kafka trouble while reading (nothing written yet) as one readable error."""
    if isinstance(exc, ReplayError):  # the replay's reader: no progress for STALL_S
        return BackendUnavailable(exc.message, code="kafka_stalled")
    return BackendUnavailable(f"Kafka: {exc}", code="kafka_unavailable")


def existing_topics(consumer: Consumer, topics: Iterable[str]) -> set[str]:
    md = consumer.list_topics(timeout=10)
    return {t for t in topics if (m := md.topics.get(t)) is not None and m.error is None and m.partitions}


Read = tuple[PartitionRange, Message, Envelope | None]
"""A job record (None: malformed)."""


class RetentionCut:
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
            self.since_ms = max(self.since_ms or 0, timestamp_ms(msg)) or None


def read_jobs(
    kafka: KafkaSettings, topics: Sequence[str], events_topic: str, since_ms: int, keys: RelayKeys
) -> list[tuple[TopicReport, list[Read]]]:
    consumer = tool_consumer(kafka)
    try:
        found = existing_topics(consumer, [*topics, events_topic, *map(held_topic, topics)])
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
            report, cut = TopicReport(topic, ranges), RetentionCut(consumer, topic, ranges)
            records: list[Read] = []
            for r, msg in iter_records(consumer, topic, ranges):
                cut.see(msg)
                try:
                    records.append((r, msg, decode(msg.value() or b"")))
                except EnvelopeError:
                    records.append((r, msg, None))
            report.retention_cut_ms = cut.since_ms
            if held_topic(topic) in found:
                report.held_from = held_from(kafka, topic, keys.lane_group(topic))
            out.append((report, records))
        return out
    except (ReplayError, KafkaException) as exc:
        raise kafka_error(exc) from exc
    finally:
        consumer.close()


def held_from(kafka: KafkaSettings, topic: str, group: str) -> dict[tuple[str, int], int]:
    """:attr:`TopicReport.held_from` of ``topic``: its holding lane read from the lane group's committed
    offset of each partition (what the relay drained is below it) to its end."""
    lane = held_topic(topic)
    reader = tool_consumer(kafka, group)
    out: dict[tuple[str, int], int] = {}
    try:
        md = reader.list_topics(lane, timeout=10).topics[lane]
        ranges = []
        for tp in committed_offsets(reader, [TopicPartition(lane, p) for p in sorted(md.partitions)]):
            low, high = reader.get_watermark_offsets(tp, timeout=10)
            ranges.append(PartitionRange(tp.partition, max(low, tp.offset), high))
        for _, msg in iter_records(reader, lane, ranges):
            source, queue = _source(msg), (msg.key() or b"").decode()
            if source is None or not source.startswith(f"{topic}/"):
                continue
            partition, offset = (int(x) for x in source.rsplit("/", 2)[1:])
            at = out.setdefault((queue, partition), offset)
            out[(queue, partition)] = min(at, offset)
        return out
    finally:
        reader.close()


def _source(msg: Message) -> str | None:
    """A lane record's ``jobq-source`` header (its records' headers come as a list of pairs)."""
    value = dict(cast("list[tuple[str, bytes | None]]", msg.headers() or [])).get(SOURCE_HEADER)
    return value.decode() if value is not None else None


def read_events(kafka: KafkaSettings, topic: str, from_ms: int, index: EventIndex) -> None:
    consumer = tool_consumer(kafka)
    try:
        ranges = plan(consumer, topic, Point(time_ms=from_ms), None, None)
        cut = RetentionCut(consumer, topic, ranges)
        for _, msg in iter_records(consumer, topic, ranges):
            cut.see(msg)
            index.add_record(msg)
        index.retention_cut_ms = cut.since_ms
    except (ReplayError, KafkaException) as exc:
        raise kafka_error(exc) from exc
    finally:
        consumer.close()
