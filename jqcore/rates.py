"""The one rule for a live rate limit's text (Consul KV: written by ``PATCH /v1/queues/{queue}``,
``jobq queue rate|pause|resume`` and the dashboard, read by the relays).

A queue's limit (``<prefix>/queue-rates/<queue>``)::

    ""  or  "unlimited"          no limit (the key is deleted)
    "50"  "50/s"  "3000/m"  "100/h"   jobs per second (per minute, per hour)
    "50/s burst 200"             ... with a burst of 200 jobs (default: one second's worth, at least 1)
    "paused"  or  "0"            held: its jobs wait in the topic's holding lane
    "paused 50/s burst 200"      held, and limited so once resumed

A topic's limit (``<prefix>/rates/<topic>``) takes the same texts but ``burst`` and a pause with a rate.
Anything else is refused: the gateway, the CLI and the dashboard answer 400 ``rate_invalid``, the relay
logs it and keeps the previous limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["MAX_BURST", "Rate", "parse_rate"]

MAX_BURST = 1_000_000
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_AMOUNT = re.compile(r"^(?P<n>[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)(?:/(?P<unit>[smh]))?$")


@dataclass(frozen=True, slots=True)
class Rate:
    """A queue's live limit: ``per_s`` jobs a second (None: unlimited), ``burst`` jobs at once (None: one
    second's worth, at least 1) and ``paused`` (its jobs are held whatever the rate)."""

    per_s: float | None = None
    burst: int | None = None
    paused: bool = False

    @classmethod
    def parse(cls, text: str) -> Rate:
        """The limit a KV text (or a request's) says; raises ValueError naming what is wrong."""
        words = text.strip().lower().split()
        paused = bool(words) and words[0] in ("paused", "0")
        if paused:
            words = words[1:]
        per_s: float | None = None
        burst: int | None = None
        if words[:1] == ["unlimited"]:
            words = words[1:]
        elif words and words[0] != "burst":
            per_s = _amount(words.pop(0))
        if words[:1] == ["burst"]:
            if len(words) != 2 or not words[1].isdigit() or not 1 <= int(words[1]) <= MAX_BURST:
                raise ValueError(f"burst must be a whole number of jobs from 1 to {MAX_BURST}: {text!r}")
            if per_s is None:
                raise ValueError(f"a burst needs a rate: {text!r}")
            burst, words = int(words[1]), []
        if words:
            raise ValueError(
                "a rate is 'unlimited', 'paused' or jobs per second ('50', '50/s', '3000/m', '100/h'),"
                f" optionally with 'burst N': not {text!r}"
            )
        if per_s == 0:  # "0" with nothing before it is a pause (the text of earlier builds)
            return cls(None, None, True)
        return cls(per_s, burst, paused)

    @property
    def limit(self) -> float | None:
        """Jobs per second the relay lets pass now: None unlimited, 0 paused."""
        return 0.0 if self.paused else self.per_s

    @property
    def capacity(self) -> int:
        """The bucket's size: the burst, else one second's worth (at least 1)."""
        if self.burst is not None:
            return self.burst
        return max(1, int(self.per_s or 0))

    @property
    def text(self) -> str:
        """The canonical text (what is kept in Consul; ``""``: unlimited, the key deleted)."""
        parts = ["paused"] if self.paused else []
        if self.per_s is not None:
            parts.append(f"{self.per_s:g}/s")
            if self.burst is not None:
                parts.append(f"burst {self.burst}")
        return " ".join(parts)

    def describe(self) -> str:
        """For people: ``unlimited``, ``paused``, ``50/s``, ``50/s burst 200 (paused)``."""
        if self.per_s is None:
            return "paused" if self.paused else "unlimited"
        said = self.text.removeprefix("paused ")
        return f"{said} (paused)" if self.paused else said

    def as_dict(self) -> dict[str, object]:
        return {
            "limit": self.text or "unlimited",
            "per_s": self.per_s,
            "burst": self.burst,
            "paused": self.paused,
        }


def _amount(word: str) -> float:
    m = _AMOUNT.match(word)
    if m is None:
        raise ValueError(f"not a rate: {word!r} (jobs per second: '50', '50/s', '3000/m', '100/h')")
    per_s = float(m["n"]) / _UNITS[m["unit"] or "s"]
    if not math.isfinite(per_s):
        raise ValueError(f"not a finite rate: {word!r}")
    return per_s


def parse_rate(text: str) -> float | None:
    """A limit's jobs per second: None unlimited, 0 paused (``Rate.parse(text).limit``); ``unlimited`` and
    ``""`` are the same. Raises ValueError for a text that is no rate."""
    return Rate.parse(text).limit
