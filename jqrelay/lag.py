"""The lock holder's report of each partition's lag (``jobq_relay_lag_records``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from jqcore import metrics

__all__ = ["LAG_EVERY_S", "report_lag"]

LAG_EVERY_S = 1.0
"""How often the lock holder updates ``jobq_relay_lag_records``."""


async def report_lag(topic: str, consumer: Consumer, committed: Mapping[int, int]) -> None:
    """While this relay leads: each partition's lag (high watermark minus the consumer's position, from
    librdkafka's cached watermarks: no request) every :data:`LAG_EVERY_S`, held batches included;
    the series are removed when the term ends (the task is cancelled), so only the holder reports them.
    ``committed``: each partition's committed offset (where a partition without a position stands)."""
    parts = [TopicPartition(topic, p) for p in committed]
    try:
        while True:
            for tp in consumer.position(parts):
                _, high = consumer.get_watermark_offsets(tp, cached=True)
                at = tp.offset if tp.offset >= 0 else committed.get(tp.partition, 0)
                if high >= 0:
                    metrics.RELAY_LAG.labels(topic, str(tp.partition)).set(max(0, high - at))
            await asyncio.sleep(LAG_EVERY_S)
    finally:
        for tp in parts:
            with contextlib.suppress(KeyError):
                metrics.RELAY_LAG.remove(topic, str(tp.partition))
