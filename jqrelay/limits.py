"""Live rate limits from Consul KV, applied without restart (texts: :mod:`jqcore.rates`).

* per topic: ``<prefix>/rates/<topic>`` — every record of the topic passes the topic's limiter, which
  delays the whole topic (it limits every queue of it: there is no neighbour to protect);
* per queue: ``<prefix>/queue-rates/<queue>`` — a queue's jobs pass its limiter **without waiting**: what
  the limiter does not let through now, and every job of a paused queue, steps aside into the topic's
  holding lane (:mod:`jqrelay.lane`) and is drained at the queue's rate; the topic's other queues flow.

A bad value is logged and ignored (the previous limit stays). Each topic relay watches its topic key and
the queue-rates folder with blocking queries, so a change applies within one Consul answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import consul.aio

from jqcore import metrics
from jqcore.aio import cancel_and_wait, wait_event
from jqcore.log import get_logger
from jqcore.rates import Rate, parse_rate
from jqcore.testsignal import TestSignal
from jqrelay.backpressure import held
from jqruntime.lifecycle import Service

__all__ = ["LimitSignals", "Limiter", "QueueRateLimits", "RateLimit", "parse_rate"]

log = get_logger("jqrelay.limits")

PAUSED_RECHECK_S = 1.0
"""How often a paused acquire asks its caller whether to keep waiting (a stop, a lost term)."""


class Limiter:
    """A token bucket whose rate can change at any time (None: unlimited, 0: paused): ``burst`` tokens
    at most (default: one second's worth, at least 1), refilled continuously at the rate."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self.capacity = 1
        self._tokens = 0.0
        self._at = time.monotonic()
        self._changed = asyncio.Event()

    def set(self, rate: float | None, burst: int | None = None) -> bool:
        """Apply a new rate (and burst); False when it is the current one. A new limit starts with a full
        bucket (the burst it allows)."""
        capacity = burst if burst is not None else max(1, int(rate or 0))
        if rate == self.rate and capacity == self.capacity:
            return False
        self.rate, self.capacity = rate, capacity
        self._tokens, self._at = float(capacity), time.monotonic()
        self._changed.set()
        return True

    def _refill(self) -> None:
        now = time.monotonic()
        if self.rate:
            self._tokens = min(float(self.capacity), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def try_take(self, n: int) -> int:
        """How many of ``n`` jobs may pass now (taken from the bucket); never waits. Unlimited: all of
        them; paused: none."""
        if self.rate is None:
            return n
        if not self.rate:
            return 0
        self._refill()
        took = min(n, int(self._tokens))
        self._tokens -= took
        return took

    def wait_s(self, n: int) -> float:
        """Seconds until ``min(n, capacity)`` tokens are there (0 unlimited; inf paused)."""
        if self.rate is None:
            return 0.0
        if not self.rate:
            return float("inf")
        self._refill()
        return max(0.0, (min(n, self.capacity) - self._tokens) / self.rate)

    def batch_cap(self, wanted: int) -> int:
        """How many records to take next so one batch is about one second's worth at most."""
        if self.rate is None:
            return wanted
        return max(1, min(wanted, int(self.rate)))

    async def acquire(self, n: int, keep_waiting: Callable[[], bool] = lambda: True) -> bool:
        """Wait until ``n`` jobs may pass; False as soon as ``keep_waiting()`` says to give up. A pause
        (rate 0) waits for the next change, asking ``keep_waiting`` every :data:`PAUSED_RECHECK_S`."""
        left = n
        while left > 0:
            if self.rate is None:
                return True
            if not keep_waiting():
                return False
            if not self.rate:  # paused
                self._changed.clear()
                await wait_event(self._changed, PAUSED_RECHECK_S)
                continue
            left -= self.try_take(left)
            if left:
                await asyncio.sleep(min(PAUSED_RECHECK_S, max(0.001, self.wait_s(left))))
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
        await wait_event(self._loaded, 5)  # Consul away: start unlimited, apply when it answers

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
    """Every queue's limit under ``<prefix>/queue-rates/`` (one blocking query on the folder). Nothing
    here waits: the holding lane asks each queue's limiter how many of its jobs may pass now."""

    def __init__(self, client: consul.aio.Consul, folder: str, topic: str, wait_s: int = 5) -> None:
        super().__init__(client, folder.rstrip("/") + "/", f"{topic}:queues", wait_s, recurse=True)
        self.topic = topic
        self.limiters: dict[str, Limiter] = {}
        self.limits: dict[str, Rate] = {}
        """The limit in force per limited queue (as its text says)."""
        self.listeners: list[Callable[[], None]] = []
        """Called after an answer changed a limit (the holding lane's drain wakes up)."""

    def rates(self) -> dict[str, float]:
        return {q: lim.rate for q, lim in self.limiters.items() if lim.rate is not None}

    def limiter(self, queue: str) -> Limiter | None:
        """The queue's limiter; None while it is unlimited."""
        limiter = self.limiters.get(queue)
        return limiter if limiter is not None and limiter.rate is not None else None

    def paused(self, queue: str) -> bool:
        limiter = self.limiters.get(queue)
        return limiter is not None and limiter.rate == 0

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
        changed = False
        for queue, text in seen.items():
            try:
                limit = Rate.parse(text)
            except ValueError:
                log.error("ignoring invalid queue rate limit", queue=queue, value=text)
                continue
            limiter = self.limiters.setdefault(queue, Limiter())
            if limiter.set(limit.limit, limit.burst if limit.per_s is not None else None):
                changed = True
                metrics.RELAY_QUEUE_RATE_LIMIT.labels(queue).set(-1 if limit.limit is None else limit.limit)
                log.info("queue rate limit", topic=self.topic, queue=queue, limit=limit.describe())
            if limit.text:
                self.limits[queue] = limit
            else:
                self.limits.pop(queue, None)
        if changed:
            for listener in self.listeners:
                listener()
