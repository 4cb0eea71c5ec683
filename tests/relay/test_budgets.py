"""Per-queue memory budgets (issues 35 and 56): a queue over its budget steps aside into the holding lane
and the other queues of the same topic flow; raising the budget drains it; and two backlogged queues at
the default share never bring Redis to the global guard's marks."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from jqcore import metrics
from jqcore.envelope import encode, new_envelope, record_key
from jqengine import Engine, QueueConfig
from jqrelay.main import RelayService
from jqruntime.kafka import AsyncProducer, Record
from jqstack.procs import free_port
from jqstack.supervise import Children

Produce = Callable[..., Any]
Pending = Callable[[str], Any]

BUDGET = 24_000
"""Bytes: about 15 jobs of 1 KB args (a job hash is ~1.3 KB in Redis)."""


async def test_a_queue_over_its_memory_budget_steps_aside_while_its_topic_flows(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
    producer: AsyncProducer,
    pending: Pending,
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    topic = make_topic("jobs")
    big, small = f"{prefix}.big", f"{prefix}.small"
    await engine.admin.configure_queue(big, QueueConfig(memory_budget=BUDGET))
    envs = [new_envelope(big, "k", {"i": i, "pad": "x" * 1000}) for i in range(100)]
    await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])
    relay = make_relay(topic, batch=10)
    async with relay:
        assert relay.budgets is not None
        relay.budgets.sample_s = 0.05  # a fresh estimate before every batch: the test waits on signals
        signals = relay.signals[topic]
        await signals.held.wait_for(lambda v: v == (big, "memory"), timeout_s=60)
        await relay.budget_signals.over.wait_for(lambda v: v == (big, True))
        assert metrics.RELAY_QUEUE_OVER.labels(big)._value.get() == 1
        assert metrics.RELAY_QUEUE_BUDGET.labels(big)._value.get() == BUDGET

        # the other queue of the same topic flows meanwhile (its records come after the big queue's)
        await produce_jobs(topic, small, 30)
        await eventually(lambda: pending(small), lambda n: n == 30)
        held = await pending(big)
        assert 10 <= held < 100, f"what crossed the budget was written, the rest waits in the lane: {held}"

        # a budget raised at run time lets the held jobs in, every one once
        config = await engine.reads.queue_config(big)
        await engine.admin.configure_queue(big, dataclasses.replace(config, memory_budget=50 * BUDGET))
        await signals.released.wait_for(lambda v: v[0] == big, timeout_s=60)
        assert await pending(big) == 100
        assert metrics.RELAY_QUEUE_OVER.labels(big)._value.get() == 0


BACKLOG = 3200
"""Jobs of ~8.1 kB (as Redis holds them) in each backlog of the two-backlogs test: ~26 MB."""


@pytest.fixture
def small_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis of this test's own with ``maxmemory`` 64 MiB (``noeviction``, as jobq needs)."""
    port = free_port()
    with Children(grace_s=5.0) as children:
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
        argv += [
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory",
            "64mb",
            "--maxmemory-policy",
            "noeviction",
        ]
        child = children.start("redis-small", argv)
        url = f"redis://127.0.0.1:{port}/0"

        def up() -> bool:
            import redis

            try:
                return bool(redis.Redis(port=port, socket_timeout=1).ping())
            except redis.RedisError:
                return False

        child.wait_ready(up, timeout_s=30, what="redis-server answering")
        yield url


async def test_two_backlogs_at_the_default_share_never_reach_the_global_guard(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    small_redis: str,
) -> None:
    """The issue's case: two queues nobody drains, ~26 MB of jobs each in a 64 MiB Redis (each past its
    0.35 share, 23.5 MB, by a margin: a leaner record must not bring a backlog under it). Each stops at its
    share and steps aside; a third queue of the same topic is written meanwhile; the guard never slows down
    or stops."""
    topic = make_topic("jobs")
    a, b, small = f"{prefix}.a", f"{prefix}.b", f"{prefix}.small"
    pad = "x" * 8000
    records = [
        Record(topic, encode(e), record_key(e))
        for q in (a, b)
        for e in (new_envelope(q, "k", {"i": i, "pad": pad}) for i in range(BACKLOG))
    ]
    records += [
        Record(topic, encode(e), record_key(e)) for e in (new_envelope(small, "k", i) for i in range(200))
    ]
    await producer.produce_many(records)
    client = aioredis.Redis.from_url(small_redis)
    relay = make_relay(topic, redis_url=small_redis, batch=50)
    try:
        async with relay:
            assert relay.budgets is not None
            relay.budgets.sample_s = 0.05
            signals = relay.signals[topic]
            await signals.batch.wait_for(lambda c: c.get("read", 0) >= 2 * BACKLOG + 200, timeout_s=120)
            small_engine = Engine(client)
            assert (await small_engine.reads.depth(small)).pending == 200, "the neighbour flowed"
            held = {q for q, why in signals.held.values if why == "memory"}
            assert held == {a, b}, f"both backlogs stepped aside for memory: {signals.held.values}"
            info = await client.info("memory")
            used, maxmemory = int(info["used_memory"]), int(info["maxmemory"])
            assert used < 0.78 * maxmemory, f"below the ceiling: {used / maxmemory:.2f}"
            assert relay.guard_signals.stopped.values == [], "the global guard never stopped"
            assert metrics.RELAY_HELD_TIME.labels(topic, "memory")._value.get() == 0, "nor slowed down"
    finally:
        await client.aclose()


async def test_finished_jobs_kept_until_gc_do_not_count_against_a_budget(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
    pending: Pending,
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    """A queue whose finished jobs (kept a day by default) and their unshipped events hold more than its
    budget is not held: holding it would not free them, and its workers could never bring it back under."""
    topic, q = make_topic("jobs"), f"{prefix}.done"
    await engine.admin.configure_queue(q, QueueConfig(memory_budget=BUDGET))
    await engine.enqueue_batch([new_envelope(q, "k", {"i": i, "pad": "x" * 1000}) for i in range(60)])
    claimed = await engine.jobs.claim(q, 60)
    await engine.jobs.complete_many(q, [((j.id, j.attempt, j.token), b"r" * 500) for j in claimed])
    found = await engine.reads.memory(q)
    assert found.retained > 2 * BUDGET, found
    assert found.finished_jobs == 60, found
    relay = make_relay(topic, batch=10)
    async with relay:
        assert relay.budgets is not None
        relay.budgets.sample_s = 0.05
        await produce_jobs(topic, q, 20)
        await eventually(lambda: pending(q), lambda n: n == 20)
        assert metrics.RELAY_QUEUE_OVER.labels(q)._value.get() == 0
        assert all(queue != q for queue, _ in relay.signals[topic].held.values), "never held"
