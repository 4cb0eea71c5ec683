"""Waiting without polling: workers block on a queue's wake list; the scheduler sleeps until the next
due time (a delayed job's ``run_at`` or a lease deadline) or until a script tells it an earlier one
appeared. An idle pool or scheduler costs one blocking command per ``max_idle_s``.

Callers outside ``jqcore.state`` reach these through the engine (``engine.wait_for_work``,
``engine.scheduler``), never with a raw client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from redis.asyncio.cluster import RedisCluster

from jqcore.clock import now_ms
from jqcore.keys import QueueKeys
from jqcore.lifecycle import Service
from jqcore.log import get_logger
from jqcore.redisconn import RedisClient

if TYPE_CHECKING:
    from jqcore.state.engine import Engine

__all__ = ["Scheduler", "block_limit_s", "wait_for_work"]

log = get_logger("jqcore.scheduler")

REDIS_PY_DEFAULT_TIMEOUT_S = 5.0
PRECISE_SLEEP_S = 0.15
"""Waits shorter than this are local sleeps: more precise than a Redis blocking timeout."""


async def wait_for_work(client: RedisClient, queues: Sequence[str], timeout_s: float) -> str | None:
    """Block until one of ``queues`` signals work; return that queue, or None after ``timeout_s``.

    One BLPOP over all wake lists on a single Redis; on a Cluster the lists live in different slots, so
    each queue is waited on by its own command and the first answer wins.
    """
    keys = [QueueKeys(q).wake for q in queues]
    timeout_s = block_limit_s(client, timeout_s)
    if not isinstance(client, RedisCluster) or len(keys) == 1:
        reply = await client.blpop(keys, timeout=timeout_s)
        return queues[keys.index(_text(reply[0]))] if reply else None
    tasks = [asyncio.ensure_future(client.blpop([k], timeout=timeout_s)) for k in keys]
    try:
        for done in asyncio.as_completed(tasks):
            reply = await done
            if reply:
                return queues[keys.index(_text(reply[0]))]
        return None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Scheduler(Service):
    """Promotes due delayed jobs, reaps expired leases and collects garbage for some queues.

    Any number may run at once (every step is one atomic script); each queue has its own loop, which
    sleeps in Redis until the earliest due time, so promotion is never early and rarely late by more
    than a blocking-command round trip.
    """

    def __init__(
        self,
        engine: Engine,
        queues: Sequence[str],
        *,
        max_idle_s: float = 5.0,
        gc_every_s: float = 60.0,
        batch: int = 1000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        super().__init__()
        self.engine, self.queues = engine, list(queues)
        self.max_idle_s, self.gc_every_ms, self.batch, self.clock = (
            max_idle_s,
            int(gc_every_s * 1000),
            batch,
            clock,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    async def _start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(q), name=f"scheduler:{q}") for q in self.queues]

    async def _stop(self) -> None:
        self._stopping = True  # redis-py may turn a cancellation into ConnectionError: the loop checks this
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _is_stopping(self) -> bool:
        return self._stopping

    async def _loop(self, queue: str) -> None:
        next_gc = 0
        while not self._is_stopping():
            try:
                next_gc = await self._step(queue, next_gc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: log, back off, keep going
                if self._is_stopping():
                    return
                log.warning("scheduler step failed", queue=queue, error=repr(exc))
                await asyncio.sleep(1.0)

    async def _step(self, queue: str, next_gc: int) -> int:
        now = self.clock()
        promoted, next_due = await self.engine.promote_due(queue, self.batch, now_ms=now)
        reaped, next_deadline = await self.engine.reap_expired(queue, self.batch, now_ms=now)
        if now >= next_gc:
            await self.engine.gc(queue, self.batch, now_ms=now)
            next_gc = now + self.gc_every_ms
        if promoted >= self.batch or reaped >= self.batch:
            return next_gc
        due = [t for t in (next_due, next_deadline + 1 if next_deadline >= 0 else -1, next_gc) if t >= 0]
        timeout_s = min(self.engine.block_limit_s(self.max_idle_s), (min(due) - self.clock()) / 1000)
        if timeout_s > PRECISE_SLEEP_S:
            # Redis times blocked clients out at its own tick (~100 ms at hz 10): wake a little early and
            # finish the wait below with a precise local sleep. An earlier due time wakes us at once.
            await self.engine.wait_for_due(queue, timeout_s - PRECISE_SLEEP_S)
        elif timeout_s > 0:
            await asyncio.sleep(timeout_s)
        return next_gc
