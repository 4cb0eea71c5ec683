"""Prefetch: a pool holds jobs beyond its concurrency and starts each the moment a slot frees — before the
finished job's round reached Redis; held jobs go back unrun (attempt refunded) at a stop, or when no slot
freed within half their lease."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from jqcore.envelope import new_envelope
from jqcore.events import parse
from jqengine import Engine
from tests.conftest import Eventually
from tests.worker.held import hold_rounds
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

pytestmark = pytest.mark.usefixtures("scheduler")


async def _enqueue(engine: Engine, queue: str, kind: str, n: int) -> list[str]:
    envs = [new_envelope(queue, kind, None) for _ in range(n)]
    await engine.enqueue_batch(envs)
    return [e.id for e in envs]


async def test_a_held_job_starts_while_the_finished_ones_round_is_on_its_way(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg, started = f"{prefix}.p", Registry(), asyncio.Queue[str]()

    @reg.job("quick", queue=q)
    async def quick() -> None:
        started.put_nowait(current_job().id)

    ids = await _enqueue(engine, q, "quick", 3)
    pool = Pool(reg, engine, PoolConfig([q], concurrency=1, prefetch=2), redis=redis)
    held = hold_rounds(pool)
    async with pool:
        first = await asyncio.wait_for(started.get(), 30)
        await asyncio.wait_for(held.arrived.wait(), 30)  # the first job's round waits at Redis's door ...
        second = await asyncio.wait_for(started.get(), 30)  # ... and the next job has started meanwhile
        third = await asyncio.wait_for(started.get(), 30)
        assert sorted([first, second, third]) == sorted(ids)
        assert [j.state for j in await engine.reads.get_jobs(q, ids) if j] == ["running"] * 3, (
            "no round got through"
        )
        held.gate.set()
    assert (
        sorted((j.state, j.attempt) for j in await engine.reads.get_jobs(q, ids) if j)
        == [("completed", 1)] * 3
    )


async def test_a_stop_releases_held_jobs_unrun_with_their_attempts_refunded(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg, running, go = f"{prefix}.p", Registry(), asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    @reg.job("slow", queue=q)
    async def slow() -> None:
        ran.append(current_job().id)
        running.set()
        await go.wait()

    ids = await _enqueue(engine, q, "slow", 4)
    pool = Pool(reg, engine, PoolConfig([q], concurrency=1, prefetch=3, grace_s=30), redis=redis)
    await pool.start()
    await asyncio.wait_for(running.wait(), 30)
    assert len(pool.in_flight) == 4, "one running, three held"
    cancel_fetcher = pool._cancel_fetcher

    async def let_the_running_job_end_once_stopping() -> None:  # the stop let go of the held jobs first
        assert pool._stopping
        go.set()
        await cancel_fetcher()

    pool._cancel_fetcher = let_the_running_job_end_once_stopping  # type: ignore[method-assign]
    await asyncio.wait_for(pool.stop(), 30)
    assert len(ran) == 1, "a held job never starts once the pool stops"
    states = sorted((j.state, j.attempt) for j in await engine.reads.get_jobs(q, ids) if j)
    assert states == [("completed", 1)] + [("pending", 0)] * 3


async def test_a_held_job_without_a_slot_within_half_its_lease_goes_back(
    engine: Engine, redis: aioredis.Redis, prefix: str, eventually: Eventually
) -> None:
    q, reg, go = f"{prefix}.p", Registry(), asyncio.Event()

    @reg.job("slow", queue=q)
    async def slow() -> None:
        if current_job().id == blocker:
            await go.wait()

    [blocker] = await _enqueue(engine, q, "slow", 1)
    [waiting] = await _enqueue(engine, q, "slow", 1)

    async def tos() -> list[str]:
        return [parse(e.value).to for e in await engine.events.read(q, 10_000) if e.job_id == waiting]

    async with Pool(reg, engine, PoolConfig([q], concurrency=1, prefetch=1, lease_ms=1_000), redis=redis):
        # held 0.5 s (half its 1 s lease) without a slot: released, unrun; held again, released again ...
        await eventually(tos, lambda seen: seen[:3] == ["pending", "running", "pending"], 30)
        go.set()
        await eventually(
            lambda: engine.reads.get_job(q, waiting), lambda j: j is not None and j.state == "completed"
        )
    got = await engine.reads.get_job(q, waiting)
    assert got is not None
    assert got.attempt == 1, "every hand-back refunded its attempt"


async def test_held_jobs_of_a_crashed_pool_come_back_by_lease(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    """A hard stop (as SIGKILL) writes nothing back: the held jobs' leases expire and another pool runs
    them (attempt 2: the crashed claim spent one, as for any claim lost with its pool)."""
    q, reg, running = f"{prefix}.p", Registry(), asyncio.Event()
    ran: list[tuple[str, int]] = []

    @reg.job("step", queue=q)
    async def step() -> None:
        ran.append((current_job().id, current_job().attempt))
        running.set()
        if current_job().attempt == 1:
            await asyncio.Event().wait()  # the first pool's job never ends: the crash takes it

    ids = await _enqueue(engine, q, "step", 3)
    pool = Pool(reg, engine, PoolConfig([q], concurrency=1, prefetch=2, lease_ms=1_000), redis=redis)
    await pool.start()
    await asyncio.wait_for(running.wait(), 30)
    await pool.hard_stop()
    assert [j.state for j in await engine.reads.get_jobs(q, ids) if j] == ["running"] * 3, (
        "all claimed by the pool"
    )
    async with Pool(reg, engine, PoolConfig([q], burst=True, concurrency=3), redis=redis) as second:
        await asyncio.wait_for(second.drained.wait(), 60)
    assert (
        sorted((j.state, j.attempt) for j in await engine.reads.get_jobs(q, ids) if j)
        == [("completed", 2)] * 3
    )
    assert len([a for _, a in ran if a == 1]) == 1, "the held jobs never ran in the crashed pool"
