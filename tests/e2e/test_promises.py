"""Promises across the whole path (HTTP → Kafka → relay → Redis → pools) on the real stack: the dedup
policies as documented, and a rolling deploy that never burns a job of a kind an old pool lacks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jqcore.testsignal import enable_all
from jqengine import QueueConfig, reads
from worker.pool import Pool, PoolConfig
from worker.registry import Registry

pytestmark = pytest.mark.usefixtures("scheduler")  # pools run no timers: the service does

Eventually = Callable[..., Awaitable[Any]]


async def job_state(path: Any, job_id: str) -> reads.JobInfo | None:
    return await path.engine.reads.get_job(path.queue, job_id)


def has(state: str, completed: int = 0) -> Callable[[reads.JobInfo | None], bool]:
    def ok(info: reads.JobInfo | None) -> bool:
        if info is None or info.state != state:
            return False
        return completed == 0 or sum(h["outcome"] == "completed" for h in info.history) >= completed

    return ok


async def relayed(path: Any, n: int) -> reads.JobInfo | None:
    """The job ``same`` once the relay read ``n`` records of this test in all."""
    await path.relay.relays[0].signals.batch.wait_for(lambda c: c.get("read", 0) >= n)
    return await job_state(path, "same")


async def run_once(path: Any, registry: Registry) -> None:
    """Drain the queue with a burst pool."""
    pool = Pool(registry, path.engine, PoolConfig([path.queue], concurrency=4, burst=True), redis=path.redis)
    async with pool:
        await asyncio.wait_for(pool.drained.wait(), 60)


async def test_dedup_active_reruns_a_finished_id_and_finished_policy_drops_it_visibly(path: Any) -> None:
    runs: list[str] = []
    registry = Registry()

    @registry.job("p.work", queue=path.queue)
    async def work(tag: str) -> None:
        runs.append(tag)

    await path.client.enqueue_one(path.queue, "p.work", {"tag": "first"}, id="same")
    assert has("pending")(await relayed(path, 1))
    await path.client.enqueue_one(path.queue, "p.work", {"tag": "while-queued"}, id="same")
    info = await relayed(path, 2)
    assert info is not None
    assert info.duplicates == 1
    await run_once(path, registry)
    assert runs == ["first"], "a duplicate while queued never runs"

    # default policy ('active'): the same id enqueued after it finished is a new run, not a silent drop
    await path.client.enqueue_one(path.queue, "p.work", {"tag": "again"}, id="same")
    assert has("pending")(await relayed(path, 3))
    await run_once(path, registry)
    assert runs == ["first", "again"]

    # policy 'finished': within the window a re-enqueue is dropped, counted and visible on the job
    await path.engine.admin.configure_queue(
        path.queue, QueueConfig(dedup="finished", dedup_window_ms=3_600_000)
    )
    await path.client.enqueue_one(path.queue, "p.work", {"tag": "dropped"}, id="same")
    seen = await relayed(path, 4)
    assert seen is not None
    assert seen.duplicates >= 1
    assert seen.state == "completed"
    stats = await path.engine.reads.queue_stats(path.queue)
    assert stats["duplicates"] >= 2
    assert stats["reopened"] == 1
    assert runs == ["first", "again"]


async def test_a_pool_without_the_kind_hands_it_back_and_a_pool_with_it_runs_it(path: Any) -> None:
    old, new = Registry(), Registry()
    ran: list[int] = []

    @old.job("deploy.old", queue=path.queue)
    async def old_kind() -> None:
        return None

    @new.job("deploy.new", queue=path.queue)
    async def new_kind(n: int) -> None:
        ran.append(n)

    old_pool = Pool(old, path.engine, PoolConfig([path.queue], unknown_kind_retry_ms=200), redis=path.redis)
    new_pool = Pool(new, path.engine, PoolConfig([path.queue]), redis=path.redis)
    enable_all(old_pool.signals, new_pool.signals)
    async with old_pool:
        await path.client.enqueue_one(path.queue, "deploy.new", {"n": 1}, id="rolled")
        await old_pool.signals.finished.wait_for(lambda f: f == ("rolled", "handed_back"))
        handed = await job_state(path, "rolled")
        assert handed is not None
        assert handed.handed_back_since is not None
        assert handed.attempt == 0, "handing back spends no attempt"
        async with new_pool:
            await new_pool.signals.finished.wait_for(lambda f: f == ("rolled", "succeeded"), 60)
            done = await job_state(path, "rolled")
            assert has("completed")(done)
            assert done is not None
    assert ran == [1]
    assert done.attempt == 1
    assert any(h["outcome"] == "handed_back" for h in done.history)
    stats = await path.engine.reads.queue_stats(path.queue)
    assert stats["handed_back"] >= 1
