"""Counting what a topic holds: the benchmarks' and the tests' view of Kafka (not part of the product)."""

from __future__ import annotations

__all__ = ["end_offsets", "events_in"]


def end_offsets(bootstrap: str, topic: str, timeout_s: float = 10.0) -> int:
    """How many records ``topic`` ever held: the sum of its partitions' end offsets (blocking)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.ends", "log_level": 0})
    try:
        parts = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        ends = (consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in parts)
        return sum(ends)
    finally:
        consumer.close()


def events_in(bootstrap: str, topic: str, timeout_s: float = 60.0) -> tuple[int, int]:
    """(records, events) the events topic ``topic`` holds: every record read from the start to its end
    offsets and decoded (``jqcore.events.decode_record``; blocking)."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    from jqcore.events import decode_record

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.events", "log_level": 0})
    try:
        parts = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        want, records, events = end_offsets(bootstrap, topic, timeout_s), 0, 0
        deadline = time.monotonic() + timeout_s
        while records < want and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    records += 1
                    events += len(decode_record(msg.value() or b""))
        return records, events
    finally:
        consumer.close()
