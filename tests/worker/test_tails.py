"""Tail calls (``worker.defer_to``) against the real Redis and Redis Cluster: a job completes with the job it
spawned, holding no slot or lease meanwhile; failures follow the parent's policy; a crash between the
cross-slot steps is repaired from the ``gdone`` outbox."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from jobq import Backoff, Cancel, Registry, current_job, defer_to
from jqcore.envelope import encode, new_envelope
from jqcore.events import parse
from jqcore.testsignal import enable_all
from jqengine import Engine, JobInfo
from worker.pool import Pool, PoolConfig


async def job(engine: Engine, queue: str, job_id: str) -> JobInfo:
    found = await engine.reads.get_job(queue, job_id)
    assert found is not None, f"{queue}/{job_id}"
    return found


async def test_a_chain_of_tail_calls_across_cluster_slots_completes_the_first_job_with_the_last_result(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    engine = Engine(redis_cluster)
    q1, q2 = f"{prefix}.tail-a", f"{prefix}.tail-b"  # different hash tags: different slots
    reg = Registry()
    release, third_started = asyncio.Event(), asyncio.Event()
    spawned: dict[str, str] = {}

    @reg.job("first", queue=q1)
    async def first(n: int) -> None:
        defer_to({"kind": "second", "args": {"n": n + 1}}, queue=q2)

    @reg.job("second", queue=q2)
    def second(n: int) -> None:  # a thread handler defers too
        spawned["second"] = current_job().id
        defer_to({"kind": "third", "args": {"n": n * 10}}, queue=q1)

    @reg.job("third", queue=q1)
    async def third(n: int) -> dict[str, int]:
        spawned["third"] = current_job().id
        third_started.set()
        await release.wait()
        return {"n": n}

    env = new_envelope(q1, "first", {"n": 4})
    await engine.enqueue_batch([env])
    # one slot: a parent that held its slot while waiting would leave none for its child
    async with Pool(
        reg, engine, PoolConfig([q1, q2], concurrency=1, idle_wait_s=0.2), redis=redis_cluster
    ) as pool:
        enable_all(pool.signals)
        await pool.signals.finished.wait_for(lambda f: f[1] == "deferred" and f[0] != env.id, 30)
        await asyncio.wait_for(third_started.wait(), 30)  # its handler runs (and waits on the test)
        parent, middle = await job(engine, q1, env.id), await job(engine, q2, spawned["second"])
        assert (parent.state, parent.tail, parent.lease_deadline) == ("deferred", f"{q2}/{middle.id}", None)
        assert (middle.state, middle.tail) == ("deferred", f"{q1}/{spawned['third']}")
        assert middle.tail_of == f"{q1}/{env.id}"
        assert (await engine.reads.depth(q1)).running == 1
        assert (await engine.reads.depth(q2)).running == 0
        release.set()
        await pool.signals.finished.wait_for(lambda f: f == (spawned["third"], "succeeded"), 30)
    parent, middle = await job(engine, q1, env.id), await job(engine, q2, spawned["second"])
    assert (parent.state, parent.result, parent.attempt) == ("completed", '{"n":50}', 1)
    assert (middle.state, middle.result) == ("completed", '{"n":50}')
    for q in (q1, q2):  # every hand-off done: the outboxes are empty
        assert not await redis_cluster.hlen(f"jobq:{{{q}}}:gdone")
    events = [parse(e.value).to for e in await engine.events.read(q1) if e.job_id == env.id]
    assert events == ["pending", "running", "deferred", "completed"]


@pytest.mark.usefixtures("scheduler")  # the retry is a delayed job: the scheduler promotes it
async def test_a_failed_child_fails_or_retries_its_parent_by_policy(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q = f"{prefix}.tail"
    reg = Registry()

    @reg.job("boom", queue=q)
    async def boom() -> None:
        raise Cancel("no such account")

    @reg.job("strict", queue=q, max_attempts=3)
    async def strict() -> None:
        defer_to({"kind": "boom"})

    @reg.job("patient", queue=q, max_attempts=3, backoff=Backoff(base_s=0, jitter=0))
    async def patient() -> str:
        if current_job().attempt == 1:
            defer_to({"kind": "boom"}, on_failure="retry")
        return "second try"

    strict_env, patient_env = new_envelope(q, "strict"), new_envelope(q, "patient")
    await engine.enqueue_batch([strict_env, patient_env])
    async with Pool(reg, engine, PoolConfig([q], concurrency=2, idle_wait_s=0.2), redis=redis) as pool:
        enable_all(pool.signals)
        await pool.signals.finished.wait_for(lambda f: f == (patient_env.id, "succeeded"), 30)
        first = await pool.signals.finished.wait_for(
            lambda f: f[0].startswith("tail@") and f[1] == "canceled"
        )
        await pool.signals.finished.wait_for(
            lambda f: f[0].startswith("tail@") and f[1] == "canceled" and f != first
        )
    failed, retried = await job(engine, q, strict_env.id), await job(engine, q, patient_env.id)
    assert (failed.state, failed.attempt) == ("errored", 1)  # never retried though it had attempts left
    assert failed.reason is not None
    assert "canceled: Cancel: no such account" in failed.reason
    assert (retried.state, retried.attempt, retried.result) == ("completed", 2, '"second try"')


async def test_a_crash_between_the_hand_offs_is_repaired_from_the_outbox(engine: Engine, prefix: str) -> None:
    """The worker dies after parking the parent (its child not enqueued), then after finishing the child
    (its report not handed on): the scheduler's repair round (``report_finished``) does both."""
    q1, q2 = f"{prefix}.tail-p", f"{prefix}.tail-c"
    await engine.enqueue_batch([parent := new_envelope(q1, "p")])
    (claimed,) = await engine.jobs.claim(q1, 1)
    child = new_envelope(q2, "c", [1], id="tail@crash1")
    owner = (claimed.id, claimed.attempt, claimed.token)
    await engine.core.run_script(  # defer.lua alone: the worker died before spawning the child
        "defer", engine.core.keys_for("defer", q1), [*owner, q2, child.id, encode(child), "fail", 0], None
    )
    assert await engine.reads.get_job(q2, child.id) is None
    assert (await job(engine, q1, parent.id)).state == "deferred"
    assert await engine.graphs.report_finished(q1) == 1  # the repair spawns it
    (running,) = await engine.jobs.claim(q2, 1)
    assert (running.id, (await job(engine, q2, child.id)).tail_of) == (child.id, f"{q1}/{parent.id}")
    await engine.jobs.complete(q2, (running.id, running.attempt, running.token), b'"done"')  # died: no report
    assert (await job(engine, q1, parent.id)).state == "deferred"
    assert await engine.graphs.report_finished(q2) == 1
    done = await job(engine, q1, parent.id)
    assert (done.state, done.result) == ("completed", '"done"')
    assert await engine.graphs.report_finished(q2) == 0  # handed on once


async def test_a_canceled_deferred_job_stays_canceled(engine: Engine, prefix: str) -> None:
    q = f"{prefix}.tail-x"
    await engine.enqueue_batch([parent := new_envelope(q, "p")])
    (claimed,) = await engine.jobs.claim(q, 1)
    child = new_envelope(q, "c", id="tail@cancel1")
    assert await engine.tails.defer(q, (claimed.id, claimed.attempt, claimed.token), child) == "deferred"
    assert (await engine.admin.cancel(q, parent.id, "operator")).outcome == "canceled"
    (running,) = await engine.jobs.claim(q, 1)
    assert running.id == child.id  # the child runs on
    await engine.jobs.complete(q, (running.id, running.attempt, running.token), b"1")
    assert await engine.graphs.report_finished(q, [child.id]) == 1  # handed on: it changes nothing
    got = await job(engine, q, parent.id)
    assert (got.state, got.result, got.reason) == ("canceled", None, "operator")
