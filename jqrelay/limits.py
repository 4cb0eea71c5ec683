"""Live rate limits from Consul KV, applied without restart. Limiting only delays consumption.

* per topic: ``<prefix>/rates/<topic>`` — every record of the topic passes the topic's limiter;
* per queue: ``<prefix>/queue-rates/<queue>`` — jobs of that queue also pass the queue's limiter.

A value is jobs per second; absent or empty: unlimited; ``0``: paused. A bad value is logged and ignored
(the previous limit stays). Each topic relay watches its topic key and the queue-rates folder with
blocking queries, so a change applies within one Consul answer.

A queue limit delays the batch that carries the queue's jobs, and with it the other queues of the same
partitions (offsets are committed per partition, in order — a job is never skipped or parked). To limit a
queue without slowing its neighbours, route it to a topic of its own (``JOBQ_ROUTES``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import consul.aio
from aiolimiter import AsyncLimiter

from jqcore import metrics
from jqcore.aio import cancel_and_wait
from jqcore.log import get_logger
from jqcore.rates import parse_rate
from jqcore.testsignal import TestSignal
from jqrelay.backpressure import held
from jqruntime.lifecycle import Service

__all__ = ["LimitSignals", "Limiter", "QueueRateLimits", "RateLimit", "parse_rate"]

log = get_logger("jqrelay.limits")

PAUSED_RECHECK_S = 1.0
"""How often a paused acquire asks its caller whether to keep waiting (a stop, a lost term)."""


class Limiter:
    """A token bucket whose rate can change at any time (None: unlimited, 0: paused)."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self._bucket: AsyncLimiter | None = None
        self._changed = asyncio.Event()

    def set(self, rate: float | None) -> bool:
        """Apply a new rate; False when it is the current one."""
        if rate == self.rate:
            return False
        self.rate = rate
        if not rate:
            self._bucket = None
        else:  # below 1/s: one job per 1/rate seconds
            self._bucket = AsyncLimiter(rate, 1.0) if rate >= 1 else AsyncLimiter(1, 1 / rate)
        self._changed.set()
        return True

    def batch_cap(self, wanted: int) -> int:
        """How many records to take next so one batch is about one second's worth at most."""
        if self.rate is None:
            return wanted
        return max(1, min(wanted, int(self.rate)))

    async def acquire(self, n: int, keep_waiting: Callable[[], bool] = lambda: True) -> bool:
        """Wait until ``n`` jobs may pass; False as soon as ``keep_waiting()`` says to give up.

        Large ``n`` is taken in chunks of the bucket's size; a pause (rate 0) waits for the next change,
        asking ``keep_waiting`` every :data:`PAUSED_RECHECK_S`."""
        left = n
        while left > 0:
            if self.rate is None:
                return True
            if not keep_waiting():
                return False
            bucket = self._bucket
            if bucket is None:  # paused
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), PAUSED_RECHECK_S)
                continue
            chunk = min(left, int(bucket.max_rate))
            await bucket.acquire(chunk)
            left -= chunk
        return True


async def _blocking_get(
    client: consul.aio.Consul, key: str, index: int | None, wait_s: int, *, recurse: bool
) -> tuple[int | None, Any]:
    return await client.kv.get(key, index=index, wait=f"{wait_s}s", recurse=recurse)  # type: ignore[no-any-return]


def _text(entry: dict[str, Any] | None) -> str:
    raw = (entry or {}).get("Value")
    return raw.decode().strip() if raw else ""


@dataclass
class LimitSignals:
    """What a rate-limit watch reports to a test that listens (:mod:`jqcore.testsignal`)."""

    applied: TestSignal[object] = field(default_factory=lambda: TestSignal("rate limits applied"))
    """A Consul answer was applied: the limit in force after it (a topic's rate, or queue → rate)."""
    held: TestSignal[str] = field(default_factory=lambda: TestSignal("rate limit holds a batch"))
    """A batch waits on the limit's tokens: the topic (its name) or a limited queue (the queue's name)."""


class _Watch(Service):
    """A blocking-query loop on one Consul key (or folder); ``_on`` gets every answer."""

    def __init__(self, client: consul.aio.Consul, key: str, name: str, wait_s: int, recurse: bool) -> None:
        super().__init__()
        self.client, self.key, self.name, self.wait_s, self.recurse = client, key, name, wait_s, recurse
        self._loaded = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.signals = LimitSignals()

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name=f"rate:{self.name}")
        with contextlib.suppress(TimeoutError):  # Consul away: start unlimited, apply when it answers
            await asyncio.wait_for(self._loaded.wait(), 5)

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _watch(self) -> None:
        index: int | None = None
        while True:
            try:
                index, data = await _blocking_get(
                    self.client, self.key, index, self.wait_s, recurse=self.recurse
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("rate limit watch failed", key=self.key, error=repr(exc))
                await asyncio.sleep(1)
                continue
            self._on(data)
            self._loaded.set()
            self.signals.applied.signal(self._in_force())

    def _on(self, data: Any) -> None:
        raise NotImplementedError

    def _in_force(self) -> object:
        """The limit in force (what :attr:`signals` reports)."""
        raise NotImplementedError


class RateLimit(_Watch):
    """The topic's limit (``<prefix>/rates/<topic>``)."""

    def __init__(self, client: consul.aio.Consul, key: str, topic: str, wait_s: int = 5) -> None:
        super().__init__(client, key, topic, wait_s, recurse=False)
        self.topic = topic
        self.limiter = Limiter()

    @property
    def rate(self) -> float | None:
        return self.limiter.rate

    def _on(self, data: Any) -> None:
        self._apply(_text(data))

    def _in_force(self) -> object:
        return self.rate

    def _apply(self, text: str) -> None:
        try:
            rate = parse_rate(text)
        except ValueError:
            log.error("ignoring invalid rate limit", topic=self.topic, key=self.key, value=text)
            return
        if self.limiter.set(rate):
            metrics.RELAY_RATE_LIMIT.labels(self.topic).set(-1 if rate is None else rate)
            log.info("rate limit", topic=self.topic, jobs_per_s=rate)

    def batch_cap(self, wanted: int) -> int:
        return self.limiter.batch_cap(wanted)

    async def acquire(self, n: int, keep_waiting: Callable[[], bool] = lambda: True) -> bool:
        if self.limiter.rate is None:
            return True
        self.signals.held.signal(self.topic)  # a limited topic: this batch waits for its tokens
        with held(self.topic, "rate_limit"):
            return await self.limiter.acquire(n, keep_waiting)


class QueueRateLimits(_Watch):
    """Every queue's limit under ``<prefix>/queue-rates/`` (one blocking query on the folder)."""

    def __init__(self, client: consul.aio.Consul, folder: str, topic: str, wait_s: int = 5) -> None:
        super().__init__(client, folder.rstrip("/") + "/", f"{topic}:queues", wait_s, recurse=True)
        self.topic = topic
        self.limiters: dict[str, Limiter] = {}
        self.waiting: str | None = None
        """The queue whose limiter the relay is waiting on right now (for status and tests)."""

    def rates(self) -> dict[str, float]:
        return {q: lim.rate for q, lim in self.limiters.items() if lim.rate is not None}

    def _in_force(self) -> object:
        return self.rates()

    def _on(self, data: Any) -> None:
        seen: dict[str, str] = {}
        for entry in data or []:
            queue = str(entry["Key"])[len(self.key) :]
            if queue and "/" not in queue:
                seen[queue] = _text(entry)
        for queue in set(self.limiters) - set(seen):  # key deleted: unlimited again
            seen[queue] = ""
        for queue, text in seen.items():
            try:
                rate = parse_rate(text)
            except ValueError:
                log.error("ignoring invalid queue rate limit", queue=queue, value=text)
                continue
            limiter = self.limiters.setdefault(queue, Limiter())
            if limiter.set(rate):
                metrics.RELAY_QUEUE_RATE_LIMIT.labels(queue).set(-1 if rate is None else rate)
                log.info("queue rate limit", topic=self.topic, queue=queue, jobs_per_s=rate)

    def batch_cap(self, wanted: int) -> int:
        """While any queue is limited, batches stay about one second of the slowest positive limit."""
        positive = [r for r in self.rates().values() if r > 0]
        return max(1, min(wanted, int(min(positive)))) if positive else wanted

    async def acquire(self, queues: Iterable[str], keep_waiting: Callable[[], bool] = lambda: True) -> bool:
        """Wait until every limited queue lets its jobs of this batch pass (queues in any order)."""
        for queue, n in Counter(queues).items():
            limiter = self.limiters.get(queue)
            if limiter is None:
                continue
            self.waiting = queue
            self.signals.held.signal(queue)
            try:
                with held(self.topic, "queue_rate_limit"):
                    if not await limiter.acquire(n, keep_waiting):
                        return False
            finally:
                self.waiting = None
        return True
