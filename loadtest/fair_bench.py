"""``./run bench fairness``: what a fair queue (``fair_key``) costs, side by side with a plain one.

On its own throw-away Redis, each repetition fills two queues with the same jobs — 100 tenants, one of
them holding half the backlog — one plain, one with ``fair_key=tenant``, and drains each with 2 worker
processes (claims of 50, completes in parallel). Figures: jobs/s and Redis CPU per job (``INFO cpu``,
user + sys) for each, their ratios, and how many claims the 99 small tenants waited for their first job
(the backlog tenant's jobs come first in a plain queue).
"""

from __future__ import annotations

import asyncio
import os

import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import Envelope, new_envelope
from jqengine import Engine, QueueConfig
from loadtest.engine_bench import drain
from loadtest.report import Report
from loadtest.stacks import redis_rounds

__all__ = ["run"]

TENANTS = 100


def _jobs(queue: str, n: int) -> list[Envelope]:
    """Half the jobs belong to tenant t00 (enqueued first), the rest spread over t01..t99."""
    t = now_ms()
    big = [
        new_envelope(queue, "noop", {"i": i}, id=f"a{i:07d}", at_ms=t, meta={"tenant": "t00"})
        for i in range(n // 2)
    ]
    rest = [
        new_envelope(
            queue, "noop", {"i": i}, id=f"b{i:07d}", at_ms=t, meta={"tenant": f"t{1 + i % (TENANTS - 1):02d}"}
        )
        for i in range(n - n // 2)
    ]
    return big + rest


async def _cpu_s(client: aioredis.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _first_claims(engine: Engine, queue: str) -> int:
    """Claims (of one job) until every tenant had one: the wait of the last small tenant."""
    seen: set[str] = set()
    claims = 0
    while len(seen) < TENANTS:
        [job] = await engine.jobs.claim(queue, 1)
        await engine.jobs.complete(queue, (job.id, job.attempt, job.token))
        seen.add(job.envelope.meta["tenant"])
        claims += 1
    return claims


async def _round(url: str, n: int, rep: int) -> dict[str, float]:
    client = aioredis.Redis.from_url(url, socket_timeout=120)
    engine, out = Engine(client), dict[str, float]()
    for label, config in (("plain", QueueConfig()), ("fair", QueueConfig(fair_key="tenant"))):
        queue = f"bench{os.getpid()}r{rep}.{label}"
        await engine.admin.configure_queue(queue, config)
        jobs = _jobs(queue, n)
        for i in range(0, n, 1000):
            await engine.enqueue_batch(jobs[i : i + 1000])
        waited = await _first_claims(engine, queue)
        out[f"{label}: claims until all {TENANTS} tenants ran"] = waited
        before = await _cpu_s(client)
        out[f"{label}: drain, 2 processes"] = await asyncio.to_thread(drain, url, queue, n - waited)
        out[f"{label}: Redis CPU per job"] = (await _cpu_s(client) - before) * 1e6 / (n - waited)
    out["fair / plain: drain time"] = out["plain: drain, 2 processes"] / out["fair: drain, 2 processes"]
    out["fair / plain: Redis CPU per job"] = out["fair: Redis CPU per job"] / out["plain: Redis CPU per job"]
    await client.flushdb()
    await client.aclose()
    return out


UNITS: dict[str, str] = {"drain, 2 processes": "jobs/s", "Redis CPU per job": "µs", "claims until": "claims"}


def _unit(name: str) -> str:
    if name.startswith("fair / plain"):
        return "×"
    return next((u for key, u in UNITS.items() if key in name), "")


def run(quick: bool = False) -> Report:
    reps, n = (1, 20_000) if quick else (3, 200_000)
    report = Report("fairness", {"reps": reps, "quick": quick, "jobs": n, "tenants": TENANTS})
    samples = redis_rounds("fair", reps, lambda url, rep: asyncio.run(_round(url, n, rep)))
    for name, values in samples.items():
        report.add(name, _unit(name), values)
    report.notes.append(
        f"{n} jobs per queue, {TENANTS} tenants, t00 holding half (enqueued first); the same jobs in a plain"
        " queue and in one with fair_key=tenant; drain = claim 50 + complete, 2 processes"
    )
    return report
