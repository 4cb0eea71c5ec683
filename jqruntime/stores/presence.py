"""Processes announce themselves (gateways, worker pools) so ``jobq status`` can count them: a heartbeat
into a sorted set per role every few seconds; members older than ``stale_s`` no longer count."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

from jqcore.aio import cancel_and_wait
from jqcore.clock import now_ms
from jqcore.keys import presence_key
from jqengine import RedisClient
from jqruntime.lifecycle import Service

__all__ = ["Presence", "count_alive", "process_name", "seen"]


def process_name(extra: str = "") -> str:
    return f"{socket.gethostname()}:{os.getpid()}" + (f":{extra}" if extra else "")


class Presence(Service):
    def __init__(self, client: RedisClient, role: str, name: str, every_s: float = 5.0) -> None:
        super().__init__()
        self.client, self.key, self.name, self.every_s = client, presence_key(role), name, every_s
        self._task: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._beat(), name=f"presence:{self.key}")

    async def _beat(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # Redis away: status will show us missing, nothing else
                await self.client.zadd(self.key, {self.name: now_ms()})
            await asyncio.sleep(self.every_s)

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)
        with contextlib.suppress(Exception):
            await self.client.zrem(self.key, self.name)


async def count_alive(client: RedisClient, role: str, stale_s: float = 20.0) -> list[str]:
    since = now_ms() - int(stale_s * 1000)
    return [
        m.decode() if isinstance(m, bytes) else str(m)
        for m in await client.zrangebyscore(presence_key(role), since, "+inf")
    ]


async def seen(client: RedisClient, role: str, name: str, forget_s: float = 3600.0) -> None:
    """Someone else's heartbeat, noted for it (an HTTP worker seen claiming at a gateway); members silent
    for ``forget_s`` are dropped in the same round trip, so names chosen by clients cannot pile up."""
    now = now_ms()
    async with client.pipeline(transaction=False) as pipe:
        pipe.zadd(presence_key(role), {name: now})
        pipe.zremrangebyscore(presence_key(role), "-inf", now - int(forget_s * 1000))
        await pipe.execute()
