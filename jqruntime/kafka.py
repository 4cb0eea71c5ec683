"""An asyncio face for confluent-kafka's producer: ``await produce(...)`` resolves on the delivery report.

librdkafka batches and retries internally; one background thread serves delivery callbacks and hands
the results of each round of them to the event loop at once (one wake-up of the loop for every call
settled in the round, not one per call). ``acks="all"`` producers are idempotent (no duplicates from internal
retries, order kept per partition); ``acks="leader"`` trades that for latency (a leader failure before
replication can lose the write) and is only used for queues that opt in.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from jqcore.envelope import KAFKA_MAX_MESSAGE_BYTES, Envelope, encode, record_key
from jqcore.errors import BackendUnavailable, JobqError
from jqcore.log import kafka_logging
from jqcore.settings.kafka import KafkaSettings

CONSUME_WAIT_S = 0.19
"""Longest wait per blocking librdkafka call (``consume``, ``flush``, ``list_topics``). confluent-kafka
≥ 2.13 splits waits of 200 ms or more into GIL-re-acquiring chunks, which was seen to hang ``consume``
for good in a worker thread (and is the suspect of a once-seen gateway request that never ended); under
200 ms it takes the direct librdkafka path. Callers loop instead of waiting longer."""

REPORT_GRACE_S = 5.0
"""How long past its delivery timeout a produce waits for librdkafka's report before giving up."""

__all__ = [
    "CONSUME_WAIT_S",
    "REPORT_GRACE_S",
    "RUN_AT_HEADER",
    "AsyncProducer",
    "Delivered",
    "PartitionInvalid",
    "ProduceFailed",
    "Record",
    "RecordTooLarge",
    "TopicMissing",
    "committed_offsets",
    "job_record",
    "parse_schedule_key",
    "schedule_key",
    "schedule_record",
    "topic_partitions",
]


class ProduceFailed(BackendUnavailable):
    """Kafka did not confirm the write (broker down, timeout, topic missing)."""

    code = "kafka_unavailable"


class TopicMissing(JobqError):
    """The topic a queue routes to does not exist (topics are never created from requests)."""

    code = "topic_missing"
    retriable = True
    """The request is not at fault and succeeds unchanged once the topic exists: an operator runs ``jobq
    topics create``, or a topic just created reaches the broker's metadata a moment later. Hence a 503 with
    ``Retry-After``, like Kafka being down (``/readyz`` says not ready meanwhile)."""
    http_status = 503


_SIZE_ERRORS = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)
_PARTITION_ERRORS = (KafkaError._UNKNOWN_PARTITION,)
_TOPIC_ERRORS = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)


class RecordTooLarge(JobqError):
    """Kafka refused a record as too large: the topic's ``max.message.bytes`` (or the broker's) is below
    jobq's size limits, e.g. a topic created outside jobq. Retrying the same record never succeeds."""

    code = "job_too_large"
    http_status = 413

    def __init__(self, message: str = "", *, index: int = 0, size: int = 0) -> None:
        super().__init__(message)
        self.index, self.size = index, size


class PartitionInvalid(JobqError):
    """A record names a partition the topic does not have."""

    code = "partition_invalid"
    http_status = 400

    def __init__(self, message: str = "", *, index: int = 0, partition: int = 0) -> None:
        super().__init__(message)
        self.index, self.partition = index, partition


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    value: bytes | None
    """None: a tombstone (a compacted topic forgets the key)."""
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes]] | None = None
    partition: int | None = None


def job_record(topic: str, env: Envelope, partition: int | None = None) -> Record:
    """A job's Kafka record as every producer writes it: value = the envelope bytes, key = the
    exclusivity value or the id (:func:`jqcore.envelope.record_key`), headers ``jobq-queue`` and
    ``jobq-kind`` (the gateway's enqueue and replay, the dashboard's replay)."""
    headers = [("jobq-queue", env.queue.encode()), ("jobq-kind", env.kind.encode())]
    return Record(topic, encode(env), record_key(env), headers, partition)


def schedule_key(queue: str, job_id: str) -> bytes:
    """The key of a job's record in the far-future tier's compacted topic: ``<queue>/<id>`` (queue names
    have no ``/``), so a tombstone alone says which queue's index entry it ends."""
    return f"{queue}/{job_id}".encode()


RUN_AT_HEADER = "jobq-run-at"
"""The header of a far-future job's record in the schedule topic: its ``run_at`` in ms (decimal ASCII), so
a scheduler indexing the topic need not decode the envelope (records written without it are decoded)."""


def schedule_record(topic: str, queue: str, job_id: str, run_at: int, value: bytes | None) -> Record:
    """A far-future job's record in the schedule topic: key ``<queue>/<id>``, header ``jobq-run-at``."""
    return Record(topic, value, schedule_key(queue, job_id), [(RUN_AT_HEADER, str(run_at).encode())])


def parse_schedule_key(key: bytes | None) -> tuple[str, str] | None:
    """``(queue, id)`` of a schedule-topic key; None when it is not one."""
    queue, slash, job_id = (key or b"").decode("utf-8", "replace").partition("/")
    return (queue, job_id) if slash and queue and job_id else None


@dataclass(frozen=True, slots=True)
class Delivered:
    topic: str
    partition: int
    offset: int


class AsyncProducer:
    def __init__(
        self,
        settings: KafkaSettings,
        *,
        acks: Literal["all", "leader"] = "all",
        delivery_timeout_ms: int = 10_000,
        linger_ms: int = 2,
        extra: dict[str, Any] | None = None,
    ) -> None:
        conf: dict[str, Any] = {
            **settings.client_config(),
            **kafka_logging(),
            "acks": "all" if acks == "all" else "1",
            "enable.idempotence": acks == "all",
            "linger.ms": linger_ms,
            "message.timeout.ms": delivery_timeout_ms,
            "compression.type": "lz4",
            "message.max.bytes": KAFKA_MAX_MESSAGE_BYTES,
            **(extra or {}),
        }
        self._producer = Producer(conf)
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._settled = _Settled()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kafka-delivery", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)
            self._settled.hand_over()

    async def produce(self, record: Record) -> Delivered:
        return (await self.produce_many([record]))[0]

    async def produce_many(self, records: Sequence[Record]) -> list[Delivered]:
        """Write every record; return once each has its delivery report. Raises :class:`ProduceFailed`
        (or :class:`TopicMissing`) if any write was not confirmed — the caller must not acknowledge;
        :class:`RecordTooLarge` / :class:`PartitionInvalid` when Kafka refused a record for good.

        The delivery thread collects the reports of one call and wakes the event loop once, when the
        last arrives (not once per record: a 1,000-job request is one wake-up)."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, len(records), self._settled)
        for i, rec in enumerate(records):
            callback = waiter.callback(i)
            if not self._enqueue(rec, callback, i):
                await self._enqueue_when_room(rec, callback, i)
        # librdkafka reports every record within its delivery timeout; this only guards a stuck call (a
        # timer, not asyncio.wait_for: this is every enqueue's path, and wait_for costs a task's worth)
        timer = loop.call_later(self._delivery_timeout_s + REPORT_GRACE_S, _late, waiter.future)
        try:
            return await waiter.future
        finally:
            timer.cancel()

    def _enqueue(self, rec: Record, callback: Any, index: int) -> bool:
        """Hand the record to librdkafka (False: its local queue is full, try again shortly)."""
        kwargs: dict[str, Any] = {"value": rec.value, "key": rec.key, "on_delivery": callback}
        if rec.headers:
            kwargs["headers"] = list(rec.headers)
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        try:
            self._producer.produce(rec.topic, **kwargs)
        except BufferError:
            return False
        except KafkaException as exc:
            err = exc.args[0]
            raise _refusal(err, rec.topic, index, len(rec.value or b""), rec.partition) or ProduceFailed(
                f"produce to {rec.topic!r} refused: {exc}"
            ) from exc
        return True

    async def _enqueue_when_room(self, rec: Record, callback: Any, index: int) -> None:
        """librdkafka's local queue is full: try again while the delivery thread drains it."""
        while True:
            await asyncio.sleep(0.005)
            if self._enqueue(rec, callback, index):
                return

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for outstanding writes; returns how many are still undelivered."""
        deadline = time.monotonic() + timeout_s
        try:
            while True:  # short waits only (see CONSUME_WAIT_S): long ones were seen to hang
                left = int(self._producer.flush(min(CONSUME_WAIT_S, max(0.0, deadline - time.monotonic()))))
                if not left or time.monotonic() >= deadline:
                    return left
        finally:
            self._settled.hand_over()  # the reports flush served on this thread

    def close(self, timeout_s: float = 10.0) -> None:
        self.flush(timeout_s)
        self._stop.set()
        self._thread.join(2.0)

    def partitions(self, topic: str, timeout_s: float = 5.0) -> list[int]:
        """The topic's partition ids (from broker metadata); raises TopicMissing / ProduceFailed."""
        deadline = time.monotonic() + timeout_s
        while True:  # short waits only (see CONSUME_WAIT_S): long ones were seen to hang
            try:
                md = self._producer.list_topics(topic, timeout=CONSUME_WAIT_S)
                break
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise ProduceFailed(f"no metadata from Kafka: {exc}") from exc
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise TopicMissing(f"topic {topic!r} does not exist")
        return sorted(t.partitions)


class _Settled:
    """The calls whose last delivery report came in this round of the delivery thread: handed to their
    event loops together when the round ends (one ``call_soon_threadsafe`` a loop, not one a call)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[list[Delivered]], Outcome]] = []

    def add(
        self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[list[Delivered]], outcome: Outcome
    ) -> None:
        with self.lock:
            self.calls.append((loop, future, outcome))

    def hand_over(self) -> None:
        if not self.calls:
            return
        with self.lock:
            calls, self.calls = self.calls, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[list[Delivered]], Outcome]]] = {}
        for loop, future, outcome in calls:
            by_loop.setdefault(loop, []).append((future, outcome))
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody awaits its calls now
                loop.call_soon_threadsafe(_settle_all, settled)


Outcome = list[Delivered] | Exception


class _Waiter:
    """The delivery reports of one ``produce_many`` call, gathered on the delivery thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int, settled: _Settled) -> None:
        self.loop = loop
        self.future: asyncio.Future[list[Delivered]] = loop.create_future()
        self.settled = settled
        self.results: list[Delivered | None] = [None] * n
        self.left = n
        self.error: Exception | None = None
        self.lock = threading.Lock()
        if n == 0:
            self.future.set_result([])

    def callback(self, index: int) -> Any:
        def done(err: KafkaError | None, msg: Message) -> None:
            with self.lock:
                if err is not None and self.error is None:
                    topic, value = msg.topic() or "", msg.value() or b""
                    self.error = _refusal(err, topic, index, len(value), msg.partition()) or ProduceFailed(
                        f"Kafka did not confirm the write: {err.str()}"
                    )
                elif err is None:
                    self.results[index] = Delivered(
                        msg.topic() or "", msg.partition() or 0, msg.offset() or 0
                    )
                self.left -= 1
                if self.left:
                    return
            outcome: Outcome = self.error or [r for r in self.results if r is not None]
            self.settled.add(self.loop, self.future, outcome)

        return done


def _refusal(err: KafkaError, topic: str, index: int, size: int, partition: int | None) -> JobqError | None:
    """The jobq error for a librdkafka refusal of this record or its topic (None: Kafka failed)."""
    code = err.code()
    if code in _TOPIC_ERRORS:
        return TopicMissing(f"topic {topic!r} does not exist")
    if code in _SIZE_ERRORS:
        return RecordTooLarge(
            f"Kafka refused record {index} ({size} bytes) for topic {topic!r} as too large: {err.str()} "
            f"(a Kafka limit, e.g. the topic's max.message.bytes, is below jobq's {KAFKA_MAX_MESSAGE_BYTES})",
            index=index,
            size=size,
        )
    if code in _PARTITION_ERRORS:
        return PartitionInvalid(
            f"topic {topic!r} has no partition {partition}", index=index, partition=partition or 0
        )
    return None


def _late(fut: asyncio.Future[list[Delivered]]) -> None:
    _settle(fut, ProduceFailed("Kafka gave no delivery report in time"))


def _settle_all(settled: list[tuple[asyncio.Future[list[Delivered]], Outcome]]) -> None:
    for fut, outcome in settled:
        _settle(fut, outcome)


def _settle(fut: asyncio.Future[list[Delivered]], result: Outcome) -> None:
    if fut.done():
        return
    if isinstance(result, Exception):
        fut.set_exception(result)
    else:
        fut.set_result(result)


def topic_partitions(
    settings: KafkaSettings, topics: Sequence[str], timeout_s: float = 10.0
) -> dict[str, list[int]]:
    """Partition ids per existing topic (missing topics are left out)."""
    from confluent_kafka.admin import AdminClient

    conf: dict[str, str | int | float | bool] = {**settings.client_config(), **kafka_logging()}
    try:
        md = AdminClient(conf).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ProduceFailed(f"no metadata from Kafka: {exc}") from exc
    return {t: sorted(md.topics[t].partitions) for t in topics if t in md.topics and md.topics[t].partitions}


_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError._TIMED_OUT,
    }
)


def _coordinator_moving(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and exc.args[0].code() in _COORDINATOR_MOVING


def committed_offsets(
    consumer: Consumer, partitions: Sequence[TopicPartition], patience_s: float = 30.0
) -> list[TopicPartition]:
    """The group's committed offsets, asked again while its coordinator is being found or loads (a fresh
    broker answers the first ask ``NOT_COORDINATOR``: the group's offsets partition is not loaded yet).
    Blocking: call it from a thread."""
    for attempt in Retrying(
        retry=retry_if_exception(_coordinator_moving),
        wait=wait_exponential(multiplier=0.05, max=1.0),
        stop=stop_after_delay(patience_s),
        reraise=True,
    ):
        with attempt:
            return list(consumer.committed(list(partitions), timeout=10))
    raise AssertionError("unreachable: Retrying reraises")
