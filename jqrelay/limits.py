"""Live rate limits per topic from Consul KV (``<prefix>/rates/<topic>``: jobs per second; absent or
empty: unlimited; ``0``: paused). A blocking query per topic applies a change without restart; a bad
value is logged and ignored (the previous limit stays). Limiting only delays consumption."""

from __future__ import annotations

import asyncio
import contextlib

import consul.aio
from aiolimiter import AsyncLimiter

from jqcore import metrics
from jqcore.lifecycle import Service, cancel_and_wait
from jqcore.log import get_logger

__all__ = ["RateLimit"]

log = get_logger("jqrelay.limits")


class RateLimit(Service):
    def __init__(self, client: consul.aio.Consul, key: str, topic: str, wait_s: int = 5) -> None:
        super().__init__()
        self.client, self.key, self.topic, self.wait_s = client, key, topic, wait_s
        self.rate: float | None = None
        self._limiter: AsyncLimiter | None = None
        self._changed = asyncio.Event()
        self._loaded = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name=f"rate:{self.topic}")
        with contextlib.suppress(TimeoutError):  # Consul away: start unlimited, apply when it answers
            await asyncio.wait_for(self._loaded.wait(), 5)

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _watch(self) -> None:
        index: int | None = None
        while True:
            try:
                index, entry = await self.client.kv.get(self.key, index=index, wait=f"{self.wait_s}s")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("rate limit watch failed", topic=self.topic, error=repr(exc))
                await asyncio.sleep(1)
                continue
            raw = (entry or {}).get("Value")
            self._apply(raw.decode().strip() if raw else "")
            self._loaded.set()

    def _apply(self, text: str) -> None:
        try:
            rate = float(text) if text else None
            if rate is not None and rate < 0:
                raise ValueError("negative")
        except ValueError:
            log.error("ignoring invalid rate limit", topic=self.topic, key=self.key, value=text)
            return
        if rate == self.rate:
            return
        self.rate = rate
        if not rate:
            self._limiter = None
        else:  # below 1/s: one job per 1/rate seconds
            self._limiter = AsyncLimiter(rate, 1.0) if rate >= 1 else AsyncLimiter(1, 1 / rate)
        metrics.RELAY_RATE_LIMIT.labels(self.topic).set(-1 if rate is None else rate)
        log.info("rate limit", topic=self.topic, jobs_per_s=rate)
        self._changed.set()

    def batch_cap(self, wanted: int) -> int:
        """How many records to take next so one acquire never exceeds the limiter's capacity."""
        if self.rate is None:
            return wanted
        return max(1, min(wanted, int(self.rate)))

    async def acquire(self, n: int) -> None:
        """Wait until ``n`` jobs may pass (forever while paused; wakes when the limit changes)."""
        while True:
            if self.rate is None:
                return
            if self.rate == 0:
                self._changed.clear()
                await self._changed.wait()
                continue
            limiter = self._limiter
            assert limiter is not None
            await limiter.acquire(min(n, limiter.max_rate))
            return
