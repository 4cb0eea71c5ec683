"""What one relay term works with: a consumed batch parsed into envelopes (and the records to set aside),
the errors that end a batch, how a held batch is tried again, and the signals a relay gives a test that
listens."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Message
from redis.exceptions import RedisError
from tenacity import AsyncRetrying, RetryCallState, retry_base, wait_exponential

from jqcore.admission import Admission
from jqcore.envelope import Envelope, decode
from jqcore.errors import BackendUnavailable, EnvelopeError, JobqError
from jqcore.lane import SOURCE_HEADER
from jqcore.log import get_logger
from jqcore.testsignal import TestSignal
from jqengine import FenceRejected, refused_by_script
from jqrelay.backpressure import held
from jqrelay.limits import LimitSignals
from jqruntime.kafka import Record

__all__ = [
    "Batch",
    "RelaySignals",
    "ReplicasBehind",
    "TermEnded",
    "ends_batch",
    "held_retries",
    "holds_batch",
    "lane_record",
    "origin_of",
    "parse_batch",
    "retriable",
    "set_aside",
]

log = get_logger("jqrelay.topic")


class TermEnded(Exception):
    """The term stopped being trusted in the middle of a batch: write nothing more, commit nothing."""


class ReplicasBehind(Exception):
    """A batch's writes did not reach the replicas required (``JOBQ_RELAY_WAIT_REPLICAS``) in time: write
    the batch again and wait again before committing."""


def retriable(exc: BaseException) -> bool:
    """A jobq error that says trying again later may succeed (Redis or Kafka unreachable, memory full)."""
    return isinstance(exc, JobqError) and exc.retriable


def ends_batch(exc: BaseException) -> bool:
    """Stop the whole batch (retried by the term loop) rather than set one queue's jobs aside: the backend
    may come back (``retriable``), or this relay is no longer the one that may write (fence, term)."""
    return retriable(exc) or isinstance(exc, FenceRejected | TermEnded)


def holds_batch(exc: BaseException) -> bool:
    """Try the write again (with backoff, for as long as it takes) rather than set jobs aside: a retriable
    error, or an error of Redis that says nothing about the queues' data — an ACL that no longer lets the
    relay run its scripts, a reply redis-py wraps or names that no mapping knows. Only a script that ran
    and failed on what it found (:func:`~jqengine.refused_by_script`) refuses a queue's jobs, and an
    error of this process (a bug met by one job's encoding) sets them aside too: holding the partition
    for them would hold every job behind them for good."""
    return retriable(exc) or (isinstance(exc, RedisError) and not refused_by_script(exc))


@dataclass
class Batch:
    envelopes: list[Envelope]
    dead: list[tuple[Message, str]]
    offsets: dict[int, int]
    source: dict[str, Message]
    """The record each job came from: its first in the batch — the one the engine stores (a later record
    of the same id, e.g. a client's retry through another gateway, is a duplicate of it). Its offset is
    the job's ``origin``, which decides whether a later read is the same record again (for dead-lettering
    what the engine refuses, too)."""
    retry: list[tuple[Message, str]] = field(default_factory=list)
    """Records whose queue failed the write for a job-specific reason: to ``<topic>.retry``."""
    far: list[Envelope] = field(default_factory=list)
    """Jobs due beyond the far-future horizon: in the schedule topic, only indexed in Redis."""
    records: list[Message] = field(default_factory=list)
    """The record of each envelope (same order)."""
    aside: list[tuple[Message, str]] = field(default_factory=list)
    """Records (and their queue) that step aside into the holding lane (``jqrelay.lane``)."""
    topic: str = ""
    lane: bool = False
    """Read from the topic's holding lane: each record's origin is its ``jobq-source`` header."""

    def origin(self, job_id: str) -> str:
        """The Kafka record a job came from (``topic/partition/offset``): where the engine's dedup and the
        dead letters say it was read — for a record drained from the holding lane, where it was first read."""
        return origin_of(self.source[job_id], self.topic, lane=self.lane)

    def sizes(self) -> dict[str, tuple[int, int]]:
        """Per queue: its jobs in the batch and their records' bytes (the memory budgets project them)."""
        out: dict[str, tuple[int, int]] = {}
        for e in self.envelopes:
            jobs, size = out.get(e.queue, (0, 0))
            out[e.queue] = (jobs + 1, size + len(self.source[e.id].value() or b""))
        return out


@dataclass
class RelaySignals:
    """What a relay reports to a test that listens (:mod:`jqcore.testsignal`)."""

    batch: TestSignal[dict[str, int]] = field(default_factory=lambda: TestSignal("relay batch"))
    """A batch written (its offsets' commit sent with it, or within ``COMMIT_EVERY_S`` of
    :mod:`jqrelay.topic`): the relay's stage counts after it."""
    committed: TestSignal[int] = field(default_factory=lambda: TestSignal("relay committed"))
    """Kafka confirmed a commit: the sum over partitions of the committed offsets (records behind them)."""
    stalled: TestSignal[str] = field(default_factory=lambda: TestSignal("relay stalled"))
    """Redis stopped the relay once more: a batch write to be retried (``write``), a batch whose writes
    did not reach the replicas, written again (``replicas``), or a term that failed and starts over
    (``loop``)."""
    held: TestSignal[tuple[str, str]] = field(default_factory=lambda: TestSignal("queue held"))
    """A queue started to step aside into the holding lane: (queue, why)."""
    released: TestSignal[tuple[str, int]] = field(default_factory=lambda: TestSignal("queue released"))
    """A queue's lane was drained and nothing holds it: (queue, records drained this term)."""
    lane: TestSignal[dict[str, int]] = field(default_factory=lambda: TestSignal("lane drained"))
    """The drain wrote a chunk of lane records: its stage counts after it."""
    limit: LimitSignals = field(default_factory=LimitSignals)
    """The topic's rate limit (its watch reports each limit it applies)."""
    queue_limits: LimitSignals = field(default_factory=LimitSignals)
    """The queues' rate limits."""


def parse_batch(topic: str, msgs: Sequence[Message], admission: Admission | None = None) -> Batch:
    """The envelopes of ``msgs`` (a consume call's records of ``topic``) and each partition's last
    offset; a record that is not an envelope, or one ``admission`` refuses (``jqcore.admission``), goes
    to ``dead`` with the reason. A consume error other than a partition's end is Kafka failing:
    :class:`BackendUnavailable`."""
    batch = Batch([], [], {}, {}, topic=topic)
    offsets, envelopes, records, source, dead = (
        batch.offsets,
        batch.envelopes,
        batch.records,
        batch.source,
        batch.dead,
    )
    for msg in msgs:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                raise BackendUnavailable(f"consume error on {topic}: {err.str()}")
            continue
        partition, offset = msg.partition() or 0, msg.offset() or 0
        if offset > offsets.get(partition, -1):
            offsets[partition] = offset
        value = msg.value() or b""
        try:
            env = decode(value)
        except EnvelopeError as exc:
            dead.append((msg, f"{exc.code}: {exc.message}"))
            continue
        reason = admission.problem(env, value, msg.headers()) if admission else None
        if reason is not None:
            dead.append((msg, reason))
            continue
        envelopes.append(env)
        records.append(msg)
        source.setdefault(env.id, msg)
    return batch


ASIDE_HEADER = "jobq-aside"
ASIDE_AT_HEADER = "jobq-aside-at"


def headers_of(msg: Message) -> list[tuple[str, bytes]]:
    """A record's headers as (name, bytes) pairs (valueless ones left out)."""
    raw = msg.headers() or ()
    pairs = raw.items() if isinstance(raw, Mapping) else raw
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs if v is not None]


def header(msg: Message, name: str) -> bytes | None:
    return next((value for key, value in headers_of(msg) if key == name), None)


def origin_of(msg: Message, topic: str, *, lane: bool = False) -> str:
    """Where ``msg`` was first read: its ``jobq-source`` header for a holding lane's record (``lane``),
    else its own coordinates in ``topic``."""
    if lane and (source := header(msg, SOURCE_HEADER)):
        return source.decode()
    return f"{topic}/{msg.partition()}/{msg.offset()}"


def set_aside(
    to: str, topic: str, dead: Sequence[tuple[Message, str]], *, lane: bool = False
) -> list[Record]:
    """The records of ``topic`` to send on to ``to`` (``.dead`` or ``.retry``): bytes and key unchanged,
    the reason and the source (``topic/partition/offset``; a holding lane's record keeps its first) in
    headers."""
    return [
        Record(
            to,
            msg.value() or b"",
            msg.key(),
            [
                ("jobq-reason", reason.encode()[:1000]),
                (SOURCE_HEADER, origin_of(msg, topic, lane=lane).encode()),
            ],
        )
        for msg, reason in dead
    ]


def lane_record(
    lane: str, partition: int, topic: str, msg: Message, queue: str, reason: str, at: int
) -> Record:
    """A record of ``topic`` stepping aside into its holding lane ``lane``: bytes unchanged, keyed by its
    queue, in the queue's lane ``partition``, with the source's headers and ``jobq-source`` (where it was
    read: the job's origin when drained), ``jobq-aside`` (why) and ``jobq-aside-at`` (when, ms)."""
    headers = [(k, v) for k, v in headers_of(msg) if k not in (SOURCE_HEADER, ASIDE_HEADER, ASIDE_AT_HEADER)]
    headers += [
        (SOURCE_HEADER, origin_of(msg, topic).encode()),
        (ASIDE_HEADER, reason.encode()),
        (ASIDE_AT_HEADER, str(at).encode()),
    ]
    return Record(lane, msg.value() or b"", queue.encode(), headers, partition)


def held_retries(topic: str, signals: RelaySignals, retry: retry_base, stall: str) -> AsyncRetrying:
    """Tries of a batch's write while Redis holds it: backoff up to 5 s, each wait counted as the batch
    held (``reason="redis"``), logged and signalled as a ``stall``, so a write stuck for minutes is never
    silent; the last error re-raised if ``retry`` does not take it."""

    def stalled(state: RetryCallState) -> None:
        error = repr(state.outcome.exception()) if state.outcome is not None else ""
        held_s = round(state.seconds_since_start or 0.0, 1)
        log.warning("batch held", topic=topic, stage=stall, tries=state.attempt_number, s=held_s, error=error)
        signals.stalled.signal(stall)

    async def sleep(seconds: float) -> None:
        with held(topic, "redis"):
            await asyncio.sleep(seconds)

    wait = wait_exponential(multiplier=0.1, max=5)
    return AsyncRetrying(retry=retry, wait=wait, before_sleep=stalled, sleep=sleep, reraise=True)
