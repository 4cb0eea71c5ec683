"""ServerClock against the real Redis: Redis's clock through the local monotonic clock, behind it by at
most a round trip, never ahead; one ``TIME`` sync per ``resync_s``. (A process whose wall clock is
wrong is the fault suite's ``clock-skew`` scenario: libfaketime on a real worker and scheduler.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from jqcore.clock import SAMPLES, ServerClock, now_ms


async def _redis_ms(redis: aioredis.Redis) -> float:
    seconds, micros = await redis.time()
    return seconds * 1000 + micros / 1000


async def test_follows_redis_never_ahead_of_it(redis: aioredis.Redis) -> None:
    clock = ServerClock()
    await clock.sync(redis.time)
    before = await _redis_ms(redis)
    ours = clock.now()
    after = await _redis_ms(redis)
    assert ours <= after + 1  # never ahead of Redis (1 ms: integer rounding)
    assert ours >= before - 50  # behind by at most a round trip (generous on a loaded machine)
    skew_ms = ours - now_ms()  # Redis runs on this host: its clock and ours agree up to the round trip
    assert abs(skew_ms) < 5_000


async def test_asks_redis_again_only_after_resync_s(redis: aioredis.Redis) -> None:
    calls = 0

    def counted(read: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        async def call() -> Any:
            nonlocal calls
            calls += 1
            return await read()

        return call

    clock = ServerClock(resync_s=3600)
    await clock.sync(counted(redis.time))
    await clock.sync(counted(redis.time))
    assert calls == SAMPLES
    await clock.sync(counted(redis.time), force=True)
    assert calls == 2 * SAMPLES
