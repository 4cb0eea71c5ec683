"""The far tier's scan markers (``docs/scheduler.md``): which schedule-topic partitions have every index
entry written in this Redis. The scheduler instance owning a partition writes them; a marker missing (Redis
lost, FLUSHALL) makes it write the partition's entries again from its memory. Over a plain Redis client."""

from __future__ import annotations

from collections.abc import Sequence

from jqcore.keys import far_scanned_key, far_scanning_key
from jqengine import RedisClient

__all__ = ["begin", "mark", "unscanned"]


async def unscanned(client: RedisClient, topic: str, partitions: Sequence[int]) -> list[int]:
    """The schedule topic's ``partitions`` whose marker is missing: Redis lost their index entries (or nobody
    wrote them yet)."""
    pipe = client.pipeline(transaction=False)
    for p in partitions:
        pipe.exists(far_scanned_key(topic, p))
    return [p for p, found in zip(partitions, await pipe.execute(), strict=True) if not found]


async def begin(client: RedisClient, topic: str, partitions: Sequence[int]) -> None:
    """The index entries of the schedule topic's ``partitions`` are being written (see :func:`mark`)."""
    pipe = client.pipeline(transaction=False)
    for p in partitions:
        pipe.set(far_scanning_key(topic, p), "1")
    await pipe.execute()


async def mark(client: RedisClient, topic: str, partitions: Sequence[int], at_ms: int) -> bool:
    """Record that the index entries of the schedule topic's ``partitions`` are all written (at ``at_ms``) —
    each only if the mark of the writing's start survived: a Redis lost (or flushed) meanwhile took it with
    the entries written so far, and they must be written again. True when all were marked."""
    pipe = client.pipeline(transaction=False)
    for p in partitions:
        pipe.getdel(far_scanning_key(topic, p))
    began = await pipe.execute()
    pipe = client.pipeline(transaction=False)
    for p, marker in zip(partitions, began, strict=True):
        if marker is not None:
            pipe.set(far_scanned_key(topic, p), str(at_ms))
    await pipe.execute()
    return all(m is not None for m in began)
