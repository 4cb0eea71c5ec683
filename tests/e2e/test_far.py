"""The far-future tier on the real stack: a job due beyond the horizon (shortened here to 3 s so the
test stays quick) is kept in the compacted schedule topic with only an index entry in Redis; GET answers
``scheduled``; DELETE unschedules it; Redis losing everything (FLUSHDB) loses no far-future job: it comes
back from the topic and runs on time, and the unscheduled one never runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from jqcore.client import JobqClient
from jqcore.clock import now_ms
from jqcore.routing import Route, RoutingSettings
from jqcore.settings import FarSettings
from jqcore.state import Engine
from jqrelay.main import RelayService
from jqsched.service import SchedulerService
from jqstack.manager import Endpoints
from kafkagate.main import GateService
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

Eventually = Callable[..., Awaitable[Any]]
DB = 7
"""This test's own Redis database: it is flushed, the others are not."""


@pytest.fixture
async def own_db(endpoints: Endpoints) -> str:
    url = (endpoints.redis_url or "").rsplit("/", 1)[0] + f"/{DB}"
    client = aioredis.Redis.from_url(url)
    await client.flushdb()
    await client.aclose()
    return url


async def test_far_future_jobs_live_in_kafka_survive_a_redis_loss_and_run_on_time(
    prefix: str,
    own_db: str,
    make_scheduler: Callable[..., SchedulerService],
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    topic_reader: Any,
    token: str,
    eventually: Eventually,
) -> None:
    # the steps below must happen before the job comes within the horizon (run_at - horizon_s): 12 s of
    # room, since the gateway → Kafka → relay trip alone took over 6 s on a loaded 2-core machine
    far = FarSettings.model_validate({"horizon_s": 8, "rescan_s": 1, "topic": f"{prefix}.schedule"})
    topic = make_topic("jobs", partitions=2)
    q = f"{prefix}.q"
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    redis = aioredis.Redis.from_url(own_db)
    engine = Engine(redis)
    scheduler = make_scheduler("s1", redis_url=own_db, far=far)
    ran: dict[str, int] = {}
    done = asyncio.Event()
    registry = Registry()

    @registry.job("far.job", queue=q)
    async def job() -> None:
        ran[current_job().id] = now_ms()
        done.set()

    gate = make_gate(routing, redis_url=own_db, far=far)
    relay = make_relay(topic, far=far, redis_url=own_db)
    async with gate, relay, scheduler, JobqClient([gate.url], token) as client:
        run_at = now_ms() + 20_000
        kept = (await client.enqueue_one(q, "far.job", run_at=run_at))["id"]
        dropped = (await client.enqueue_one(q, "far.job", run_at=run_at))["id"]
        # Both, not just the first: two requests, so the relay may take them in two batches (and a
        # cancel before the relay scheduled ``dropped`` would find nothing to tombstone).
        await relay.signals[topic].batch.wait_for(lambda c: c.get("scheduled", 0) >= 2)
        info, other = await asyncio.gather(client.get_job(q, kept), client.get_job(q, dropped))
        assert info is not None
        assert other is not None
        assert (info["state"], info["run_at"]) == ("scheduled", run_at)
        assert await redis.hgetall(f"jobq:{{{q}}}:job:{kept}") == {}, "no job record in Redis"
        # in a thread: the gateway and relay under test run on this event loop
        records = await asyncio.to_thread(topic_reader, far.topic, 2)
        keys = sorted(r.key().decode() for r in records)
        assert keys == sorted([f"{q}/{kept}", f"{q}/{dropped}"]), "in the schedule topic"
        per_job = int(await redis.memory_usage(f"jobq:{{{q}}}:far") or 0) / 2
        print(f"Redis bytes per far-future job (index entry): {per_job:.0f}")

        assert (await client.cancel(q, dropped)) == "tombstoned"
        gone = await client.get_job(q, dropped)
        assert gone is not None
        assert gone["state"] == "canceled"

        scanned = scheduler.signals.far.scanned
        mark = scanned.mark()
        await redis.flushdb()  # Redis lost everything: the index, the tombstone, the queue list
        # rebuilt by whichever read notices the loss (one under way at the flush may not): watched
        await eventually(lambda: client.get_job(q, kept), lambda i: i is not None, 60)
        await scanned.wait_for(after=mark)

        async with Pool(registry, engine, PoolConfig([q], concurrency=4)):
            await asyncio.wait_for(done.wait(), 60)
            assert ran[kept] >= run_at, "never early"
            mark = scanned.mark()
            await scanned.wait_for(after=mark + 1)  # two whole reads since: the dropped one was not moved
        assert dropped not in ran, "an unscheduled job never runs, Redis lost or not"
        assert await client.get_job(q, dropped) is None
    await redis.aclose()
