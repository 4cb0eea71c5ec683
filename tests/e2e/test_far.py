"""The far-future tier on the real stack: a job due beyond the horizon (shortened here so the test stays
quick) is kept in the compacted schedule topic with only an index entry in Redis; GET answers
``scheduled``; DELETE unschedules it. The scheduler reads a partition whole only once, when it gains it:
the jobs written after come from the tail; Redis losing everything (FLUSHDB) loses no far-future job (its
entry is written again from the scheduler's memory) and it runs on time, the unscheduled one never; an
instance gone, another builds its partitions from the topic and moves their jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqcore.envelope import encode, new_envelope
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import FarSettings
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.client import JobqClient
from jqruntime.kafka import AsyncProducer, schedule_record
from jqruntime.stores.membership import deal_evenly
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
    far = FarSettings.model_validate({"horizon_s": 8, "topic": f"{prefix}.schedule"})
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
        mover = scheduler.mover
        assert mover is not None
        await scheduler.signals.far.built.wait_for(lambda _: mover.builds == len(mover.owned) > 0)
        builds = mover.builds
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
        assert await redis.type(f"jobq:{{{q}}}:far") == b"hash"
        per_job = int(await redis.memory_usage(f"jobq:{{{q}}}:far") or 0) / 2
        print(f"Redis bytes per far-future job (index entry): {per_job:.0f}")

        assert (await client.cancel(q, dropped)) == "tombstoned"
        gone = await client.get_job(q, dropped)
        assert gone is not None
        assert gone["state"] == "canceled"

        signals = scheduler.signals.far
        mark = signals.rewritten.mark()
        await redis.flushdb()  # Redis lost everything: the index, the tombstone, the queue list
        _, entries = await signals.rewritten.wait_for(lambda r: r[1] > 0, after=mark)
        assert entries == 1, "only the live job's entry is written again (the dropped one was tombstoned)"
        info = await client.get_job(q, kept)
        assert info is not None
        assert (info["state"], info["run_at"]) == ("scheduled", run_at), "from the scheduler's memory"
        assert await client.get_job(q, dropped) is None

        async with Pool(registry, engine, PoolConfig([q], concurrency=4), redis=redis):
            # both were due in the same second: one move would have taken the dropped one with the kept
            assert await signals.moved.wait_for(lambda n: n > 0) == 1
            await asyncio.wait_for(done.wait(), 60)
            assert ran[kept] >= run_at, "never early"
        assert dropped not in ran, "an unscheduled job never runs, Redis lost or not"
        assert await client.get_job(q, dropped) is None
        assert mover.builds == builds, "no partition was read whole again: the records came from the tail"
    await redis.aclose()


async def test_an_instance_gone_its_partitions_are_built_by_another_and_their_jobs_moved(
    prefix: str, endpoints: Endpoints, make_scheduler: Callable[..., SchedulerService], eventually: Eventually
) -> None:
    far = FarSettings.model_validate({"horizon_s": 2, "topic": f"{prefix}.schedule", "partitions": 2})
    names = (f"{prefix}-a", f"{prefix}-b")
    dealt = deal_evenly([f"{far.topic}/{p}" for p in (0, 1)], names)
    assert set(dealt.values()) == set(names), "two partitions, two instances: one each"
    first, second = (make_scheduler(n, far=far) for n in names)
    q = f"{prefix}.q"
    redis = aioredis.Redis.from_url(endpoints.redis_url or "")
    engine = Engine(redis)
    producer = AsyncProducer(KafkaSettings(bootstrap=endpoints.kafka_bootstrap))
    async with second:
        async with first:
            movers = [s.mover for s in (first, second)]
            for m in movers:
                assert m is not None
                m.park_s = 0  # a partition lost is dropped at once (else regained without a build)
            for s in (first, second):  # each has built what it owns (what it gains later: built then)
                await s.signals.far.built.wait_for(lambda _: True)
            run_at = now_ms() + 8_000  # moved 2 s before: 6 s from now
            envs = [new_envelope(q, "far.job", None, run_at=run_at) for _ in range(40)]
            # written as the relay writes them: the record, then the index entry
            records = [schedule_record(far.topic, q, e.id, run_at, encode(e)) for e in envs]
            delivered = await producer.produce_many(records)
            await engine.schedule_far(q, [(e.id, run_at) for e in envs])
            theirs = sum(1 for d in delivered if dealt[f"{far.topic}/{d.partition}"] == names[0])
            assert 0 < theirs < len(envs), "both partitions hold some"
            first_mover = first.mover
            assert first_mover is not None
            await eventually(lambda: first_mover.status()["indexed"], lambda n: n == theirs, 10)
        # the first is gone (it left the group): the second builds its partition from the topic, moves all
        gained = await second.signals.far.built.wait_for(lambda b: b[1] > 0, timeout_s=10)
        assert gained[1] == theirs, "the gained partition's live records, read from the topic"
        mover = second.mover
        assert mover is not None
        await eventually(lambda: mover.moved, lambda n: n >= len(envs), 20)
        assert mover.moved == len(envs)
        jobs = await engine.reads.get_jobs(q, [e.id for e in envs])
        assert all(j is not None and j.state in ("delayed", "pending") for j in jobs), "moved into Redis"
        assert [j.run_at for j in jobs if j is not None] == [run_at] * len(envs)
    await asyncio.to_thread(producer.close, 5.0)
    await redis.aclose()
