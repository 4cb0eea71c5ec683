"""The wall clock in integer milliseconds since the epoch: every timestamp jobq stores, compares or sends
(job times, lease deadlines, heartbeats) is one of these, so there is exactly one way to read it."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch (integer, from ``time.time_ns`` so no float rounding)."""
    return time.time_ns() // 1_000_000
