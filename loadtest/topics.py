"""Counting what a topic holds: the benchmarks' and the tests' view of Kafka (not part of the product)."""

from __future__ import annotations

__all__ = ["end_offsets"]


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
