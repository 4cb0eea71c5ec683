"""Batch handlers against the real Redis: per-item outcomes, an exception, a crash, a long batch's leases,
and the ``settle`` transition they write through."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from jqcore.envelope import new_envelope
from jqcore.testsignal import enable_all
from jqengine import Code, Engine, JobInfo, Settle
from worker.batch import BatchItem
from worker.pool import Pool, PoolConfig
from worker.registry import Backoff, Registry, current_job

pytestmark = pytest.mark.usefixtures("scheduler")  # retries and expired leases need the timers

FAST = Backoff(base_s=0.01, cap_s=0.02, jitter=False)


async def enqueue(engine: Engine, queue: str, kind: str, args: list[object]) -> list[str]:
    envs = [new_envelope(queue, kind, a) for a in args]
    await engine.enqueue_batch(envs)
    return [e.id for e in envs]


async def infos(engine: Engine, queue: str, ids: list[str]) -> list[JobInfo]:
    got = [await engine.reads.get_job(queue, i) for i in ids]
    assert all(g is not None for g in got)
    return [g for g in got if g is not None]


async def drain(reg: Registry, engine: Engine, redis: aioredis.Redis, queue: str, **kw: object) -> None:
    async with Pool(reg, engine, PoolConfig([queue], burst=True, **kw), redis=redis) as pool:  # type: ignore[arg-type]
        await asyncio.wait_for(pool.drained.wait(), 30)


async def test_per_item_outcomes_beside_single_jobs_in_one_queue(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.b", Registry()
    calls: list[list[tuple[int, int]]] = []

    @reg.job("rows", queue=q, batch=10, batch_wait_ms=50, max_attempts=2, backoff=FAST)
    async def rows(items: list[BatchItem]) -> None:
        calls.append([(item.args["n"], item.attempt) for item in items])
        for item in items:
            n = item.args["n"]
            if n % 4 == 0:
                item.complete(n * 10)
            elif n % 4 == 1 and item.attempt == 1:
                item.retry(0, "again")
            elif n % 4 == 2:
                item.fail("bad row", permanent=True)
            # n % 4 == 3 (and a retried row's second attempt): left alone, completed

    @reg.job("single", queue=q)
    async def single() -> str:
        return current_job().kind

    class Row(BaseModel):
        n: int

    @reg.job("sync_rows", queue=q, batch=5, payload=Row)
    def sync_rows(items: list[BatchItem]) -> None:  # a plain function: in the thread pool
        for item in items:
            item.complete(item.args.n + 100)

    ids = await enqueue(engine, q, "rows", [{"n": n} for n in range(8)])
    (one,) = await enqueue(engine, q, "single", [None])
    synced = await enqueue(engine, q, "sync_rows", [{"n": 1}, {"n": "not a number"}])
    await drain(reg, engine, redis, q, concurrency=2)
    assert sorted(calls[0]) == [(n, 1) for n in range(8)], "one call for the eight jobs"
    assert sorted(x for c in calls[1:] for x in c) == [(1, 2), (5, 2)], "the retried rows, attempt 2"
    got = await infos(engine, q, ids)
    assert [(g.state, g.attempt) for g in got] == [
        ("completed", 1),
        ("completed", 2),
        ("errored", 1),
        ("completed", 1),
    ] * 2
    assert [g.result for g in got[:4]] == ["0", None, None, None]
    assert got[4].result == "40"
    assert got[2].last_error == "bad row"
    assert {j.id for j in await engine.reads.dead_list(q)} == {ids[2], ids[6], synced[1]}
    assert [h["outcome"] for h in got[1].history] == ["failed", "completed"]
    assert "Retry: again" in (got[1].history[0]["error"] or "")
    assert ((await infos(engine, q, [one]))[0].result) == '"single"'
    good, bad = await infos(engine, q, synced)
    assert (good.state, good.result, bad.state) == ("completed", "101", "errored"), "bad args: permanent"
    assert "args do not match" in (bad.last_error or "")


async def test_an_exception_fails_every_item_then_they_retry(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.b", Registry()

    # one batch for all twelve: a retried item must never share a batch with a first attempt, or the
    # raise below fails it a second time (batches of 5 made that a matter of timing)
    @reg.job("rows", queue=q, batch=12, batch_wait_ms=20, max_attempts=3, backoff=FAST)
    async def rows(items: list[BatchItem]) -> None:
        if any(item.attempt == 1 for item in items):
            raise ValueError("the store is down")

    ids = await enqueue(engine, q, "rows", [{"n": n} for n in range(12)])
    await drain(reg, engine, redis, q)
    for got in await infos(engine, q, ids):
        assert (got.state, got.attempt) == ("completed", 2)
        assert [h["outcome"] for h in got.history] == ["failed", "completed"]
        assert "ValueError: the store is down" in (got.history[0]["error"] or "")


async def test_a_crashed_batch_comes_back_by_its_leases(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg, started = f"{prefix}.b", Registry(), asyncio.Event()

    @reg.job("rows", queue=q, batch=4, batch_wait_ms=10)
    async def stuck(items: list[BatchItem]) -> None:
        started.set()
        await asyncio.Event().wait()

    ids = await enqueue(engine, q, "rows", [{"n": n} for n in range(4)])
    # two queues: no hand-off registration, which could hand the jobs back to the dead pool once more
    pool = Pool(reg, engine, PoolConfig([q, f"{q}.other"], lease_ms=1000), redis=redis)
    await pool.start()
    await asyncio.wait_for(started.wait(), 30)
    await pool.hard_stop()  # as after SIGKILL: nothing written back
    assert {g.state for g in await infos(engine, q, ids)} == {"running"}

    reg2, seen = Registry(), asyncio.Event()

    @reg2.job("rows", queue=q, batch=4, batch_wait_ms=10)
    async def rows(items: list[BatchItem]) -> None:
        for item in items:
            item.complete(item.attempt)
        seen.set()

    await drain(reg2, engine, redis, q)
    assert seen.is_set()
    assert [(g.state, g.result) for g in await infos(engine, q, ids)] == [("completed", "2")] * 4


async def test_a_long_batch_keeps_every_lease(engine: Engine, redis: aioredis.Redis, prefix: str) -> None:
    q, reg = f"{prefix}.b", Registry()
    pool = Pool(reg, engine, PoolConfig([q], burst=True, lease_ms=1500), redis=redis)
    enable_all(pool.signals)

    @reg.job("rows", queue=q, batch=3, batch_wait_ms=10)
    async def rows(items: list[BatchItem]) -> None:
        rounds = dict.fromkeys((item.id for item in items), 0)

        def three(extended: list[str]) -> bool:
            for job_id in extended:
                if job_id in rounds:
                    rounds[job_id] += 1
            return min(rounds.values()) >= 3

        await pool.signals.extended.wait_for(three)  # outlives three leases of every item

    ids = await enqueue(engine, q, "rows", [{"n": n} for n in range(3)])
    async with pool:
        await asyncio.wait_for(pool.drained.wait(), 30)
    assert [(g.state, g.attempt) for g in await infos(engine, q, ids)] == [("completed", 1)] * 3


async def test_settle_checks_each_lease_and_answers_a_repeat_the_same(engine: Engine, prefix: str) -> None:
    q = f"{prefix}.b"
    await enqueue(engine, q, "rows", [1, 2, 3])
    a, b, c = await engine.jobs.claim(q, 3)
    items = [
        Settle((a.id, a.attempt, a.token), b"1"),
        Settle((b.id, b.attempt, b.token), None, "boom", 60_000),
        Settle((c.id, c.attempt, "not-the-token"), b"3"),
    ]
    first = await engine.jobs.settle(q, items)
    assert [code for code, _ in first] == [Code.OK, Code.RETRY, Code.STALE]
    assert first[1][1] > 0
    assert await engine.jobs.settle(q, items[:2]) == first[:2], "a write sent again gets its first answer"
    got = await infos(engine, q, [a.id, b.id, c.id])
    assert [(g.state, g.result) for g in got] == [("completed", "1"), ("delayed", None), ("running", None)]


async def test_a_stop_releases_the_jobs_still_gathering(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.b", Registry()

    @reg.job("rows", queue=q, batch=100, batch_wait_ms=600_000)
    async def rows(items: list[BatchItem]) -> None:
        raise AssertionError("a batch that never filled must not run")

    ids = await enqueue(engine, q, "rows", [{"n": n} for n in range(3)])
    pool = Pool(reg, engine, PoolConfig([q], lease_ms=900), redis=redis)
    enable_all(pool.signals)
    await pool.start()
    kept: set[str] = set()

    def all_kept(extended: list[str]) -> bool:  # claimed and gathering: the keeper holds their leases
        kept.update(extended)
        return kept >= set(ids)

    await pool.signals.extended.wait_for(all_kept, 30)
    assert {g.state for g in await infos(engine, q, ids)} == {"running"}
    await pool.stop()
    assert [(g.state, g.attempt) for g in await infos(engine, q, ids)] == [("pending", 0)] * 3
