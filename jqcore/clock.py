"""Clocks in integer milliseconds since the epoch: every timestamp jobq stores, compares or sends (job times,
lease deadlines, heartbeats) is one of these, so there is exactly one way to read each clock.

* :func:`now_ms` — this host's wall clock (what a gateway stamps on an envelope, what a log line shows).
* :class:`ServerClock` — Redis's clock as this process sees it: the engine passes it to every transition,
  so leases, due times and expiries are judged by one clock however wrong the callers' own clocks are
  (the fault suite's ``clock-skew`` scenario: a worker five minutes behind, a scheduler five minutes ahead).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["RESYNC_S", "SAMPLES", "ServerClock", "now_ms"]

RESYNC_S = 30.0
"""How often a :class:`ServerClock` asks Redis for its time again."""
SAMPLES = 3
"""``TIME`` round trips per sync (the tightest is kept)."""


def now_ms() -> int:
    """Milliseconds since the epoch (integer, from ``time.time_ns`` so no float rounding)."""
    return time.time_ns() // 1_000_000


def _monotonic_ms() -> float:
    return time.monotonic_ns() / 1_000_000


class ServerClock:
    """Redis's clock read through this process's monotonic clock: ``TIME`` once (again every ``resync_s``),
    then ``monotonic + offset`` — immune to this host's wall clock being wrong or stepping; behind Redis's
    by at most a round trip, never ahead. Until the first :meth:`sync` it answers the local wall clock."""

    def __init__(self, resync_s: float = RESYNC_S) -> None:
        self.resync_ms = resync_s * 1000
        self._offset: float | None = None
        self._synced_at = float("-inf")

    def now(self) -> int:
        if self._offset is None:
            return now_ms()
        return int(_monotonic_ms() + self._offset)

    async def sync(self, read_time: Callable[[], Awaitable[Any]], *, force: bool = False) -> None:
        """Ask Redis for its time (``read_time``: a client's ``time``, answering ``(seconds, microseconds)``)
        when the last answer is older than ``resync_s`` (or ``force``). Redis read its clock at some moment
        of the round trip; taking the round trip's *end* as that moment makes this clock run a little
        behind Redis's, never ahead: a due job may be promoted a few ms late, never early, and a lease is
        judged expired a little late, never early. The best of :data:`SAMPLES` round trips is kept."""
        if not force and _monotonic_ms() - self._synced_at < self.resync_ms:
            return
        best = float("-inf")
        for _ in range(SAMPLES):
            seconds, micros = await read_time()
            back = _monotonic_ms()
            best = max(best, int(seconds) * 1000 + int(micros) / 1000 - back)
        self._offset = best
        self._synced_at = _monotonic_ms()
