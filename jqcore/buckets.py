"""Request budgets: a rate's text (``200/s``, ``10/min``) and the token bucket that spends it; the
``Retry-After`` of a refusal."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["Bucket", "Rate", "retry_after"]

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

    def take(self, now: float) -> float:
        """Spend one request: 0.0 when allowed, else the seconds until one will be."""
        per_s = self.rate.count / self.rate.per_s
        if self.level < 0:
            self.level, self.at = float(self.rate.count), now
        self.level = min(float(self.rate.count), self.level + (now - self.at) * per_s)
        self.at = now
        if self.level >= 1.0:
            self.level -= 1.0
            return 0.0
        return (1.0 - self.level) / per_s


def retry_after(wait_s: float) -> str:
    """A ``Retry-After`` value: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(wait_s)))
