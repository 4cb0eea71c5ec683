"""ServerClock: Redis's clock through the local monotonic clock, behind it by at most a round trip."""

from __future__ import annotations

import time

from jqcore.clock import SAMPLES, ServerClock, now_ms


class FakeRedis:
    """A server whose clock runs ``offset_s`` away from this host's (a host with a wrong clock)."""

    def __init__(self, offset_s: float) -> None:
        self.offset_s = offset_s
        self.calls = 0

    async def time(self) -> tuple[int, int]:
        self.calls += 1
        t = time.time() + self.offset_s
        return int(t), int((t % 1) * 1_000_000)


async def test_follows_the_server_not_the_host() -> None:
    server = FakeRedis(offset_s=-300.0)  # this host is five minutes ahead of Redis
    clock = ServerClock()
    assert abs(clock.now() - now_ms()) < 50  # before the first sync: the host's clock
    await clock.sync(server.time)
    true = (time.time() - 300.0) * 1000
    assert true - 50 < clock.now() <= true + 1  # never ahead of the server (1 ms: integer rounding)
    assert clock.skew_ms is not None
    assert -300_050 < clock.skew_ms < -299_950


async def test_asks_again_only_after_resync_s() -> None:
    server = FakeRedis(offset_s=0.0)
    clock = ServerClock(resync_s=3600)
    await clock.sync(server.time)
    await clock.sync(server.time)
    assert server.calls == SAMPLES
    await clock.sync(server.time, force=True)
    assert server.calls == 2 * SAMPLES
