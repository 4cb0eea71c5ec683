"""The queues' rate history, kept by jobq itself (no Prometheus needed): the dashboard's 24 h charts.

The scheduler instance that keeps a queue samples the queue's lifetime counters (``stats``: enqueued,
claimed, completed, errored, retried, and ``wait_ms``, the summed start latency of every claim) every
``JOBQ_SCHEDULER_SERIES_EVERY_S`` into ``jobq:series:<queue>`` (a ZSET scored by the sample time; one
sample per time bucket, so two instances sampling in the same bucket leave one). Samples older than
:data:`KEEP_MS` are trimmed at every write. This module is the writing side; the dashboard and
``jobq status`` read the samples back as rates (``jqweb/series.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from jqcore.keys import series_key
from jqengine import RedisClient

__all__ = ["COUNTERS", "KEEP_MS", "record"]

KEEP_MS = 25 * 3600 * 1000
"""Samples are kept for 25 h (a full day plus a margin for the first bucket)."""

COUNTERS = ("enqueued", "claimed", "completed", "errored", "retried", "canceled", "wait_ms")
"""The ``stats`` counters sampled."""


async def record(
    client: RedisClient, queues: Sequence[str], stats: Mapping[str, Mapping[str, int]], bucket_ms: int
) -> None:
    """Write one sample per queue for the bucket starting at ``bucket_ms`` (replacing one written in the
    same bucket) and trim what is older than :data:`KEEP_MS`."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        counters = stats.get(queue, {})
        sample = {"t": bucket_ms, **{c: int(counters.get(c, 0)) for c in COUNTERS}}
        key = series_key(queue)
        pipe.zremrangebyscore(key, bucket_ms, bucket_ms)
        pipe.zadd(key, {orjson.dumps(sample): bucket_ms})
        pipe.zremrangebyscore(key, "-inf", f"({bucket_ms - KEEP_MS}")
    await pipe.execute()
