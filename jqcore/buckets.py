"""Request budgets: a rate's text (``200/s``, ``10/min``) and the token bucket that spends it, a bucket per
key (:class:`Buckets`: per client address); the ``Retry-After`` of a refusal."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["Bucket", "Buckets", "Rate", "retry_after"]

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|second|m|min|minute|h|hour)s?\s*$")
_UNIT_S = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


@dataclass(frozen=True)
class Rate:
    """A request budget: ``count`` requests per ``per_s`` seconds (a burst of ``count`` at most)."""

    count: int
    per_s: float

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``"200/s"``, ``"10/min"``, ``"1000/h"``, ``"50/10s"``."""
        m = _RATE.match(text)
        if m is None or int(m.group(1)) <= 0 or m.group(2) == "0":
            raise ValueError(f"{text!r} is no rate: write COUNT/UNIT, e.g. 200/s, 10/min, 1000/h, 50/10s")
        return cls(int(m.group(1)), float(int(m.group(2) or 1) * _UNIT_S[m.group(3)]))

    def __str__(self) -> str:
        for unit, s in (("h", 3600), ("min", 60), ("s", 1)):
            if self.per_s == s:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.per_s:g}s"


@dataclass
class Bucket:
    """A token bucket: holds up to ``rate.count`` requests, refilled at ``count / per_s`` per second."""

    rate: Rate
    level: float = -1.0
    at: float = 0.0

    def _refill(self, now: float) -> float:
        per_s = self.rate.count / self.rate.per_s
        if self.level < 0:
            self.level, self.at = float(self.rate.count), now
        self.level = min(float(self.rate.count), self.level + (now - self.at) * per_s)
        self.at = now
        return per_s

    def take(self, now: float) -> float:
        """Spend one request: 0.0 when allowed, else the seconds until one will be."""
        per_s = self._refill(now)
        if self.level >= 1.0:
            self.level -= 1.0
            return 0.0
        return (1.0 - self.level) / per_s

    def wait_s(self, now: float) -> float:
        """What :meth:`take` would answer now, spending nothing."""
        per_s = self._refill(now)
        return 0.0 if self.level >= 1.0 else (1.0 - self.level) / per_s

    @property
    def full(self) -> bool:
        """Nothing spent that has not been refilled (as of the last call)."""
        return self.level < 0 or self.level >= self.rate.count


class Buckets:
    """A :class:`Bucket` of ``rate`` per key (a client address), at most ``max_keys`` of them: the keys
    come from requests, so the least recently used one is forgotten first (a forgotten key starts full)."""

    def __init__(self, rate: Rate, max_keys: int = 10_000) -> None:
        self.rate = rate
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def wait_s(self, key: str, now: float) -> float:
        """0.0 when ``key`` may spend one now, else the seconds until it may (nothing spent)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return 0.0
        self._buckets.move_to_end(key)
        wait = bucket.wait_s(now)
        if bucket.full:  # refilled: nothing to remember
            del self._buckets[key]
        return wait

    def take(self, key: str, now: float) -> float:
        """Spend one for ``key``: 0.0 when it had one, else the seconds until it will."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(self.rate)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(key)
        return bucket.take(now)


def retry_after(wait_s: float) -> str:
    """A ``Retry-After`` value: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(wait_s)))
