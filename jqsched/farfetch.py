"""Reading given records of the schedule topic by offset (the far-future mover's second consumer).

The in-memory index (:mod:`jqsched.farindex`) knows which offsets come due; this consumer seeks to the
smallest wanted offset of a partition and reads forward, seeking again across a gap of more than
``GAP`` records. An offset compaction removed is simply not returned (its key had a later record: the
index skips it anyway). Blocking calls: run them in a thread.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from jqcore.errors import BackendUnavailable
from jqcore.log import kafka_logging
from jqcore.settings.kafka import KafkaSettings

__all__ = ["GAP", "Fetcher", "schedule_consumer"]

GAP = 2_000
"""Wanted offsets further apart than this are reached by a seek, not by reading what lies between."""
READ = 2_000
"""Records asked of librdkafka per call."""
POLL_S = 0.02
"""Longest wait of one read (librdkafka waits this long unless ``READ`` records arrive)."""
FETCH_BACKOFF_MS = 10
"""librdkafka's pause before the next fetch once a partition's queue passed ``queued.max.messages.kbytes``
(default 1,000 ms): with a bounded queue, a fetch that moved to another partition and back met it one
time in five or so, a 1 s stall per move of 2,000 jobs (measured: 6.4 s of 36 fetches → 0.34 s)."""
WAIT_S = 10.0
"""Longest wait for the next records before the fetch fails (Kafka away: the mover retries)."""


def schedule_consumer(kafka: KafkaSettings, group: str, queued_kbytes: int) -> Consumer:
    """A consumer of the schedule topic that is only assigned partitions (``group`` is never joined or
    committed), prefetching at most ``queued_kbytes`` per partition."""
    return Consumer(
        {
            **kafka.client_config(),
            **kafka_logging(),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "queued.max.messages.kbytes": queued_kbytes,  # records read ahead: bounded, they are not kept
            "fetch.max.bytes": queued_kbytes * 1024,
            "fetch.queue.backoff.ms": FETCH_BACKOFF_MS,
        }
    )


class Fetcher:
    def __init__(self, kafka: KafkaSettings, topic: str, name: str) -> None:
        self.topic = topic
        self._consumer = schedule_consumer(kafka, f"jobq-scheduler.{name}.fetch", 2_048)

    def close(self) -> None:
        self._consumer.close()

    def fetch(self, partition: int, offsets: Sequence[int]) -> list[Message]:
        """The records at ``offsets`` (sorted ascending) of ``partition`` that still exist, in order."""
        got: dict[int, Message] = {}
        i = 0  # offsets[:i] are behind the read position
        self._seek(partition, offsets[0])
        try:
            deadline = time.monotonic() + WAIT_S
            while i < len(offsets):
                msgs = self._consumer.consume(READ, POLL_S)  # waits POLL_S unless READ records arrive
                if not msgs:
                    _, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), 5)
                    if offsets[i] >= high:
                        break  # the rest is past the end (gone, and nothing written after)
                    if time.monotonic() > deadline:
                        raise BackendUnavailable(f"no records from {self.topic}/{partition} in {WAIT_S:g} s")
                    continue
                deadline = time.monotonic() + WAIT_S
                i, last = self._take(msgs, offsets, i, got)
                if i < len(offsets) and last >= 0 and offsets[i] - last > GAP:
                    self._seek(partition, offsets[i])
        finally:
            self._consumer.unassign()
        return [got[o] for o in sorted(got)]

    def _take(
        self, msgs: Sequence[Message], offsets: Sequence[int], i: int, got: dict[int, Message]
    ) -> tuple[int, int]:
        """Keep the wanted records of ``msgs`` in ``got``; the next wanted index and the last offset read."""
        last = -1
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise BackendUnavailable(f"consume error on {self.topic}: {err.str()}")
            offset = msg.offset() or 0
            last = max(last, offset)
            if i >= len(offsets) or offset < offsets[i]:
                continue  # between wanted offsets, or read before a seek
            while i < len(offsets) and offsets[i] < offset:
                i += 1  # gone: compaction removed it
            if i < len(offsets) and offsets[i] == offset:
                got[offset] = msg
                i += 1
        return i, last

    def _seek(self, partition: int, offset: int) -> None:
        self._consumer.assign([TopicPartition(self.topic, partition, offset)])
