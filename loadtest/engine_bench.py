"""``./run bench engine``: the Redis engine alone, on its own throw-away Redis.

* enqueue_batch jobs/s (batches of 500);
* claim + complete jobs/s with 2 worker processes (batch claims of 50, completes in parallel);
* claim latency p50/p99 with 1k pending vs 1M pending (``--quick``: 1k vs 10k) — O(log n) claims;
* Redis commands/s in total with 100 idle waiting workers (the cost of waiting);
* delayed-job lateness p50/p99/max with the scheduler running (negative would mean early).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from hdrh.histogram import HdrHistogram

from jqcore.clock import now_ms
from jqcore.envelope import Envelope, new_envelope
from jqengine import Engine
from jqsched.timers import Timers
from loadtest.report import Report
from loadtest.stacks import redis_rounds

__all__ = ["drain", "run"]


def _jobs(queue: str, n: int, start: int = 0) -> list[Envelope]:
    t = now_ms()
    return [new_envelope(queue, "noop", {"i": i}, id=f"j{i}", at_ms=t) for i in range(start, start + n)]


async def _fill(engine: Engine, queue: str, n: int, batch: int = 500) -> float:
    started = time.perf_counter()
    for i in range(0, n, batch):
        await engine.enqueue_batch(_jobs(queue, min(batch, n - i), i))
    return n / (time.perf_counter() - started)


def _drain_worker(url: str, queue: str, result: Any) -> None:
    async def main() -> int:
        client = aioredis.Redis.from_url(url)
        engine, done = Engine(client), 0
        while True:
            claimed = await engine.jobs.claim(queue, 50)
            if not claimed:
                break
            await asyncio.gather(*(engine.jobs.complete(queue, (c.id, c.attempt, c.token)) for c in claimed))
            done += len(claimed)
        await client.aclose()
        return done

    result.put(asyncio.run(main()))


def drain(url: str, queue: str, n: int) -> float:
    """Claim (50 a call) and complete ``n`` jobs of ``queue`` with 2 worker processes; jobs/s."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_drain_worker, args=(url, queue, results)) for _ in range(2)]
    started = time.perf_counter()
    for p in procs:
        p.start()
    total = sum(results.get(timeout=600) for _ in procs)
    elapsed = time.perf_counter() - started
    for p in procs:
        p.join()
    if total != n:
        raise RuntimeError(f"drained {total} of {n}")
    return n / elapsed


async def _claim_latency(engine: Engine, queue: str, samples: int) -> tuple[float, float]:
    hist = HdrHistogram(1, 10_000_000, 3)
    for _ in range(samples):
        started = time.perf_counter_ns()
        [c] = await engine.jobs.claim(queue, 1)
        hist.record_value(max(1, (time.perf_counter_ns() - started) // 1000))
        await engine.jobs.complete(queue, (c.id, c.attempt, c.token))
    return hist.get_value_at_percentile(50) / 1000, hist.get_value_at_percentile(99) / 1000


async def _idle_cost(client: aioredis.Redis, url: str, prefix: str, workers: int, seconds: float) -> float:
    queues = [f"{prefix}.idle{i}" for i in range(workers)]
    blocking = aioredis.Redis.from_url(url, socket_timeout=90, max_connections=workers + 10)
    waiters = [asyncio.create_task(_wait_forever(Engine(blocking), q)) for q in queues]
    await asyncio.sleep(1.0)
    before = int((await client.info("stats"))["total_commands_processed"])
    await asyncio.sleep(seconds)
    after = int((await client.info("stats"))["total_commands_processed"])
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    await blocking.aclose()
    return (after - before - 1) / seconds


async def _wait_forever(engine: Engine, queue: str) -> None:
    while True:
        await engine.jobs.wait_for_work([queue], timeout_s=60)


async def _lateness(engine: Engine, queue: str, n: int, spread_ms: int) -> list[float]:
    base = now_ms() + 500
    envs = [new_envelope(queue, "noop", None, id=f"d{i}", run_at=base + i * spread_ms // n) for i in range(n)]
    due = {e.id: e.run_at or 0 for e in envs}
    late: list[float] = []
    async with Timers(engine, [queue], max_idle_s=30):
        await engine.enqueue_batch(envs)
        while len(late) < n:
            claimed = await engine.jobs.claim(queue, 100)
            for c in claimed:
                late.append(now_ms() - due[c.id])
                await engine.jobs.complete(queue, (c.id, c.attempt, c.token))
            if not claimed:
                await engine.jobs.wait_for_work([queue], timeout_s=30)
    return sorted(late)


def _pct(values: Sequence[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))]


async def _round(url: str, quick: bool, rep: int) -> dict[str, float]:
    client = aioredis.Redis.from_url(url, socket_timeout=90)
    engine, prefix = Engine(client), f"bench{os.getpid()}r{rep}"
    n_fill, big = (5_000, 10_000) if quick else (200_000, 1_000_000)
    out: dict[str, float] = {"enqueue_batch": await _fill(engine, f"{prefix}.fill", n_fill)}
    out["claim+complete, 2 processes"] = await asyncio.to_thread(drain, url, f"{prefix}.fill", n_fill)
    await _fill(engine, f"{prefix}.small", 1_000)
    out["claim p50 at 1k pending"], out["claim p99 at 1k pending"] = await _claim_latency(
        engine, f"{prefix}.small", 500
    )
    await _fill(engine, f"{prefix}.big", big, batch=1000)
    p50, p99 = await _claim_latency(engine, f"{prefix}.big", 500)
    out[f"claim p50 at {big // 1000}k pending"], out[f"claim p99 at {big // 1000}k pending"] = p50, p99
    out["redis commands/s, 100 idle workers"] = await _idle_cost(client, url, prefix, 100, 2 if quick else 30)
    late = await _lateness(engine, f"{prefix}.delayed", 100 if quick else 500, 2000 if quick else 5000)
    out["lateness min"], out["lateness p50"] = late[0], _pct(late, 0.5)
    out["lateness p99"], out["lateness max"] = _pct(late, 0.99), late[-1]
    await client.flushdb()
    await client.aclose()
    return out


UNITS = {
    "enqueue_batch": "jobs/s",
    "claim+complete, 2 processes": "jobs/s",
    "redis commands/s, 100 idle workers": "cmd/s",
}


def run(quick: bool = False) -> Report:
    reps = 1 if quick else 3
    report = Report("engine", {"reps": reps, "quick": quick})
    samples = redis_rounds("engine", reps, lambda url, rep: asyncio.run(_round(url, quick, rep)))
    for name, values in samples.items():
        report.add(name, UNITS.get(name, "ms"), values)
    report.notes.append("latencies in ms; lateness = claim time - run_at (negative would be early)")
    report.notes.append("claim latency measured one claim at a time on an otherwise idle Redis")
    return report
