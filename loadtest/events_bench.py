"""``./run bench events``: what lifecycle events cost Redis and the shipper, per job (issue 38, item 3).

On a throw-away Redis of its own (append-only, as jobq's stack runs it), a queue whose stream keeps every
event (``events_cap`` 10M), each phase timed by Redis's CPU (``INFO cpu``), the time its commands took
(``INFO commandstats``: steadier, without the append-only file and the replies' writes) and this
process's CPU:

* **enqueue**: jobs stored in calls of 2,000 (the relay's batches): one ``pending`` event each;
* **rounds**: a pool's rounds, one ``settle_claim`` call completing the last round's 50 jobs and claiming
  50 more: a ``running`` and a ``completed`` event each;
* **ship**: the shipper's side without Kafka — the oldest 1,000 events read (``Engine.events``), each
  one's Kafka value made and packed into the round's records (``jqcore.events.pack``, 6 partitions), then
  trimmed, until the stream is empty.

Also the stream's entries and its memory after the rounds (``MEMORY USAGE``). Events off (``events_cap``
0) is the same run's floor: what the events themselves cost is the difference.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqcore.events import pack
from jqengine import Engine, QueueConfig, Settle
from jqengine.keys import QueueKeys
from loadtest.report import Report
from loadtest.stacks import redis_rounds

__all__ = ["run", "run_in_rounds", "store"]

CALL = 2_000
"""Jobs per enqueue call (the relay's batch)."""
ROUND = 50
"""Jobs a pool's round completes and claims (a pool of concurrency 50)."""
SHIP = 1_000
"""Events the shipper reads at a time (``JOBQ_EVENTS_BATCH``'s default)."""
PARTITIONS = 6
"""The events topic's partitions (``JOBQ_EVENTS_PARTITIONS``' default): a round's records."""


async def _redis_cpu(client: aioredis.Redis) -> tuple[float, float]:
    """Redis's CPU seconds so far, and the seconds its commands took (``INFO commandstats``: the work
    itself, without the event loop, the replies' writes and the append-only file)."""
    cpu, stats = await client.info("cpu"), await client.info("commandstats")
    commands = sum(float(v["usec"]) for v in stats.values()) / 1e6
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), commands


class _Timer:
    """Redis's CPU, its commands' time and this process's CPU over a phase, per unit of work (µs)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client

    async def __aenter__(self) -> _Timer:
        (self.redis, self.commands), self.own = await _redis_cpu(self.client), time.process_time()
        return self

    async def __aexit__(self, *exc: object) -> None:
        redis, commands = await _redis_cpu(self.client)
        self.redis, self.commands = redis - self.redis, commands - self.commands
        self.own = time.process_time() - self.own

    def figures(self, phase: str, n: int) -> dict[str, float]:
        return {
            f"{phase}: Redis CPU": self.redis / n * 1e6,
            f"{phase}: Redis commands": self.commands / n * 1e6,
            f"{phase}: client CPU": self.own / n * 1e6,
        }


async def store(engine: Engine, queue: str, n: int) -> None:
    """``n`` no-op jobs into ``queue``, in calls of :data:`CALL` (the relay's batches)."""
    t = now_ms()
    for i in range(0, n, CALL):
        ids = range(i, min(n, i + CALL))
        await engine.enqueue_batch([new_envelope(queue, "noop", None, id=f"e{j}", at_ms=t) for j in ids])


async def run_in_rounds(engine: Engine, queue: str, n: int) -> None:
    """Run ``queue``'s ``n`` jobs as a pool's rounds do: one ``settle_claim`` call completing the last
    round's :data:`ROUND` jobs and claiming as many more."""
    done = 0
    _, claimed = await engine.jobs.settle_claim(queue, [], ROUND, lease_ms=60_000, worker="bench")
    while claimed:
        items = [Settle((c.envelope.id, c.attempt, c.token)) for c in claimed]
        _, claimed = await engine.jobs.settle_claim(queue, items, ROUND, lease_ms=60_000, worker="bench")
        done += len(items)
    if done != n:
        raise RuntimeError(f"rounds finished {done} of {n} jobs")


async def _one(url: str, queue: str, n: int, events: bool) -> dict[str, float]:
    client = aioredis.Redis.from_url(url, socket_timeout=120)
    engine = Engine(client)
    tag = "on" if events else "off"
    out: dict[str, float] = {}
    try:
        await engine.admin.configure_queue(queue, QueueConfig(events_cap=10_000_000 if events else 0))
        async with _Timer(client) as timer:
            await store(engine, queue, n)
        out |= timer.figures(f"enqueue, events {tag}", n)
        async with _Timer(client) as timer:
            await run_in_rounds(engine, queue, n)
        out |= timer.figures(f"rounds, events {tag}", n)
        if not events:
            return out
        stream = QueueKeys(queue).events
        out["stream entries per 1k jobs"] = int(await client.xlen(stream)) / n * 1000
        out["stream bytes per job"] = int(await client.memory_usage(stream, samples=0) or 0) / n
        shipped = 0
        async with _Timer(client) as timer:
            while batch := await engine.events.read(queue, SHIP):
                pack(((e.job_id, e.value) for e in batch), PARTITIONS)  # the Kafka records' values
                await engine.events.trim(queue, batch)
                shipped += len(batch)
        if shipped != 3 * n:
            raise RuntimeError(f"shipped {shipped} of {3 * n} events")
        out |= timer.figures("ship", shipped)
        return out
    finally:
        await client.aclose()


def _round(url: str, rep: int, n: int) -> dict[str, float]:
    async def both() -> dict[str, float]:
        off = await _one(url, f"evoff{rep}", n, events=False)
        return {**off, **await _one(url, f"evon{rep}", n, events=True)}

    return asyncio.run(both())


def run(quick: bool = False) -> Report:
    n, reps = (4_000, 1) if quick else (100_000, 3)
    report = Report("events", {"jobs": n, "reps": reps, "call": CALL, "round": ROUND, "ship": SHIP})
    samples = redis_rounds("events", reps, lambda url, rep: _round(url, rep, n))
    units: dict[str, Any] = {"stream entries per 1k jobs": "entries", "stream bytes per job": "bytes"}
    for name, values in samples.items():
        per = "event" if name.startswith("ship") else "job"
        report.add(name, units.get(name, f"µs CPU/{per}"), values)
    report.notes.append(
        f"{n:,} no-op jobs: enqueued in calls of {CALL:,}, run in rounds of {ROUND} (settle_claim), their "
        f"events read {SHIP:,} at a time and trimmed; a Redis of its own (append-only), events off then on"
    )
    return report
