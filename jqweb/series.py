"""The queues' rate history read back (:func:`jqruntime.stores.series.record` writes it): the dashboard's 24 h
charts and ``jobq status --watch``.

Rates are differences of consecutive samples: a gap (no scheduler for a while) spreads over its length, a
counter reset (the queue deleted and made anew) counts from zero.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from jqcore.keys import series_key
from jqengine import RedisClient
from jqruntime.stores.series import COUNTERS

__all__ = ["Rates", "combine", "growth", "outcomes", "read", "samples"]


async def samples(client: RedisClient, queue: str, since_ms: int) -> list[dict[str, int]]:
    """The queue's samples from ``since_ms`` on, oldest first."""
    raw = await client.zrangebyscore(series_key(queue), since_ms, "+inf")
    return [orjson.loads(r) for r in raw if isinstance(r, bytes | str)]


@dataclass
class Rates:
    """Per-second rates between consecutive samples, summed over queues, one point per bucket."""

    at_ms: list[int] = field(default_factory=list)
    enqueued: list[float] = field(default_factory=list)
    completed: list[float] = field(default_factory=list)
    failed: list[float] = field(default_factory=list)
    """Attempts that failed: retried plus errored (dead)."""
    wait_ms: list[float | None] = field(default_factory=list)
    """Mean start latency (ms) of the jobs claimed in the bucket; None when none was claimed."""
    totals: dict[str, int] = field(default_factory=dict)
    """How much each counter grew over every bucket (``failed``: retried plus errored attempts)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "at_ms": self.at_ms,
            "enqueued": self.enqueued,
            "completed": self.completed,
            "failed": self.failed,
            "wait_ms": self.wait_ms,
            "totals": self.totals,
        }


def _deltas(points: Sequence[dict[str, int]]) -> dict[int, tuple[float, dict[str, int]]]:
    """bucket → (seconds covered, counter increases) from consecutive samples of one queue."""
    out: dict[int, tuple[float, dict[str, int]]] = {}
    for before, after in itertools.pairwise(points):
        seconds = (after["t"] - before["t"]) / 1000
        if seconds <= 0:
            continue
        grown = {c: after.get(c, 0) - before.get(c, 0) for c in COUNTERS}
        if any(v < 0 for v in grown.values()):  # the counters started again from zero
            grown = {c: after.get(c, 0) for c in COUNTERS}
        out[after["t"]] = (seconds, grown)
    return out


def combine(per_queue: Mapping[str, Sequence[dict[str, int]]]) -> Rates:
    """Sum the queues' rates bucket by bucket."""
    buckets: dict[int, tuple[float, dict[str, int]]] = {}
    for points in per_queue.values():
        for t, (seconds, grown) in _deltas(points).items():
            have = buckets.get(t)
            if have is None:
                buckets[t] = (seconds, dict(grown))
            else:
                buckets[t] = (max(have[0], seconds), {c: have[1][c] + grown[c] for c in COUNTERS})
    rates = Rates(totals=dict.fromkeys((*COUNTERS, "failed"), 0))
    for t in sorted(buckets):
        seconds, grown = buckets[t]
        for c in COUNTERS:
            rates.totals[c] += grown[c]
        rates.totals["failed"] += grown["retried"] + grown["errored"]
        rates.at_ms.append(t)
        rates.enqueued.append(round(grown["enqueued"] / seconds, 3))
        rates.completed.append(round(grown["completed"] / seconds, 3))
        rates.failed.append(round((grown["retried"] + grown["errored"]) / seconds, 3))
        claimed = grown["claimed"]
        rates.wait_ms.append(round(grown["wait_ms"] / claimed, 2) if claimed > 0 else None)
    return rates


async def read(client: RedisClient, queues: Sequence[str], since_ms: int) -> Rates:
    """Rates over ``queues`` since ``since_ms`` (the sample just before it included, for the first
    difference)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.zrangebyscore(series_key(queue), since_ms, "+inf")
    raw = await pipe.execute()
    return combine({q: [orjson.loads(r) for r in rows] for q, rows in zip(queues, raw, strict=True)})


async def growth(client: RedisClient, queues: Sequence[str], counter: str, since_ms: int) -> dict[str, int]:
    """How much ``counter`` grew per queue between the first sample from ``since_ms`` on and the newest."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.zrangebyscore(series_key(queue), since_ms, "+inf", start=0, num=1)
        pipe.zrevrangebyscore(series_key(queue), "+inf", since_ms, start=0, num=1)
    raw = await pipe.execute()
    out: dict[str, int] = {}
    for i, queue in enumerate(queues):
        first, last = raw[2 * i], raw[2 * i + 1]
        if first and last:
            grown = orjson.loads(last[0]).get(counter, 0) - orjson.loads(first[0]).get(counter, 0)
            out[queue] = max(0, int(grown))
    return out


async def outcomes(client: RedisClient, queues: Sequence[str], since_ms: int) -> dict[str, dict[str, int]]:
    """Per queue, how much ``completed``, ``retried`` and ``errored`` grew since ``since_ms`` (the
    failure-rate alert's evidence, as ``jobq_queue_attempts_total`` is Prometheus's)."""
    grown = {c: await growth(client, queues, c, since_ms) for c in ("completed", "retried", "errored")}
    return {q: {c: grown[c].get(q, 0) for c in grown} for q in queues if any(q in g for g in grown.values())}
