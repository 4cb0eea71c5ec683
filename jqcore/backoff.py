"""The one retry-delay policy of jobq's jobs: a worker kind's ``Backoff`` and the engine's default for a
failure reported without a delay (``Retry()`` with no delay, a handler exception, a timeout, an HTTP
``fail`` without ``retry_delay_ms``).

The ceiling grows exponentially, ``min(cap_s, base_s * factor ** (attempt - 1))``. With ``jitter`` (the
default) the delay is drawn uniformly from ``[0, ceiling]`` ("full jitter"): jobs that failed together, say
because a dependency went down, come back spread over the whole window instead of as one thundering herd.
Without jitter the delay is exactly the ceiling.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays: ceiling ``min(cap_s, base_s * factor ** (attempt - 1))`` seconds; with ``jitter`` a
    uniform draw from ``[0, ceiling]`` (full jitter), without it exactly the ceiling."""

    base_s: float = 1.0
    factor: float = 2.0
    cap_s: float = 3600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if not (self.base_s >= 0 and self.factor >= 1 and 0 <= self.cap_s < math.inf):  # NaN fails too
            raise ValueError(f"Backoff needs base_s >= 0, factor >= 1 and a finite cap_s >= 0, not {self}")

    def ceiling_s(self, attempt: int) -> float:
        """The longest delay after failed attempt number ``attempt`` (1 = the first run), in seconds."""
        if self.base_s == 0:
            return 0.0
        try:
            grown = self.base_s * self.factor ** max(0, attempt - 1)
        except OverflowError:  # far beyond any cap (a float multiplication overflows to inf instead)
            return float(self.cap_s)
        return float(min(self.cap_s, grown))

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        """The delay before the next attempt after failed attempt ``attempt``, in milliseconds."""
        ceiling_ms = self.ceiling_s(attempt) * 1000
        if not self.jitter:
            return int(ceiling_ms)
        return int((rng or random).uniform(0, ceiling_ms))
