"""Reads of the far-future tier's index (``far``: a HASH id → ``run_at``, ``docs/engine.md``).

An index an older jobq wrote is a ZSET (score = ``run_at``) until the first ``schedule_far`` replaces it
(the schedulers write every entry again at start): each read here falls back to it on ``WRONGTYPE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from jqengine.keys import QueueKeys
from jqengine.redisconn import RedisClient, text

__all__ = ["FAR_NEXT_UP_TO", "far_count", "far_ids", "far_next", "far_run_at", "far_run_ats"]

FAR_NEXT_UP_TO = 10_000
""":func:`far_next` reads the whole index of a queue holding at most this many far-future jobs."""


def _old(exc: ResponseError) -> bool:
    return str(exc).startswith("WRONGTYPE")


async def far_run_at(client: RedisClient, queue: str, job_id: str) -> int | None:
    """The ``run_at`` of a far-future job still in the schedule topic (None: not there)."""
    key = QueueKeys(queue).far
    found: Any
    try:
        found = await client.hget(key, job_id)
    except ResponseError as exc:
        if not _old(exc):
            raise
        found = await client.zscore(key, job_id)
    return None if found is None else int(found)


async def far_run_ats(client: RedisClient, queue: str, ids: Sequence[str]) -> list[int | None]:
    """:func:`far_run_at` of each of ``ids``, one round trip."""
    key = QueueKeys(queue).far
    found: list[Any]
    try:
        found = await client.hmget(key, list(ids))
    except ResponseError as exc:
        if not _old(exc):
            raise
        found = await client.zmscore(key, list(ids))
    return [None if v is None else int(v) for v in found]


async def far_count(client: RedisClient, queue: str) -> int:
    key = QueueKeys(queue).far
    try:
        return int(await client.hlen(key))
    except ResponseError as exc:
        if not _old(exc):
            raise
        return int(await client.zcard(key))


async def far_ids(client: RedisClient, queue: str, offset: int, limit: int) -> tuple[list[str], int]:
    """Ids of far-future jobs in no order (each page sorted by ``run_at``), and how many there are; a page
    at ``offset`` scans the ``offset`` entries before it."""
    key = QueueKeys(queue).far
    try:
        page: list[tuple[int, str]] = []
        seen = 0
        async for job_id, run_at in client.hscan_iter(key, count=1000):
            if seen >= offset:
                page.append((int(run_at), text(job_id)))
                if len(page) >= limit:
                    break
            seen += 1
        return [job_id for _, job_id in sorted(page)], int(await client.hlen(key))
    except ResponseError as exc:
        if not _old(exc):
            raise
        ids = await client.zrange(key, offset, offset + limit - 1)
        return [text(i) for i in ids], int(await client.zcard(key))


async def far_next(client: RedisClient, queue: str) -> int | None:
    """The earliest ``run_at`` of a queue's far-future jobs; None when there is none, or more than
    :data:`FAR_NEXT_UP_TO` (the index is unordered: only the schedulers' memory knows it cheaply)."""
    key = QueueKeys(queue).far
    if await far_count(client, queue) > FAR_NEXT_UP_TO:
        return None
    try:
        return min((int(v) for v in await client.hvals(key)), default=None)
    except ResponseError as exc:
        if not _old(exc):
            raise
        first = await client.zrange(key, 0, 0, withscores=True)
        return int(first[0][1]) if first else None
