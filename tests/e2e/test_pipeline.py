"""The whole path on the real stack: HTTP (gateway) → Kafka → relay (Consul lock) → Redis → worker pool,
and the heartbeat canary proving it per partition."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

import jobq
from canary.main import _line
from canary.monitor import Canary
from jqcore.routing import CANARY_PREFIX, Route, RoutingSettings
from jqcore.testsignal import enable_all
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.client import AsyncClient, Gateway, JobqClient
from jqstack.manager import Endpoints
from kafkagate.main import GateService
from worker.pool import Pool, PoolConfig
from worker.registry import Registry

pytestmark = pytest.mark.usefixtures("scheduler")  # pools run no timers: the service does

Eventually = Callable[..., Awaitable[Any]]


@dataclass
class Pipeline:
    topic: str
    queue: str
    client: JobqClient
    engine: Engine
    redis: aioredis.Redis
    registry: Registry
    gates: list[GateService]
    relay: RelayService
    routing: RoutingSettings


@pytest.fixture
async def pipeline(
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    redis: aioredis.Redis,
    token: str,
) -> AsyncIterator[Pipeline]:
    topic = make_topic("jobs", partitions=3)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    gate_a, gate_b = make_gate(routing, az="az-a"), make_gate(routing, az="az-b")
    relay = make_relay(topic)
    relay.settings.topics[:] = [topic]
    async with gate_a, gate_b, relay:
        gws = [Gateway(gate_a.url, "az-a"), Gateway(gate_b.url, "az-b")]
        async with JobqClient(gws, token, az="az-a") as client:
            yield Pipeline(
                topic, f"{prefix}.q", client, engine, redis, Registry(), [gate_a, gate_b], relay, routing
            )


async def test_jobs_enqueued_over_http_run_exactly_once_on_workers(pipeline: Pipeline) -> None:
    seen: list[int] = []
    done = asyncio.Event()
    n = 200

    @pipeline.registry.job("e2e.add", queue=pipeline.queue)
    async def add(i: int) -> int:
        seen.append(i)
        if len(seen) >= n:
            done.set()
        return i * 2

    ids = await pipeline.client.enqueue(
        pipeline.queue, [{"kind": "e2e.add", "args": {"i": i}} for i in range(n - 1)]
    )
    ids.append((await AsyncClient(pipeline.client).enqueue(add, i=n - 1)).id)  # the front door, same path
    async with Pool(
        pipeline.registry, pipeline.engine, PoolConfig([pipeline.queue], concurrency=20), redis=pipeline.redis
    ):
        await asyncio.wait_for(done.wait(), 120)
    assert sorted(seen) == list(range(n)), "each job ran exactly once"
    job = await pipeline.client.get_job(pipeline.queue, ids[7])
    assert job is not None
    assert (job["state"], job["result"]) == ("completed", "14")


class Word(BaseModel):
    text: str
    letters: int


async def test_a_sync_script_enqueues_with_the_front_door_and_gets_the_typed_result(
    pipeline: Pipeline,
) -> None:
    """``jobq.Client`` from plain synchronous code (the README's first job): two gateways, one zone
    preferred, an enqueue with options, ``result(timeout=)`` decoded as the handler's annotation says."""

    @pipeline.registry.job("e2e.word", queue=pipeline.queue)
    async def word(text: str) -> Word:
        return Word(text=text, letters=len(text))

    urls = ",".join(g.url for g in pipeline.gates)
    token = pipeline.client._headers["Authorization"].removeprefix("Bearer ")

    def script() -> tuple[Word, str, str]:
        with jobq.Client.connect(urls, token) as client:
            now = client.enqueue(word, "hello")
            later = client.enqueue(word.options(delay=0.2, meta={"who": "e2e"}), "later")
            return now.result(timeout=60), later.wait(timeout=60), client.job(later.ref).state()

    async with Pool(pipeline.registry, pipeline.engine, PoolConfig([pipeline.queue]), redis=pipeline.redis):
        got, ended, state = await asyncio.to_thread(script)
    assert got == Word(text="hello", letters=5)
    assert (ended, state) == ("completed", "completed")


async def test_delayed_and_prioritised_jobs_over_http(pipeline: Pipeline, eventually: Eventually) -> None:
    order: list[str] = []
    done = asyncio.Event()

    @pipeline.registry.job("e2e.rec", queue=pipeline.queue)
    async def rec(name: str) -> None:
        order.append(name)
        if len(order) == 4:
            done.set()

    q = pipeline.queue
    # The delay must outlast the trip through gateway, Kafka and relay (else the job arrives already due
    # and is stored pending) and the pool's start (else it competes with "low" on priority): generous,
    # since both take longer on a loaded machine.
    await pipeline.client.enqueue(
        q,
        [
            {"kind": "e2e.rec", "args": {"name": "later"}, "delay_ms": 8000},
            {"kind": "e2e.rec", "args": {"name": "low"}, "priority": 900},
            {"kind": "e2e.rec", "args": {"name": "high"}, "priority": 1},
            {"kind": "e2e.rec", "args": {"name": "mid"}, "priority": 500},
        ],
    )
    # The four records are keyed by job id, so they land on different partitions, which the relay
    # writes separately: wait for all four, not for the first three.
    await pipeline.relay.relays[0].signals.batch.wait_for(lambda c: c.get("written", 0) >= 4)
    depth = (await pipeline.client.queue(q))["depth"]
    assert (depth["pending"], depth["delayed"]) == (3, 1)
    async with Pool(pipeline.registry, pipeline.engine, PoolConfig([q], concurrency=1), redis=pipeline.redis):
        await asyncio.wait_for(done.wait(), 60)
    assert order == ["high", "mid", "low", "later"]


def canary_pool(pipeline: Pipeline, queue: str) -> Pool:
    """A pool for the canary queue whose finished jobs a test can wait on."""
    pool = Pool(Registry(), pipeline.engine, PoolConfig([queue], concurrency=4), redis=pipeline.redis)
    enable_all(pool.signals)
    return pool


async def ran(pool: Pool, canary: Canary) -> None:
    """Until the pool finished every heartbeat ``canary`` has out, then one check: all arrived."""
    out, finished = {probe.id for probe in canary.outstanding.values()}, set()

    def all_ran(job: tuple[str, str]) -> bool:
        finished.add(job[0])
        return out <= finished

    await pool.signals.finished.wait_for(all_ran, 120)
    await canary.check_once()
    assert not canary.outstanding, canary.outstanding


async def test_canary_reaches_every_partition_and_flags_a_dead_hop(
    pipeline: Pipeline, endpoints: Endpoints, eventually: Eventually
) -> None:
    redis = pipeline.engine._client
    canary_queue = CANARY_PREFIX + pipeline.topic
    parts = {pipeline.topic: [0, 1, 2]}
    async with canary_pool(pipeline, canary_queue) as pool:
        canary = Canary(pipeline.client, redis, parts, interval_s=3600, late_after_s=60)
        async with canary:  # started: it waits for a gateway's /readyz, then sends its first round
            while len(canary.health) < 3:  # a round "done" before the first was sent comes first
                await canary.wait_round(60)
            assert {k[1] for k in canary.health} == {0, 1, 2}
            found = await canary.readiness()  # /readyz's judgement: beating, Redis answers
            assert (found.problems, found.facts["partitions"]) == ([], 3)
        assert [p.code for p in (await canary.readiness()).problems] == ["stopping"]
        await canary.send_round()
        assert {k[1] for k in canary.outstanding} == {0, 1, 2}
        await ran(pool, canary)
        once = Canary(pipeline.client, redis, parts, late_after_s=60)  # `jobq canary --once` (helm test)
        health = await once.one_round(gateway_wait_s=30)  # a round on its own, waited for
        assert all(health[(pipeline.topic, p)]["ok"] for p in (0, 1, 2)), health
        assert not once.outstanding
        assert _line(pipeline.topic, 0, health[(pipeline.topic, 0)]).startswith(
            f"{pipeline.topic}[0] ok: gate "
        )
    assert all(canary.health[(pipeline.topic, p)]["ok"] for p in (0, 1, 2)), canary.health
    assert all(canary.health[(pipeline.topic, p)]["ms"]["total"] >= 0 for p in (0, 1, 2))

    # no worker serves the canary queue now: the next heartbeat is flagged late, stuck in Redis
    late = Canary(pipeline.client, redis, {pipeline.topic: [1]}, interval_s=3600, late_after_s=1.0)
    written = pipeline.relay.relays[0].counts.get("written", 0)  # the two rounds above
    await late.send_round()
    probe = late.outstanding[(pipeline.topic, 1)]
    # first let the relay store it (how long that takes is not the point): then "late" means "in Redis"
    await pipeline.relay.relays[0].signals.batch.wait_for(lambda c: c.get("written", 0) > written)
    assert await pipeline.client.get_job(canary_queue, probe.id) is not None
    # late_after_s must pass: the clock is what is waited for here, nothing in this process produces it
    await eventually(late.check_once, lambda _: not late.outstanding, 60)
    result = late.health[(pipeline.topic, 1)]
    assert result["ok"] is False
    assert "late: in Redis, pending" in result["problem"]


async def test_stopping_the_relay_turns_the_canary_red_and_a_new_relay_green_again(
    pipeline: Pipeline, make_relay: Callable[..., RelayService], eventually: Eventually
) -> None:
    redis = pipeline.engine._client
    parts = {pipeline.topic: [0, 1, 2]}
    canary_queue = CANARY_PREFIX + pipeline.topic
    relay = pipeline.relay
    async with canary_pool(pipeline, canary_queue) as pool:
        # Green rounds get a patient canary: a heartbeat is only green if it completes before it is
        # declared late, and the whole path takes longer on a loaded machine. The red round (no relay
        # at all) gets a quick one: nothing can reach Redis, however long it waits.
        green = Canary(pipeline.client, redis, parts, interval_s=3600, late_after_s=60)
        await green.send_round()
        await ran(pool, green)
        assert all(green.health[(pipeline.topic, p)]["ok"] for p in (0, 1, 2)), green.health

        await relay.stop()  # every partition of the topic loses its relay
        red = Canary(pipeline.client, redis, parts, interval_s=3600, late_after_s=2.0)
        await red.send_round()
        # no relay, so nothing happens to wait for but late_after_s passing on the clock
        await eventually(red.check_once, lambda _: not red.outstanding, 60)
        for p in (0, 1, 2):
            health = red.health[(pipeline.topic, p)]
            assert health["ok"] is False, health
            assert "not in Redis (not relayed)" in health["problem"], health

        async with make_relay(pipeline.topic, "relay-again"):
            await green.send_round()
            await ran(pool, green)
            assert all(green.health[(pipeline.topic, p)]["ok"] for p in (0, 1, 2)), green.health


async def test_reconcile_accounts_for_every_job_end_to_end(
    pipeline: Pipeline, endpoints: Endpoints, eventually: Eventually
) -> None:
    from jqcore.settings.kafka import KafkaSettings
    from jqcore.settings.servers import RedisSettings
    from jqrecover.reconcile import collect

    done = asyncio.Event()
    seen: list[int] = []

    @pipeline.registry.job("e2e.count", queue=pipeline.queue)
    async def count(i: int) -> None:
        seen.append(i)
        if len(seen) == 30:
            done.set()

    await pipeline.client.enqueue(
        pipeline.queue, [{"kind": "e2e.count", "args": {"i": i}} for i in range(30)]
    )
    async with Pool(pipeline.registry, pipeline.engine, PoolConfig([pipeline.queue]), redis=pipeline.redis):
        await asyncio.wait_for(done.wait(), 120)

    def snapshot() -> dict[str, Any]:
        rows = collect(
            pipeline.routing,
            pipeline.relay.settings,
            KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
            RedisSettings(url=endpoints.redis_url or ""),
        )
        return rows[0]

    async def row() -> dict[str, Any]:
        return await asyncio.to_thread(snapshot)

    await pipeline.relay.relays[0].signals.committed.wait_for(lambda n: n >= 30)
    # the gateways' produced counter is flushed to Redis on a timer of theirs: that one is watched
    got = await eventually(row, lambda r: r["written"] == 30 and r["produced"] == 30, 60)
    assert got["appended"] == 30
    assert got["read"] == 30
    assert all(got["checks"].values()), got["checks"]
    assert got["queues"][pipeline.queue]["completed"] == 30
