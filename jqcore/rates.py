"""The one rule for a live rate limit's text (Consul KV, written by the dashboard, read by the relays).

``""`` (or an absent key): unlimited; ``0``: paused; a positive finite number: jobs per second. Anything
else is refused: the dashboard answers 400, the relay logs it and keeps the previous limit.
"""

from __future__ import annotations

__all__ = ["parse_rate"]


def parse_rate(text: str) -> float | None:
    """``""`` → None (unlimited); a non-negative number → jobs/s; anything else raises ValueError."""
    if not text:
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 <= rate < float("inf"):  # also refuses NaN
        raise ValueError(f"not a non-negative finite rate: {text!r}")
    return rate
