"""Waiting without polling: workers block on a queue's wake list; the timers of a set of queues sleep
until the next due time (a delayed job's ``run_at``, a lease deadline, the next GC) or until a script
tells them an earlier one appeared. Idle pools and timers cost one blocking command per ``max_idle_s``.

Callers outside ``jqengine`` reach these through the engine (``engine.wait_for_work``,
``engine.wait_for_due``), never with a raw client; the timers that sleep on ``wait_for_due`` are the
scheduler service's (:mod:`jqsched.timers`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from jqengine.keys import QueueKeys
from jqengine.redisconn import RedisClient, text

__all__ = [
    "block_limit_s",
    "nudge",
    "wait_for_due",
    "wait_for_events",
    "wait_for_handoff",
    "wait_for_work",
    "wake_due",
]

REDIS_PY_DEFAULT_TIMEOUT_S = 5.0
NUDGE_TTL_MS = 600_000


async def wait_for_work(client: RedisClient, queues: Sequence[str], timeout_s: float) -> str | None:
    """Block until one of ``queues`` signals work; return that queue, or None after ``timeout_s``."""
    index = await _first_signal(client, [QueueKeys(q).wake for q in queues], timeout_s)
    return None if index is None else queues[index]


async def wait_for_handoff(client: RedisClient, queue: str, waiter: str, timeout_s: float) -> bytes | None:
    """Block on ``waiter``'s hand-off inbox and ``queue``'s wake list (one BLPOP: same slot): the
    hand-off message, ``b""`` for a wake token, or None after ``timeout_s``."""
    keys = QueueKeys(queue)
    reply = await client.blpop([keys.inbox(waiter), keys.wake], timeout=block_limit_s(client, timeout_s))
    if not reply:
        return None
    key, value = reply
    if text(key) == keys.wake:
        return b""
    return value.encode() if isinstance(value, str) else value


async def nudge(client: RedisClient, queue: str, waiter: str) -> None:
    """An empty hand-off message for ``waiter``: its blocking pop returns at once (see
    :func:`wait_for_handoff`); the inbox expires like one a hand-off filled."""
    inbox = QueueKeys(queue).inbox(waiter)
    await client.rpush(inbox, b"[]")
    await client.pexpire(inbox, NUDGE_TTL_MS)


async def wait_for_due(client: RedisClient, queues: Sequence[str], timeout_s: float) -> str | None:
    """Block until a script signals an earlier due time in one of ``queues`` (its ``sched`` token);
    return that queue, or None after ``timeout_s``."""
    index = await _first_signal(client, [QueueKeys(q).sched for q in queues], timeout_s)
    return None if index is None else queues[index]


async def wake_due(client: RedisClient, queue: str) -> None:
    """``queue``'s ``sched`` token, as ``lib/wake_scheduler.lua`` leaves it (one, however many signals)."""
    key = QueueKeys(queue).sched
    async with client.pipeline(transaction=False) as pipe:
        pipe.lpush(key, "1")
        pipe.ltrim(key, 0, 0)
        await pipe.execute()


async def _stop(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """End the per-key waits still running on a Cluster, each until it has ended. (A wait cancelled the
    moment its token arrived may still take that token: the claim that follows every wake claims from every
    queue, so only a token arriving in that instant is missed.)"""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)  # an error is not this wait's answer


async def _first_signal(client: RedisClient, keys: Sequence[str], timeout_s: float) -> int | None:
    """One BLPOP over all ``keys`` on a single Redis; on a Cluster the lists live in different slots, so
    each is waited on by its own command and the first answer wins. Returns the index of the key that
    answered, or None after ``timeout_s``."""
    if not keys:
        await asyncio.sleep(timeout_s)
        return None
    keys = list(keys)
    timeout_s = block_limit_s(client, timeout_s)
    if not isinstance(client, RedisCluster) or len(keys) == 1:
        reply = await client.blpop(keys, timeout=timeout_s)
        return keys.index(text(reply[0])) if reply else None
    tasks = [asyncio.ensure_future(client.blpop([k], timeout=timeout_s)) for k in keys]
    try:
        for done in asyncio.as_completed(tasks):
            reply = await done
            if reply:
                return keys.index(text(reply[0]))
        return None
    finally:
        await _stop(tasks)


async def wait_for_events(client: RedisClient, queues: Sequence[str], timeout_s: float) -> bool:
    """Block until one of ``queues`` has a lifecycle event in its stream (at once if one has already);
    False after ``timeout_s``. One XREAD over every stream on a single Redis, one per stream on a
    Cluster (first answer wins)."""
    if not queues:
        await asyncio.sleep(timeout_s)
        return False
    keys = [QueueKeys(q).events for q in queues]
    block_ms = max(1, int(block_limit_s(client, timeout_s) * 1000))
    if not isinstance(client, RedisCluster) or len(keys) == 1:
        return bool(await client.xread(dict.fromkeys(keys, "0-0"), count=1, block=block_ms))
    tasks = [asyncio.ensure_future(client.xread({k: "0-0"}, count=1, block=block_ms)) for k in keys]
    try:
        for done in asyncio.as_completed(tasks):
            if await done:
                return True
        return False
    finally:
        await _stop(tasks)


def block_limit_s(client: RedisClient, wanted_s: float) -> float:
    """``wanted_s`` capped below the client's socket timeout, so a blocking command never trips it
    (redis-py 8 defaults to a 5 s socket timeout; jobq's settings default to 35 s)."""
    kwargs = (
        client.connection_kwargs
        if isinstance(client, RedisCluster)
        else client.connection_pool.connection_kwargs
    )
    socket_timeout = kwargs.get(
        "socket_timeout", kwargs.get("orig_socket_timeout", REDIS_PY_DEFAULT_TIMEOUT_S)
    )
    if not socket_timeout:
        return wanted_s
    return max(0.01, min(wanted_s, float(socket_timeout) - 1.0))
