"""Wake-ups instead of polling, the scheduler's timing, and claims at maxmemory."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import Envelope
from jqcore.settings.servers import RedisSettings
from jqengine import STEP_HORIZON_MS, Engine, RedisMemoryFull, connect
from jqsched.timers import Timers
from jqstack.manager import Endpoints
from tests.conftest import Eventually

Job = Callable[..., Envelope]


async def test_enqueue_wakes_a_waiting_worker(engine: Engine, q: str, job: Job) -> None:
    other = f"{q}.other"
    waiter = asyncio.create_task(engine.jobs.wait_for_work([other, q], timeout_s=30))
    # the BLPOP may be sent before or after the enqueue: either way the wake token is waiting for it
    await engine.enqueue_batch([job(q, id="a", at_ms=now_ms())])
    assert await asyncio.wait_for(waiter, 30) == q
    assert await engine.jobs.wait_for_work([q], timeout_s=0.05) is None


@pytest.mark.cluster
async def test_each_wake_of_a_second_queue_ends_the_wait_while_the_first_stays_idle(
    endpoints: Endpoints, q: str, job: Job
) -> None:
    """A pool of two queues whose first is idle, woken by the second again and again, on a Cluster
    client made as the services make theirs (its socket timeout puts redis-py's connection set-up under
    ``asyncio.wait_for``). Each queue's wait is its own BLPOP and the idle one is cancelled when the other
    answers; on Python 3.11 a cancel that met the idle queue's fresh connection being set up was lost, so
    every other wake was seen only when the idle queue's wait ran out (a fault run's exclusive queue ran
    one job per key per 30 s). The waits here run 60 s: each must end with its wake, long before."""
    if not endpoints.redis_cluster_nodes:
        pytest.skip("no Redis Cluster in this stack")
    client = connect(RedisSettings(url=f"redis://{endpoints.redis_cluster_nodes[0]}/0", cluster=True))
    engine = Engine(client)
    idle = f"{q}.idle"
    try:
        for n in range(6):
            await engine.enqueue_batch([job(q, id=f"w{n}", at_ms=now_ms())])
            woken = await asyncio.wait_for(engine.jobs.wait_for_work([idle, q], timeout_s=60), 20)
            assert woken == q, f"wake {n}"
            [claimed] = await engine.jobs.claim(q, 1)
            await engine.jobs.complete(q, (claimed.id, claimed.attempt, claimed.token))
            await engine.jobs.wait_for_work([q], timeout_s=0.01)  # the completion's token, if any
    finally:
        await client.aclose()


async def test_scheduler_promotes_delayed_jobs_never_early(engine: Engine, q: str, job: Job) -> None:
    run_at = now_ms() + 400
    async with Timers(engine, [q], max_idle_s=30):
        await engine.enqueue_batch([job(q, id="later", run_at=run_at, at_ms=now_ms())])
        assert await engine.jobs.wait_for_work([q], timeout_s=30) == q
        woke = now_ms()
        [claimed] = await engine.jobs.claim(q, 1)
    assert claimed.id == "later"
    assert woke >= run_at


async def test_scheduler_reaps_an_expired_lease(engine: Engine, q: str, job: Job) -> None:
    await engine.enqueue_batch([job(q, id="a", at_ms=now_ms())])
    [first] = await engine.jobs.claim(q, 1, lease_ms=300)
    await engine.jobs.wait_for_work([q], timeout_s=0.01)  # drain the enqueue's wake token
    async with Timers(engine, [q], max_idle_s=30):
        assert await engine.jobs.wait_for_work([q], timeout_s=30) == q
        [again] = await engine.jobs.claim(q, 1)
    assert (again.id, again.attempt) == ("a", 2)
    assert now_ms() >= first.lease_deadline_ms


async def test_a_queue_handed_to_another_scheduler_is_woken_there(
    endpoints: Endpoints, redis: aioredis.Redis, prefix: str, job: Job, eventually: Eventually
) -> None:
    """Schedulers hand a queue over when a member joins or leaves. The one that gave it up went on
    waiting on the queue's token until its idle wait ended, took the token a delayed job moved in
    meanwhile sent, and dropped it; its new keeper stepped the queue only at its horizon (30 s): in the
    scheduler bench a queue's jobs started 25 s late, one run in two. (One Redis: the wait is watched
    in its ``blocked_clients``.)"""
    client, q = connect(RedisSettings(url=endpoints.redis_url or "")), f"{prefix}.handed"
    engine = Engine(client)

    async def blocked() -> int:
        return int((await redis.info("clients"))["blocked_clients"])

    before = await blocked()
    try:
        async with Timers(engine, [q], max_idle_s=60) as giver, Timers(engine, [], max_idle_s=60) as keeper:
            await eventually(blocked, lambda n: n > before, timeout_s=30)  # the giver waits on the token
            keeper.signals.stepped.enable()
            giver.set_queues([])
            keeper.set_queues([q])
            await keeper.signals.stepped.wait_for(lambda step: step.queue == q, timeout_s=30)
            run_at = now_ms() + 300
            await engine.enqueue_batch([job(q, id="soon", run_at=run_at, at_ms=now_ms())])
            assert await engine.jobs.wait_for_work([q], timeout_s=20) == q, "not promoted: the token was lost"
            assert [c.id for c in await engine.jobs.claim(q, 1)] == ["soon"]
    finally:
        await client.aclose()


async def test_a_due_time_wakes_the_scheduler_only_within_its_step_horizon(
    engine: Engine, q: str, job: Job
) -> None:
    """A claim into an empty running set, a delayed job into an empty delayed set: a token for the
    scheduler only when the due time comes before its next step could read it (issue 58: at a trickle
    every claim woke it for a whole step)."""
    far = STEP_HORIZON_MS + 60_000
    await engine.enqueue_batch([job(q, id=i, at_ms=now_ms()) for i in ("long", "short")])
    await engine.enqueue_batch([job(q, id="later", run_at=now_ms() + far, at_ms=now_ms())])
    await engine.jobs.claim(q, 1, lease_ms=far)
    assert await engine.timers.wait_for_due([q], timeout_s=0.05) is None
    await engine.jobs.claim(q, 1, lease_ms=2_000)  # earlier than the running set's earliest, and soon
    assert await engine.timers.wait_for_due([q], timeout_s=5) == q
    await engine.enqueue_batch([job(q, id="soon", run_at=now_ms() + 2_000, at_ms=now_ms())])
    assert await engine.timers.wait_for_due([q], timeout_s=5) == q
    # and the scheduler steps a queue within the horizon however far its due times are (its next GC: 60 s)
    idle, now = f"{q}.idle", now_ms()
    await engine.enqueue_batch([job(idle, id="x", run_at=now + far, at_ms=now)])
    assert await Timers(engine, [idle], clock=lambda: now)._step(idle, now) == now + STEP_HORIZON_MS


async def test_claims_work_at_maxmemory_while_enqueue_is_refused(
    redis: aioredis.Redis, q: str, job: Job
) -> None:
    engine = Engine(redis)
    await engine.enqueue_batch([job(q, id=f"j{i}", at_ms=now_ms()) for i in range(20)])
    used = int((await redis.info("memory"))["used_memory"])
    await redis.config_set("maxmemory", used)
    try:
        with pytest.raises(RedisMemoryFull) as info:
            await engine.enqueue_batch([job(q, id="more", args={"pad": "x" * 100_000}, at_ms=now_ms())])
        assert info.value.retriable
        claimed = await engine.jobs.claim(q, 20)
        assert len(claimed) == 20
        for c in claimed:
            await engine.jobs.complete(q, (c.id, c.attempt, c.token))
    finally:
        await redis.config_set("maxmemory", 0)
    await engine.enqueue_batch([job(q, id="more", at_ms=now_ms())])
