"""Redis memory backpressure (the future work Slack named): slow down, then stop, relaying as Redis's
memory headroom shrinks, so a Redis near ``maxmemory`` never refuses a relay write and workers keep
draining. Enqueues into Kafka are untouched: Kafka absorbs the backlog until Redis has room again.

Below ``slow_at`` (fraction of maxmemory) the relay runs free; between ``slow_at`` and ``stop_at`` it
pauses before each batch for a time growing linearly up to one second; at ``stop_at`` or above it stops
until usage is back under ``slow_at`` (hysteresis, so it does not flap). Without ``maxmemory`` there is
no limit to approach and the guard stays open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore import metrics
from jqcore.log import get_logger
from jqcore.testsignal import TestSignal
from jqengine import RedisClient, memory_info

__all__ = ["GuardSignals", "MemoryGuard", "held"]

log = get_logger("jqrelay.backpressure")


@contextmanager
def held(topic: str, reason: str) -> Iterator[None]:
    """Count a batch of ``topic`` held for ``reason`` while the block runs (``jobq_relay_held_batches``
    meanwhile, its duration into ``jobq_relay_held_seconds_total``)."""
    gauge = metrics.child(metrics.RELAY_HELD, topic, reason)
    gauge.inc()
    started = time.monotonic()
    try:
        yield
    finally:
        gauge.dec()
        metrics.child(metrics.RELAY_HELD_TIME, topic, reason).inc(time.monotonic() - started)


@dataclass
class GuardSignals:
    """What the memory guard reports to a test that listens (:mod:`jqcore.testsignal`)."""

    stopped: TestSignal[bool] = field(default_factory=lambda: TestSignal("memory guard stopped"))
    """Relaying stopped at the stop mark (True) or resumed under the slow mark (False)."""
    unreachable: TestSignal[float] = field(default_factory=lambda: TestSignal("memory guard unreachable"))
    """A memory sample found Redis away (seconds since it first did), relaying held meanwhile."""


class MemoryGuard:
    def __init__(
        self,
        client: RedisClient,
        slow_at: float,
        stop_at: float,
        sample_s: float = 0.5,
        signals: GuardSignals | None = None,
    ) -> None:
        self.client, self.slow_at, self.stop_at, self.sample_s = client, slow_at, stop_at, sample_s
        self.usage = 0.0
        self.maxmemory = 0
        """Redis's ``maxmemory`` at the last sample (0: no limit)."""
        self.used_bytes = 0
        """Redis's ``used_memory`` at the last sample."""
        self.added = 0
        """Bytes the relay projects it wrote since (``jqrelay.budgets``): reset by each sample."""
        self.stopped = False
        self.signals = signals if signals is not None else GuardSignals()
        self._sampled_at = 0.0
        self._unreachable_since: float | None = None

    async def _sample(self) -> float:
        now = time.monotonic()
        if now - self._sampled_at >= self.sample_s:
            info = await memory_info(self.client)
            metrics.redis_memory(info)
            used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
            self.usage = used / limit if limit else 0.0
            self.maxmemory, self.used_bytes, self.added = limit, used, 0
            self._sampled_at = now
        return self.usage

    async def _sample_or_wait(self, topic: str) -> float | None:
        """The usage, or None after a backoff pause while Redis does not answer (logged once per outage:
        the relay holds its batch and commits nothing meanwhile, as with a failed write)."""
        try:
            usage = await self._sample()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            now = time.monotonic()
            if self._unreachable_since is None:
                self._unreachable_since = now
                log.warning("Redis unreachable; relaying waits for it", error=repr(exc))
            self.signals.unreachable.signal(round(now - self._unreachable_since, 3))
            with held(topic, "redis"):
                await asyncio.sleep(min(5.0, 0.1 + (now - self._unreachable_since) / 4))
            return None
        if self._unreachable_since is not None:
            log.info("Redis reachable again", after_s=round(time.monotonic() - self._unreachable_since, 1))
            self._unreachable_since = None
        return usage

    async def wait_for_room(self, keep_waiting: Callable[[], bool] = lambda: True, topic: str = "") -> bool:
        """True when a batch may be written (sleeping first if memory is getting tight); False as soon as
        ``keep_waiting()`` says to give up (the term ended, the relay stops) while waiting. The waits are
        counted as ``topic``'s batch held (:func:`held`)."""
        while True:
            if not keep_waiting():
                return False
            usage = await self._sample_or_wait(topic)
            if usage is None:
                continue
            if self.stopped and usage < self.slow_at:
                log.info("Redis memory back under the slow mark; relaying again", usage=round(usage, 3))
                self.stopped = False
                self.signals.stopped.signal(False)
            if not self.stopped and usage >= self.stop_at:
                log.warning("Redis memory at the stop mark; relaying paused", usage=round(usage, 3))
                self.stopped = True
                self.signals.stopped.signal(True)
            if self.stopped:
                with held(topic, "memory"):
                    await asyncio.sleep(self.sample_s)
                continue
            if usage > self.slow_at:
                with held(topic, "memory"):
                    await asyncio.sleep((usage - self.slow_at) / (self.stop_at - self.slow_at))
            return True
